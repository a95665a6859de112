"""Ops that make tensors of a shape (Expand, Tile, Pad, ConstantOfShape, Range, EyeLike, Trilu),
report shapes (Shape, Size), or move blocks between dims (DepthToSpace, SpaceToDepth,
CenterCropPad). Their inference rules read shape inputs through `shape_value` as the reshape
family does (tensor_shape.py), so shape subgraphs infer static or symbolic dims.
"""

from __future__ import annotations

import math

import torch

from ..ir import DType, TensorType
from ._util import ints, normalize_axis
from .inference import fresh_dim
from .registry import InferContext, register, same_as
from .shape_values import dim_product, dim_sum, fresh_shape, shape_range, shape_value, static_length

INT64 = DType.INT64


# -- Expand, Tile, Pad ----------------------------------------------------------------


def _broadcast_dims(a, b) -> list:
    rank = max(len(a), len(b))
    a = [1] * (rank - len(a)) + list(a)
    b = [1] * (rank - len(b)) + list(b)
    out = []
    for x, y in zip(a, b):
        if x == 1 or x == y:
            out.append(y)
        elif y == 1:
            out.append(x)
        elif isinstance(x, str) and isinstance(y, str):
            out.append(fresh_dim())  # either may be 1 at run time
        elif isinstance(x, str) or isinstance(y, str):
            out.append(y if isinstance(x, str) else x)
        else:
            raise ValueError(f"Expand: dims {x} and {y} do not broadcast")
    return out


def _expand_infer(ctx: InferContext) -> list[TensorType]:
    s, dt = ctx.shape(), ctx.dtype()
    target = shape_value(ctx, 1)
    if s is None or target is None:
        n = static_length(ctx, 1)
        rank = None if n is None or s is None else max(n, len(s))
        return [TensorType(dt, None if rank is None else fresh_shape(rank))]
    try:
        return [TensorType(dt, tuple(_broadcast_dims(s, target)))]
    except ValueError as e:
        raise ctx.fail(str(e)) from None


@register("Expand", infer=_expand_infer)
def expand(ctx, x, shape):
    return x.expand(_broadcast_dims(list(x.shape), ints(shape)))


def _tile_infer(ctx: InferContext) -> list[TensorType]:
    s, dt = ctx.shape(), ctx.dtype()
    reps = shape_value(ctx, 1)
    if s is None:
        return [TensorType(dt, None)]
    if reps is None:
        return [TensorType(dt, fresh_shape(len(s)))]
    return [TensorType(dt, tuple(d if r == 1 else dim_product([d, r]) for d, r in zip(s, reps)))]


@register("Tile", infer=_tile_infer)
def tile(ctx, x, repeats):
    reps = ints(repeats)
    if len(reps) != x.dim():
        raise ValueError(f"Tile: {len(reps)} repeats for rank {x.dim()}")
    return x.repeat(reps)


def _pad_widths(rank: int, pads: list[int], axes: list[int] | None) -> list[tuple[int, int]]:
    axes = list(range(rank)) if axes is None else [normalize_axis(a, rank) for a in axes]
    if len(pads) != 2 * len(axes):
        raise ValueError(f"Pad: {len(pads)} pads for {len(axes)} axes")
    widths = [(0, 0)] * rank
    for j, a in enumerate(axes):
        widths[a] = (pads[j], pads[j + len(axes)])
    return widths


def _pad_index(dim: int, before: int, after: int, mode: str, device) -> torch.Tensor:
    """Source index of each output position along one axis, for reflect/edge/wrap."""
    i = torch.arange(-before, dim + after, device=device)
    if mode == "edge":
        return i.clamp(0, dim - 1)
    if mode == "wrap":
        return i.remainder(dim)
    if dim == 1:
        return torch.zeros_like(i)
    period = 2 * (dim - 1)
    i = i.remainder(period)
    return torch.where(i < dim, i, period - i)


def _pad_infer(ctx: InferContext) -> list[TensorType]:
    s, dt = ctx.shape(), ctx.dtype()
    if s is None:
        return [TensorType(dt, None)]
    pads = shape_value(ctx, 1)
    has_axes = len(ctx.node.inputs) > 3 and ctx.node.inputs[3] is not None
    axes = shape_value(ctx, 3) if has_axes else None
    if pads is None or (has_axes and axes is None) or not all(isinstance(p, int) for p in pads):
        return [TensorType(dt, fresh_shape(len(s)))]
    widths = _pad_widths(len(s), pads, axes)
    return [TensorType(dt, tuple(dim_sum([d, b + e]) for d, (b, e) in zip(s, widths)))]


