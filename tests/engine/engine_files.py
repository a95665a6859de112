"""Helpers for engine-file tests: read and rewrite a file's manifest (re-sealing its checksum)."""

from __future__ import annotations

import hashlib
import json

from tensorsmith.engine.serialize import _HEADER, HEADER_SIZE


def split(blob: bytes) -> tuple[dict, bytes]:
    _, _, n_manifest, _, _ = _HEADER.unpack_from(blob)
    return json.loads(blob[HEADER_SIZE:HEADER_SIZE + n_manifest]), blob[HEADER_SIZE + n_manifest:]


def seal(manifest: dict | bytes, weights: bytes, version: int = 1) -> bytes:
    """An engine file around `manifest` and `weights`, with a valid header and checksum."""
    body = manifest if isinstance(manifest, bytes) else json.dumps(manifest).encode()
    digest = hashlib.sha256(body + weights).digest()
    return _HEADER.pack(b"TSMITH\r\n", version, len(body), len(weights), digest) + body + weights


def edit(blob: bytes, fn) -> bytes:
    """The file with `fn(manifest)` applied to its manifest, re-sealed."""
    manifest, weights = split(blob)
    fn(manifest)
    return seal(manifest, weights)
