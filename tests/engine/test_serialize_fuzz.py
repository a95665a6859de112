"""Property: whatever happens to an engine file's bytes, loading it either works or raises an
EngineFormatError subclass (never a bare exception from JSON, safetensors or the IR)."""

import json

import numpy as np
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import tensorsmith
from tensorsmith.errors import EngineFormatError, TensorsmithError
from tests.conftest import make_mlp_model
from tests.engine.engine_files import seal, split

BLOB = tensorsmith.build(make_mlp_model()).serialize()
MANIFEST, WEIGHTS = split(BLOB)
RT = tensorsmith.Runtime()
FAST = settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow], derandomize=True)


def _load_or_typed_error(blob: bytes) -> None:
    try:
        engine = RT.deserialize(blob)
    except EngineFormatError:
        return
    try:  # a manifest edited consistently may load; running it may then fail, but only with a typed error
        engine.run({"x": np.zeros((2, 4), np.float32)})
    except TensorsmithError:
        pass


@FAST
@given(st.data())
def test_mutated_bytes(data):
    blob = bytearray(BLOB)
    for _ in range(data.draw(st.integers(1, 4))):
        kind = data.draw(st.sampled_from(["flip", "truncate", "insert", "delete"]))
        at = data.draw(st.integers(0, max(len(blob) - 1, 0)))
        if kind == "flip" and blob:
            blob[at] ^= data.draw(st.integers(1, 255))
        elif kind == "truncate":
            del blob[at:]
        elif kind == "insert":
            blob[at:at] = data.draw(st.binary(min_size=1, max_size=8))
        elif blob:
            del blob[at]
    _load_or_typed_error(bytes(blob))


_JSON = st.recursive(
    st.none() | st.booleans() | st.integers(-3, 10**6) | st.floats(allow_nan=False) | st.text(max_size=6),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=4), inner, max_size=3),
    max_leaves=6,
)


def _paths(obj, prefix=()):
    yield prefix
    if isinstance(obj, dict):
        for k, v in obj.items():
            yield from _paths(v, prefix + (k,))
    elif isinstance(obj, list):
        for i, v in enumerate(obj):
            yield from _paths(v, prefix + (i,))


PATHS = [p for p in _paths(MANIFEST) if p]


@FAST
@given(st.data())
def test_mutated_manifest_with_a_valid_checksum(data):
    """The checksum passes, so the decoder itself must reject what does not make sense."""
    manifest = json.loads(json.dumps(MANIFEST))
    for _ in range(data.draw(st.integers(1, 3))):
        path = data.draw(st.sampled_from(PATHS))
        parent = manifest
        try:
            for k in path[:-1]:
                parent = parent[k]
            if data.draw(st.booleans()) and isinstance(parent, dict):
                del parent[path[-1]]
            else:
                parent[path[-1]] = data.draw(_JSON)
        except (KeyError, IndexError, TypeError):
            continue  # an earlier edit removed this path
    _load_or_typed_error(seal(manifest, WEIGHTS))


@FAST
@given(st.binary(max_size=64), st.integers(0, len(WEIGHTS)))
def test_mutated_weights_with_a_valid_checksum(junk, at):
    _load_or_typed_error(seal(MANIFEST, WEIGHTS[:at] + junk))
