"""Checking and converting the tensors a user feeds to an engine."""

from __future__ import annotations

from typing import Any, Mapping

import numpy as np
import torch

from ..engine import IOTensor
from ..errors import InputError, TensorsmithError
from ..ir import DType, TensorType


def to_torch(value: Any, name: str) -> torch.Tensor:
    if isinstance(value, torch.Tensor):
        return value
    if isinstance(value, np.ndarray) or np.isscalar(value):
        arr = np.asarray(value)
        try:
            DType.from_numpy(arr.dtype)
        except TensorsmithError:
            raise InputError(f"input '{name}': unsupported numpy dtype {arr.dtype}; pass a numeric array", name) from None
        if arr.dtype.name == "bfloat16" or arr.dtype.name.startswith("float8"):
            from ..frontends.onnx_import import numpy_to_torch

            return numpy_to_torch(arr, DType.from_numpy(arr.dtype))
        return torch.from_numpy(arr if arr.flags.c_contiguous else np.ascontiguousarray(arr))
    raise InputError(f"input '{name}': expected a numpy array or torch tensor, got {type(value).__name__}", name)


def check_feeds(feeds: Mapping[str, Any], specs: list[IOTensor]) -> dict[str, torch.Tensor]:
    """Validate names, dtypes, ranks and dims (symbols must agree across inputs)."""
    if not isinstance(feeds, Mapping):
        raise InputError(f"feeds must be a dict from input name to tensor; the engine's inputs are {[s.name for s in specs]}")
    expected = {s.name: s for s in specs}
    for name in feeds:
        if name not in expected:
            raise InputError(f"unknown input '{name}'; the engine's inputs are {sorted(expected)}", name)
    symbols: dict[str, tuple[int, str]] = {}
    out = {}
    for spec in specs:
        if spec.name not in feeds:
            raise InputError(f"missing input '{spec.name}' ({spec.type}); pass it in the feeds", spec.name)
        t = to_torch(feeds[spec.name], spec.name)
        want = spec.type or TensorType(None, None)  # an untyped input accepts any tensor
        got_dtype = DType.from_torch(t.dtype) if t.dtype in _TORCH_OK else None
        if want.dtype is not None and got_dtype != want.dtype:
            raise InputError(
                f"input '{spec.name}' has dtype {got_dtype or t.dtype}, the engine expects {want.dtype}; "
                f"cast it (e.g. x.astype(np.{want.dtype.value}))", spec.name)
        if want.shape is not None:
            if t.dim() != len(want.shape):
                raise InputError(
                    f"input '{spec.name}' has shape {list(t.shape)} (rank {t.dim()}), the engine expects "
                    f"{want} (rank {len(want.shape)})", spec.name)
            for axis, (d, n) in enumerate(zip(want.shape, t.shape)):
                if isinstance(d, int) and d != n:
                    raise InputError(
                        f"input '{spec.name}' has shape {list(t.shape)}, the engine expects {want}: "
                        f"dim {axis} must be {d}", spec.name)
                if isinstance(d, str):
                    seen = symbols.setdefault(d, (n, spec.name))
                    if seen[0] != n:
                        raise InputError(
                            f"input '{spec.name}' dim {axis} ('{d}') is {n}, but input '{seen[1]}' set '{d}' to "
                            f"{seen[0]}; dims with one name must have one size", spec.name)
        out[spec.name] = t
    return out


_TORCH_OK = {d.torch for d in DType}
