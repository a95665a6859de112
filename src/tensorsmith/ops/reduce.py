"""Reductions: ReduceSum, ReduceMean, ReduceMax, ReduceMin, ReduceProd, ReduceL1, ReduceL2,
ReduceLogSum, ReduceLogSumExp and ReduceSumSquare.

The importer moves the legacy `axes` attribute to input 1, so each reference takes (data, axes).
Empty (or absent) axes mean every axis, unless noop_with_empty_axes is set, in which case the
op is the identity. A reduction over an empty set gives the op's identity element (0 for sums,
1 for products, -inf for max and log-sums, +inf for min), as ONNX's reference does.
"""

from __future__ import annotations

import math

import torch

from ..ir import TensorType
from ._util import ints, normalize_axis
from .registry import InferContext, register

_HALF = (torch.float16, torch.bfloat16)


def _reduce_axes(ctx, x: torch.Tensor, axes: torch.Tensor | None) -> list[int] | None:
    """The normalized axes to reduce, or None when the op is the identity."""
    axes_list = ints(axes) or []
    if not axes_list:
        if ctx.attr("noop_with_empty_axes", 0):
            return None
        return list(range(x.dim()))
    norm = sorted({normalize_axis(a, x.dim()) for a in axes_list})
    if len(norm) != len(axes_list):
        raise ValueError(f"axes {axes_list} repeat an axis")
    return norm


def _out_shape(shape, axes: list[int], keepdims: bool) -> list:
    if keepdims:
        return [1 if i in axes else d for i, d in enumerate(shape)]
    return [d for i, d in enumerate(shape) if i not in axes]


def _empty_value(op: str, dtype: torch.dtype) -> float | int | bool:
    """The result of reducing an empty set (infinities saturate for integer types)."""
    v = _empty_float(op, dtype)
    if dtype.is_floating_point or dtype == torch.bool or math.isfinite(v):
        return v
    if math.isnan(v):
        return 0
    info = torch.iinfo(dtype)
    return info.min if v < 0 else info.max


def _empty_float(op: str, dtype: torch.dtype) -> float | int | bool:
    if op in ("ReduceMax", "ReduceMin"):
        if dtype == torch.bool:
            return op == "ReduceMin"  # all() of nothing is true, any() is false
        if dtype.is_floating_point:
            return -math.inf if op == "ReduceMax" else math.inf
        info = torch.iinfo(dtype)
        return info.min if op == "ReduceMax" else info.max
    if op == "ReduceProd":
        return 1
    if op in ("ReduceLogSum", "ReduceLogSumExp"):
        return -math.inf
    if op == "ReduceMean":
        return math.nan
    return 0


def _compute_dtype(op: str, dtype: torch.dtype) -> torch.dtype:
    """Where each reduction is computed: half floats in float32, integers wide enough to be exact."""
    if dtype in _HALF:
        return torch.float32
    if dtype.is_floating_point:
        return dtype
    if op in ("ReduceMean", "ReduceL2", "ReduceLogSum", "ReduceLogSumExp"):
        return torch.float64
    return torch.int64


def _max_min(op: str, x: torch.Tensor, axes: list[int], keepdims: bool) -> torch.Tensor:
    dtype = x.dtype
    if dtype == torch.bool:
        fn = torch.any if op == "ReduceMax" else torch.all
        for a in sorted(axes, reverse=True):
            x = fn(x, dim=a, keepdim=keepdims)
        return x
    if dtype == torch.uint64:
        # Flipping the sign bit maps uint64 order onto int64 order, so int64 kernels apply.
        flipped = x.view(torch.int64) ^ torch.iinfo(torch.int64).min
        r = _max_min(op, flipped, axes, keepdims)
        return (r ^ torch.iinfo(torch.int64).min).view(torch.uint64)
    if dtype in (torch.uint16, torch.uint32):
        return _max_min(op, x.to(torch.int64), axes, keepdims).to(dtype)
    fn = torch.amax if op == "ReduceMax" else torch.amin
    return fn(x, dim=axes, keepdim=keepdims)