@register("Pad", infer=_pad_infer)
def pad(ctx, x, pads, constant_value=None, axes=None):
    mode = ctx.attr("mode", "constant")
    widths = _pad_widths(x.dim(), ints(pads), ints(axes))
    # Negative pads crop; crop first, then pad what is left.
    crop = tuple(slice(max(-b, 0), x.shape[a] - max(-e, 0)) for a, (b, e) in enumerate(widths))
    x = x[crop]
    widths = [(max(b, 0), max(e, 0)) for b, e in widths]
    if mode == "constant":
        value = 0 if constant_value is None or constant_value.numel() == 0 else constant_value.reshape(-1)[0].item()
        out = x.new_full([d + b + e for d, (b, e) in zip(x.shape, widths)], value)
        out[tuple(slice(b, b + d) for d, (b, _) in zip(x.shape, widths))] = x
        return out
    if mode not in ("reflect", "edge", "wrap"):
        raise ValueError(f"Pad: unknown mode '{mode}'")
    for a, (b, e) in enumerate(widths):
        if b or e:
            if x.shape[a] == 0:
                raise ValueError(f"Pad: cannot {mode}-pad the empty axis {a}")
            x = x.index_select(a, _pad_index(x.shape[a], b, e, mode, x.device))
    return x


# -- Shape, Size ----------------------------------------------------------------------


def _shape_infer(ctx: InferContext) -> list[TensorType]:
    s = ctx.shape()
    if s is None:
        return [TensorType(INT64, (fresh_dim(),))]
    start, end = shape_range(ctx.node.attrs, len(s))
    return [TensorType(INT64, (max(0, end - start),))]


@register("Shape", infer=_shape_infer)
def shape(ctx, x):
    start, end = shape_range(ctx.node.attrs, x.dim())
    return torch.tensor(list(x.shape[start:end]), dtype=torch.int64, device=x.device)


@register("Size", infer=lambda ctx: [TensorType(INT64, ())])
def size(ctx, x):
    return torch.tensor(x.numel(), dtype=torch.int64, device=x.device)


# -- ConstantOfShape, Range, EyeLike, Trilu -------------------------------------------


def _fill_value(ctx) -> torch.Tensor:
    v = ctx.attr("value")
    return torch.zeros(1, dtype=torch.float32) if v is None else v.reshape(-1)


def _constant_of_shape_infer(ctx: InferContext) -> list[TensorType]:
    dt = DType.from_torch(_fill_value(ctx).dtype)
    dims = shape_value(ctx, 0)
    if dims is None:
        n = static_length(ctx, 0)
        return [TensorType(dt, None if n is None else fresh_shape(n))]
    return [TensorType(dt, tuple(dims))]


@register("ConstantOfShape", infer=_constant_of_shape_infer)
def constant_of_shape(ctx, shape):
    v = _fill_value(ctx)
    return torch.full(ints(shape), v[0].item(), dtype=v.dtype, device=shape.device)


# Range-27 computes float16/bfloat16 ranges in the stash type (1: float32, 11: float64).
_STASH = {1: torch.float32, 11: torch.float64}


def _range_infer(ctx: InferContext) -> list[TensorType]:
    dt = ctx.dtype()
    vals = [ctx.const(i) for i in range(3)]
    if any(v is None for v in vals):
        return [TensorType(dt, (fresh_dim(),))]
    s, l, d = (float(v.double().item()) for v in vals)
    return [TensorType(dt, (max(math.ceil((l - s) / d), 0),))]


