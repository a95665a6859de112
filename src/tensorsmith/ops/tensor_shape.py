"""Ops that move data without computing on it: reshapes, transposes, concat/split, slice, pad, tile.

These are also the ops of shape subgraphs (Shape -> Gather -> Concat -> Reshape), so each hot op
has an explicit inference rule. A rule reads a shape/axes input through `shape_value`, which
gives its value when it is a build-time constant, or traces it back through the shape subgraph
that computed it (keeping symbolic dims such as 'N'); where a value stays unknown, the output
gets fresh symbolic dims.
"""

from __future__ import annotations

import math

import torch

from ..ir import DType, TensorType
from ._util import ints, normalize_axis
from .inference import fresh_dim
from .registry import InferContext, register, same_as
from .shape_values import shape_range, shape_value, slice_bounds

INT64 = DType.INT64
# Slice ends at or beyond this mean "to the end" whatever the dim (INT_MAX in exported models).
_OPEN_END = 2**31 - 1


# -- symbolic dims -------------------------------------------------------------------


def _prod(dims) -> int | str:
    """Product of dims: an int when all are static, else a fresh symbol (or the lone symbol)."""
    static = math.prod(d for d in dims if isinstance(d, int))
    symbols = [d for d in dims if not isinstance(d, int)]
    if not symbols or static == 0:
        return static
    if len(symbols) == 1 and static == 1:
        return symbols[0]
    return fresh_dim()


def _sum(dims) -> int | str:
    if all(isinstance(d, int) for d in dims):
        return sum(dims)
    nonzero = [d for d in dims if d != 0]
    return nonzero[0] if len(nonzero) == 1 else fresh_dim()


def _fresh_shape(rank: int) -> tuple:
    return tuple(fresh_dim() for _ in range(rank))




def _static_len(ctx: InferContext, i: int) -> int | None:
    """Length of the 1-D input i when its shape is static."""
    s = ctx.shape(i)
    if s is not None and len(s) == 1 and isinstance(s[0], int):
        return s[0]
    return None


# -- Reshape, Flatten, Transpose, Squeeze, Unsqueeze ----------------------------------


def _reshape_target(in_shape, target: list, allowzero: bool) -> list:
    """Resolve 0 (copy the input dim) in a target shape; -1 is left for the caller."""
    out = []
    for j, s in enumerate(target):
        if s == 0 and not allowzero:
            if j >= len(in_shape):
                raise ValueError(f"Reshape: shape[{j}] is 0 but the input has rank {len(in_shape)}")
            out.append(in_shape[j])
        else:
            out.append(s)
    if sum(1 for s in out if s == -1) > 1:
        raise ValueError(f"Reshape: more than one -1 in shape {target}")
    return out


def _reshape_infer(ctx: InferContext) -> list[TensorType]:
    dt, in_shape = ctx.dtype(), ctx.shape()
    target = shape_value(ctx, 1) if len(ctx.node.inputs) > 1 else list(ctx.attr("shape", []))
    if target is None:
        n = _static_len(ctx, 1)
        return [TensorType(dt, None if n is None else _fresh_shape(n))]
    if in_shape is None:
        copies = (-1,) if ctx.attr("allowzero", 0) else (0, -1)
        return [TensorType(dt, tuple(fresh_dim() if s in copies else s for s in target))]
    out = _reshape_target(in_shape, target, bool(ctx.attr("allowzero", 0)))
    if -1 in out:
        out[out.index(-1)] = _infer_minus_one(in_shape, [d for d in out if d != -1])
    return [TensorType(dt, tuple(out))]


@register("Reshape", infer=_reshape_infer)
def reshape(ctx, x, shape=None):
    target = ints(shape) if shape is not None else list(ctx.attr("shape"))
    return x.reshape(_reshape_target(x.shape, target, bool(ctx.attr("allowzero", 0))))