def _kernel(op: str, x: torch.Tensor, axes: list[int], keepdims: bool) -> torch.Tensor:
    """The reduction of a non-empty tensor, in its compute dtype."""
    kw = {"dim": axes, "keepdim": keepdims}
    if op == "ReduceSum":
        return torch.sum(x, **kw)
    if op == "ReduceMean":
        return torch.mean(x, **kw)
    if op == "ReduceL1":
        return torch.sum(x.abs(), **kw)
    if op == "ReduceL2":
        return torch.sqrt(torch.sum(x * x, **kw))
    if op == "ReduceSumSquare":
        return torch.sum(x * x, **kw)
    if op == "ReduceLogSum":
        return torch.log(torch.sum(x, **kw))
    if op == "ReduceLogSumExp":
        return torch.logsumexp(x, **kw)
    if op == "ReduceProd":
        # torch.prod takes one dim at a time.
        for a in sorted(axes, reverse=True):
            x = torch.prod(x, dim=a, keepdim=keepdims)
        return x
    raise AssertionError(op)


def _cast_back(r: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
    if r.dtype == dtype:
        return r
    if dtype == torch.uint64 and r.dtype == torch.int64:
        return r.view(torch.uint64)  # same bits: wrapping sums agree
    if dtype in (torch.uint16, torch.uint32) and r.dtype == torch.int64:
        return (r & ((1 << (dtype.itemsize * 8)) - 1)).to(dtype)
    return r.to(dtype)


def _reduce(op: str, ctx, x: torch.Tensor, axes: torch.Tensor | None) -> torch.Tensor:
    dims = _reduce_axes(ctx, x, axes)
    if dims is None:
        return x
    keepdims = bool(ctx.attr("keepdims", 1))
    if x.numel() == 0 or any(x.shape[a] == 0 for a in dims):
        shape = _out_shape(x.shape, dims, keepdims)
        return torch.full(shape, _empty_value(op, x.dtype), dtype=x.dtype, device=x.device)
    if x.dim() == 0:  # torch reads dim=[] as "all dims", but its kernels want one
        x, dims, keepdims = x.reshape(1), [0], False
    if op in ("ReduceMax", "ReduceMin"):
        return _max_min(op, x, dims, keepdims)
    return _cast_back(_kernel(op, _widen(op, x), dims, keepdims), x.dtype)


def _widen(op: str, x: torch.Tensor) -> torch.Tensor:
    work = _compute_dtype(op, x.dtype)
    if x.dtype != torch.uint64:
        return x.to(work)
    bits = x.view(torch.int64)  # integer sums and products wrap alike in int64 and uint64
    if work == torch.int64:
        return bits
    return bits.to(work) + (bits < 0).to(work) * 2.0**64


def _infer_reduce(ctx: InferContext) -> list[TensorType]:
    x = ctx.input(0)
    dtype = x.dtype if x else None
    if x is None or x.shape is None:
        return [TensorType(dtype, None)]
    rank = len(x.shape)
    keepdims = bool(ctx.attr("keepdims", 1))
    axes_type = ctx.input(1)
    axes_const = ctx.const(1)
    if axes_type is not None and axes_const is None:
        # Axes known only at run time: the rank is still known when dims are kept.
        if keepdims and not ctx.attr("noop_with_empty_axes", 0):
            name = ctx.node.name or ctx.node.op_type
            shape = tuple(d if d == 1 else f"{name}_reduced{i}" for i, d in enumerate(x.shape))
            return [TensorType(dtype, shape)]
        return [TensorType(dtype, None)]
    axes_list = ints(axes_const) or []
    if not axes_list:
        if ctx.attr("noop_with_empty_axes", 0):
            return [TensorType(dtype, x.shape)]
        axes_list = list(range(rank))
    try:
        norm = {normalize_axis(a, rank) for a in axes_list}
    except ValueError as e:
        raise ctx.fail(str(e)) from None
    if len(norm) != len(axes_list):
        raise ctx.fail(f"axes {axes_list} repeat an axis")
    return [TensorType(dtype, tuple(_out_shape(x.shape, sorted(norm), keepdims)))]


def _register(op: str) -> None:
    def ref(ctx, x, axes=None):
        return _reduce(op, ctx, x, axes)

    ref.__name__ = op
    register(op, infer=_infer_reduce)(ref)


for _op in (
    "ReduceSum", "ReduceMean", "ReduceMax", "ReduceMin", "ReduceProd", "ReduceL1", "ReduceL2",
    "ReduceLogSum", "ReduceLogSumExp", "ReduceSumSquare",
):
    _register(_op)