@register("Range", infer=_range_infer)
def range_(ctx, start, limit, delta):
    dt = start.dtype
    if dt.is_floating_point:
        if dt in (torch.float16, torch.bfloat16):
            work = _STASH.get(ctx.attr("stash_type", 1)) if ctx.opset >= 27 else torch.float32
            if work is None:
                raise ValueError(f"Range: unknown stash_type {ctx.attr('stash_type')}")
        else:
            work = torch.float64
        s, l, d = (float(t.to(work).item()) for t in (start, limit, delta))
        n = max(math.ceil((l - s) / d), 0)
        r = s + torch.arange(n, dtype=work, device=start.device) * d
        return r.to(dt)
    s, l, d = (int(t.to(torch.int64).item()) for t in (start, limit, delta))
    if d == 0:
        raise ValueError("Range: delta is 0")
    n = max(-(-(l - s) // d), 0)
    return (s + torch.arange(n, dtype=torch.int64, device=start.device) * d).to(dt)


def _eyelike_dtype(ctx) -> DType | None:
    code = ctx.attr("dtype")
    if code is None:
        return ctx.dtype() if isinstance(ctx, InferContext) else None
    return DType.from_onnx(code, f"dtype attribute of EyeLike '{ctx.node.name}'")


@register("EyeLike", infer=lambda ctx: [TensorType(_eyelike_dtype(ctx), ctx.shape())])
def eyelike(ctx, x):
    if x.dim() != 2:
        raise ValueError(f"EyeLike: input must be 2-D, got rank {x.dim()}")
    dt = _eyelike_dtype(ctx)
    dt = x.dtype if dt is None else dt.torch
    rows = torch.arange(x.shape[0], device=x.device)[:, None]
    cols = torch.arange(x.shape[1], device=x.device)[None, :]
    return (cols - rows == ctx.attr("k", 0)).to(dt)


@register("Trilu", infer=same_as(0))
def trilu(ctx, x, k=None):
    k = 0 if k is None else int(k.item())
    rows = torch.arange(x.shape[-2], device=x.device)[:, None]
    cols = torch.arange(x.shape[-1], device=x.device)[None, :]
    keep = cols - rows >= k if ctx.attr("upper", 1) else cols - rows <= k
    return torch.where(keep, x, torch.zeros((), dtype=x.dtype, device=x.device))


# -- DepthToSpace, SpaceToDepth, CenterCropPad ----------------------------------------


def _block(ctx, x) -> int:
    if x.dim() != 4:
        raise ValueError(f"{ctx.node.op_type}: input must be 4-D, got rank {x.dim()}")
    b = ctx.attr("blocksize")
    if not b or b < 1:
        raise ValueError(f"{ctx.node.op_type}: blocksize must be a positive int, got {b}")
    return b


def _space_depth_infer(ctx: InferContext) -> list[TensorType]:
    s, bs = ctx.shape(), ctx.attr("blocksize", 1)
    if s is None or len(s) != 4:
        return [TensorType(ctx.dtype(), None if s is None else fresh_shape(4))]
    n, c, h, w = s
    if ctx.node.op_type == "DepthToSpace":
        c = c // (bs * bs) if isinstance(c, int) else fresh_dim()
        h, w = (dim_product([d, bs]) for d in (h, w))
    else:
        c = dim_product([c, bs * bs])
        h, w = (d // bs if isinstance(d, int) else fresh_dim() for d in (h, w))
    return [TensorType(ctx.dtype(), (n, c, h, w))]


@register("DepthToSpace", infer=_space_depth_infer)
def depth_to_space(ctx, x):
    bs = _block(ctx, x)
    n, c, h, w = x.shape
    if c % (bs * bs):
        raise ValueError(f"DepthToSpace: channels {c} not divisible by blocksize^2 {bs * bs}")
    if ctx.attr("mode", "DCR") == "CRD":
        y = x.reshape(n, c // (bs * bs), bs, bs, h, w).permute(0, 1, 4, 2, 5, 3)
    else:
        y = x.reshape(n, bs, bs, c // (bs * bs), h, w).permute(0, 3, 4, 1, 5, 2)
    return y.reshape(n, c // (bs * bs), h * bs, w * bs)


@register("SpaceToDepth", infer=_space_depth_infer)
def space_to_depth(ctx, x):
    bs = _block(ctx, x)
    n, c, h, w = x.shape
    if h % bs or w % bs:
        raise ValueError(f"SpaceToDepth: spatial dims {h}x{w} not divisible by blocksize {bs}")
    y = x.reshape(n, c, h // bs, bs, w // bs, bs)
    if ctx.attr("mode", "DCR") == "CRD":
        y = y.permute(0, 1, 3, 5, 2, 4)
    else:
        y = y.permute(0, 3, 5, 1, 2, 4)
    return y.reshape(n, c * bs * bs, h // bs, w // bs)


def _crop_axes(ctx, rank: int, n: int) -> list[int]:
    axes = ctx.attr("axes")
    axes = list(range(rank)) if axes is None else [normalize_axis(a, rank) for a in axes]
    if len(axes) != n:
        raise ValueError(f"CenterCropPad: {n} sizes for {len(axes)} axes")
    return axes


def _center_crop_pad_infer(ctx: InferContext) -> list[TensorType]:
    s, target = ctx.shape(), shape_value(ctx, 1)
    if s is None:
        return [TensorType(ctx.dtype(), None)]
    out = list(s)
    if target is None:
        axes = ctx.attr("axes")
        for a in range(len(s)) if axes is None else axes:
            out[normalize_axis(a, len(s))] = fresh_dim()
        return [TensorType(ctx.dtype(), tuple(out))]
    for a, t in zip(_crop_axes(ctx, len(s), len(target)), target):
        out[a] = t
    return [TensorType(ctx.dtype(), tuple(out))]


@register("CenterCropPad", infer=_center_crop_pad_infer)
def center_crop_pad(ctx, x, shape):
    target = ints(shape)
    for a, t in zip(_crop_axes(ctx, x.dim(), len(target)), target):
        d = x.shape[a]
        if d > t:
            x = x.narrow(a, (d - t) // 2, t)
        elif d < t:
            out_shape = list(x.shape)
            out_shape[a] = t
            out = x.new_zeros(out_shape)
            out.narrow(a, (t - d) // 2, d).copy_(x)
            x = out
    return x