def _infer_minus_one(in_shape, known) -> int | str:
    """The dim that -1 stands for: input size over the known output dims, symbols cancelling."""
    symbols_in = [d for d in in_shape if isinstance(d, str)]
    rest = list(symbols_in)
    for d in known:
        if isinstance(d, str):
            if d not in rest:
                return fresh_dim()
            rest.remove(d)
    p_in = math.prod(d for d in in_shape if isinstance(d, int))
    p_out = math.prod(d for d in known if isinstance(d, int))
    if not rest:
        if p_out == 0 or p_in % p_out:
            return fresh_dim()
        return p_in // p_out
    if len(rest) == 1 and p_in == p_out:
        return rest[0]
    return fresh_dim()


def _flatten_infer(ctx: InferContext) -> list[TensorType]:
    s = ctx.shape()
    if s is None:
        return [TensorType(ctx.dtype(), _fresh_shape(2))]
    axis = _flatten_axis(ctx, len(s))
    return [TensorType(ctx.dtype(), (_prod(s[:axis]), _prod(s[axis:])))]


@register("Flatten", infer=_flatten_infer)
def flatten(ctx, x):
    axis = _flatten_axis(ctx, x.dim())
    return x.reshape(math.prod(x.shape[:axis]), math.prod(x.shape[axis:]))


def _flatten_axis(ctx, rank: int) -> int:
    axis = ctx.attr("axis", 1)
    if not -rank <= axis <= rank:
        raise ValueError(f"Flatten: axis {axis} is out of range for rank {rank}")
    return axis + rank if axis < 0 else axis


def _perm(ctx, rank: int) -> list[int]:
    perm = ctx.attr("perm")
    if perm is None:
        return list(range(rank))[::-1]
    if sorted(p % rank if rank else p for p in perm) != list(range(rank)):
        raise ValueError(f"Transpose: perm {perm} is not a permutation of {rank} axes")
    return [p % rank for p in perm]


def _transpose_infer(ctx: InferContext) -> list[TensorType]:
    s = ctx.shape()
    if s is None:
        perm = ctx.attr("perm")
        return [TensorType(ctx.dtype(), None if perm is None else _fresh_shape(len(perm)))]
    return [TensorType(ctx.dtype(), tuple(s[p] for p in _perm(ctx, len(s))))]


@register("Transpose", infer=_transpose_infer)
def transpose(ctx, x):
    return x.permute(_perm(ctx, x.dim()))


def _axes(ctx, i: int, t: torch.Tensor | None):
    """Axes from input i (newest form) or from the attribute of an old opset."""
    if t is not None:
        return ints(t)
    return ctx.attr("axes")


def _squeeze_infer(ctx: InferContext) -> list[TensorType]:
    s, dt = ctx.shape(), ctx.dtype()
    axes = shape_value(ctx, 1) if len(ctx.node.inputs) > 1 else ctx.attr("axes")
    if s is None:
        return [TensorType(dt, None)]
    if axes is None:
        if len(ctx.node.inputs) > 1 or any(isinstance(d, str) for d in s):
            return [TensorType(dt, None)]  # which dims are 1 is not known at build time
        return [TensorType(dt, tuple(d for d in s if d != 1))]
    if not all(isinstance(a, int) for a in axes):
        return [TensorType(dt, None)]
    drop = {normalize_axis(a, len(s)) for a in axes}
    for a in drop:
        if isinstance(s[a], int) and s[a] != 1:
            raise ctx.fail(f"axis {a} has size {s[a]}, not 1")
    return [TensorType(dt, tuple(d for j, d in enumerate(s) if j not in drop))]


@register("Squeeze", infer=_squeeze_infer)
def squeeze(ctx, x, axes=None):
    axes = _axes(ctx, 1, axes)
    if axes is None:
        return x.reshape([d for d in x.shape if d != 1])
    axes = {normalize_axis(a, x.dim()) for a in axes}
    for a in axes:
        if x.shape[a] != 1:
            raise ValueError(f"Squeeze: axis {a} has size {x.shape[a]}, not 1")
    return x.reshape([d for j, d in enumerate(x.shape) if j not in axes])


