"""Load generated Triton kernel sources as real modules (Triton's JIT needs `inspect.getsource`).

`load_kernel(source, name)` writes `source` to `<cache dir>/<sha256 of source>.py` (once; the
file name is its content hash, so concurrent writers agree), imports it as a module, and returns
the attribute `name` (normally a `@triton.jit` function). Results are cached in memory by
(source, name, interpreter mode), and loading is thread-safe. `triton.jit` decides at import
whether a kernel is interpreted (TRITON_INTERPRET=1) or compiled, so a source imported in one
mode is imported again, as a separate module, in the other.

The cache directory is `$TENSORSMITH_KERNEL_CACHE` if set, else `~/.cache/tensorsmith/kernels`,
else (HOME unwritable) `<tempdir>/tensorsmith-kernels-<uid>`.
"""

from __future__ import annotations

import hashlib
import importlib.util
import os
import sys
import tempfile
import threading
from types import ModuleType
from typing import Any

_LOCK = threading.RLock()
_MODULES: dict[tuple[str, bool], ModuleType] = {}  # by (source sha, interpreted)
_KERNELS: dict[tuple[str, bool, str], Any] = {}  # by (source sha, interpreted, name)
_CACHE_DIR: str | None = None


def _writable_dir(path: str) -> bool:
    try:
        os.makedirs(path, exist_ok=True)
        probe = os.path.join(path, f".probe-{os.getpid()}-{threading.get_ident()}")
        with open(probe, "w") as f:
            f.write("")
        os.remove(probe)
        return True
    except OSError:
        return False


def cache_dir() -> str:
    """The directory kernel sources are written to (created on first use)."""
    global _CACHE_DIR
    if _CACHE_DIR is not None:
        return _CACHE_DIR
    candidates = []
    env = os.environ.get("TENSORSMITH_KERNEL_CACHE")
    if env:
        candidates.append(env)
    candidates.append(os.path.join(os.path.expanduser("~"), ".cache", "tensorsmith", "kernels"))
    uid = os.getuid() if hasattr(os, "getuid") else "user"
    candidates.append(os.path.join(tempfile.gettempdir(), f"tensorsmith-kernels-{uid}"))
    for c in candidates:
        if _writable_dir(c):
            _CACHE_DIR = c
            return c
    _CACHE_DIR = tempfile.mkdtemp(prefix="tensorsmith-kernels-")
    return _CACHE_DIR


def _write_source(path: str, source: str) -> None:
    if os.path.exists(path):
        try:
            with open(path, encoding="utf-8") as f:
                if f.read() == source:
                    return
        except OSError:
            pass
    # Write to a private temporary file, then rename atomically: no reader sees a partial file.
    fd, tmp = tempfile.mkstemp(dir=os.path.dirname(path), suffix=".tmp")
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            f.write(source)
        os.replace(tmp, path)
    except BaseException:
        try:
            os.remove(tmp)
        except OSError:
            pass
        raise


def _interpreted() -> bool:
    """Whether triton.jit makes interpreted functions now (what Triton itself reads)."""
    try:
        from triton import knobs

        return bool(knobs.runtime.interpret)
    except (ImportError, AttributeError):
        return os.environ.get("TRITON_INTERPRET", "0").lower() in ("1", "true", "on", "yes")


def load_module(source: str) -> ModuleType:
    """The module made from `source` (written to the kernel cache and imported once per mode)."""
    sha = hashlib.sha256(source.encode("utf-8")).hexdigest()
    key = (sha, _interpreted())
    with _LOCK:
        mod = _MODULES.get(key)
        if mod is not None:
            return mod
        path = os.path.join(cache_dir(), f"{sha}.py")
        _write_source(path, source)
        mod_name = f"tensorsmith_kernel_{sha[:32]}{'_interpreted' if key[1] else ''}"
        spec = importlib.util.spec_from_file_location(mod_name, path)
        if spec is None or spec.loader is None:
            raise ImportError(f"cannot import generated kernel source {path}")
        mod = importlib.util.module_from_spec(spec)
        # Registered in sys.modules so that inspect/linecache (used by triton.jit) find the source.
        sys.modules[mod_name] = mod
        try:
            spec.loader.exec_module(mod)
        except BaseException:
            sys.modules.pop(mod_name, None)
            raise
        _MODULES[key] = mod
        return mod


def load_kernel(source: str, name: str) -> Any:
    """The object `name` (a @triton.jit function) defined by the kernel source `source`."""
    sha = hashlib.sha256(source.encode("utf-8")).hexdigest()
    key = (sha, _interpreted(), name)
    k = _KERNELS.get(key)
    if k is not None:
        return k
    with _LOCK:
        k = _KERNELS.get(key)
        if k is not None:
            return k
        mod = load_module(source)
        try:
            k = getattr(mod, name)
        except AttributeError:
            raise AttributeError(f"generated kernel source defines no '{name}'") from None
        _KERNELS[key] = k
        return k


__all__ = ["cache_dir", "load_kernel", "load_module"]