def _unsqueezed(shape, axes: list[int]) -> list:
    rank = len(shape) + len(axes)
    pos = sorted(normalize_axis(a, rank) for a in axes)
    if len(set(pos)) != len(pos):
        raise ValueError(f"Unsqueeze: repeated axes {axes}")
    out, rest = [], iter(shape)
    for j in range(rank):
        out.append(1 if j in pos else next(rest))
    return out


def _unsqueeze_infer(ctx: InferContext) -> list[TensorType]:
    s, dt = ctx.shape(), ctx.dtype()
    axes = shape_value(ctx, 1) if len(ctx.node.inputs) > 1 else ctx.attr("axes")
    if s is None or axes is None or not all(isinstance(a, int) for a in axes):
        n = _static_len(ctx, 1) if len(ctx.node.inputs) > 1 else None
        return [TensorType(dt, None if s is None or n is None else _fresh_shape(len(s) + n))]
    return [TensorType(dt, tuple(_unsqueezed(list(s), axes)))]


@register("Unsqueeze", infer=_unsqueeze_infer)
def unsqueeze(ctx, x, axes=None):
    return x.reshape(_unsqueezed(list(x.shape), _axes(ctx, 1, axes)))


# -- Concat, Split ------------------------------------------------------------------


def _concat_infer(ctx: InferContext) -> list[TensorType]:
    ts = [t for t in ctx.inputs if t is not None]
    dt = next((t.dtype for t in ts if t.dtype is not None), None)
    shapes = [t.shape for t in ts if t.shape is not None]
    if not shapes:
        return [TensorType(dt, None)]
    rank = len(shapes[0])
    try:
        axis = normalize_axis(_concat_axis(ctx), rank)
    except ValueError as e:
        raise ctx.fail(str(e)) from None
    if any(len(s) != rank for s in shapes):
        raise ctx.fail(f"inputs have different ranks: {[len(s) for s in shapes]}")
    out = []
    for j in range(rank):
        dims = [s[j] for s in shapes]
        if j == axis:
            out.append(_sum(dims) if len(shapes) == len(ts) else fresh_dim())
            continue
        static = {d for d in dims if isinstance(d, int)}
        if len(static) > 1:
            raise ctx.fail(f"inputs disagree on dim {j}: {dims}")
        out.append(static.pop() if static else dims[0])
    return [TensorType(dt, tuple(out))]


def _concat_axis(ctx) -> int:
    # Concat-1..3 defaulted to axis 1; from opset 4 the attribute is required.
    axis = ctx.attr("axis", 1 if ctx.opset < 4 else None)
    if axis is None:
        raise ValueError("Concat: the axis attribute is required")
    return axis


@register("Concat", infer=_concat_infer)
def concat(ctx, *xs):
    xs = [x for x in xs if x is not None]
    return torch.cat(xs, dim=normalize_axis(_concat_axis(ctx), xs[0].dim()))


def _split_sizes(ctx, dim: int, split: list[int] | None, n_out: int) -> list[int]:
    if split is not None:
        if sum(split) != dim:
            raise ValueError(f"Split: sizes {split} do not add up to the dim {dim}")
        return split
    n = ctx.attr("num_outputs")
    if n is not None:
        # Opset 18: chunks of ceil(dim / n), the last one smaller.
        chunk = -(-dim // n)
        return [max(0, min(chunk, dim - k * chunk)) for k in range(n)]
    if dim % n_out:
        raise ValueError(f"Split: dim {dim} does not split evenly into {n_out} outputs")
    return [dim // n_out] * n_out


def _split_infer(ctx: InferContext) -> list[TensorType]:
    s, dt = ctx.shape(), ctx.dtype()
    n = ctx.num_outputs
    if s is None:
        return [TensorType(dt, None)] * n
    axis = normalize_axis(ctx.attr("axis", 0), len(s))
    has_sizes = len(ctx.node.inputs) > 1 and ctx.node.inputs[1] is not None
    sizes = shape_value(ctx, 1) if has_sizes else None
    if not has_sizes and isinstance(s[axis], int):
        try:
            sizes = _split_sizes(ctx, s[axis], None, n)
        except ValueError as e:
            raise ctx.fail(str(e)) from None
    if sizes is None:
        sizes = [fresh_dim() for _ in range(n)]
    return [TensorType(dt, s[:axis] + (d,) + s[axis + 1:]) for d in sizes]


@register("Split", infer=_split_infer)
def split(ctx, x, split=None):
    axis = normalize_axis(ctx.attr("axis", 0), x.dim())
    sizes = _split_sizes(ctx, x.shape[axis], ints(split), ctx.num_outputs)
    return tuple(torch.split(x, sizes, dim=axis))


# -- Slice ----------------------------------------------------------------------------


def _slice_args(x_rank: int, starts, ends, axes, steps):
    axes = list(range(len(starts))) if axes is None else [normalize_axis(a, x_rank) for a in axes]
    steps = [1] * len(starts) if steps is None else steps
    if not len(starts) == len(ends) == len(axes) == len(steps):
        raise ValueError("Slice: starts, ends, axes and steps differ in length")
    return zip(axes, starts, ends, steps)


def _slice_infer(ctx: InferContext) -> list[TensorType]:
    s, dt = ctx.shape(), ctx.dtype()
    if s is None:
        return [TensorType(dt, None)]
    args = [shape_value(ctx, i) if i < len(ctx.node.inputs) and ctx.node.inputs[i] is not None else None
            for i in range(1, 5)]
    known = [a is None or all(isinstance(v, int) for v in a) for a in args]
    has_input = [i < len(ctx.node.inputs) and ctx.node.inputs[i] is not None for i in range(1, 5)]
    out = list(s)
    if not (args[0] is not None and args[1] is not None and all(known)
            and (args[2] is not None or not has_input[2]) and (args[3] is not None or not has_input[3])):
        if args[2] is not None and known[2]:
            for a in args[2]:
                out[normalize_axis(a, len(s))] = fresh_dim()
            return [TensorType(dt, tuple(out))]
        return [TensorType(dt, _fresh_shape(len(s)))]
    for axis, st, en, step in _slice_args(len(s), *args):
        dim = s[axis]
        if isinstance(dim, int):
            b, e = slice_bounds(st, en, step, dim)
            out[axis] = max(0, -(-(e - b) // step))
        elif not (st == 0 and en >= _OPEN_END and step == 1):
            out[axis] = fresh_dim()
    return [TensorType(dt, tuple(out))]


@register("Slice", infer=_slice_infer)
def slice_(ctx, x, starts, ends, axes=None, steps=None):
    for axis, s, e, st in _slice_args(x.dim(), ints(starts), ints(ends), ints(axes), ints(steps)):
        dim = x.shape[axis]
        s, e = slice_bounds(s, e, st, dim)
        if st < 0:
            # Torch slices only with positive steps: flip, then mirror the bounds.
            x, s, e, st = x.flip(axis), dim - 1 - s, dim - 1 - e, -st
        index = [slice(None)] * x.dim()
        index[axis] = slice(s, max(s, e), st)
        x = x[tuple(index)]
    return x


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
        n = _static_len(ctx, 1)
        rank = None if n is None or s is None else max(n, len(s))
        return [TensorType(dt, None if rank is None else _fresh_shape(rank))]
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
        return [TensorType(dt, _fresh_shape(len(s)))]
    return [TensorType(dt, tuple(d if r == 1 else _prod([d, r]) for d, r in zip(s, reps)))]


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
        return [TensorType(dt, _fresh_shape(len(s)))]
    widths = _pad_widths(len(s), pads, axes)
    return [TensorType(dt, tuple(_sum([d, b + e]) for d, (b, e) in zip(s, widths)))]


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
        n = _static_len(ctx, 0)
        return [TensorType(dt, None if n is None else _fresh_shape(n))]
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
        return [TensorType(ctx.dtype(), None if s is None else _fresh_shape(4))]
    n, c, h, w = s
    if ctx.node.op_type == "DepthToSpace":
        c = c // (bs * bs) if isinstance(c, int) else fresh_dim()
        h, w = (_prod([d, bs]) for d in (h, w))
    else:
        c = _prod([c, bs * bs])
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

