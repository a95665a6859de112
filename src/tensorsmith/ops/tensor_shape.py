"""Ops that move data without computing on it: reshapes, transposes, squeeze/unsqueeze, concat/split, slice.

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
from .registry import InferContext, register
from .shape_values import dim_product, dim_sum, fresh_shape, shape_value, slice_bounds, static_length

INT64 = DType.INT64
# Slice ends at or beyond this mean "to the end" whatever the dim (INT_MAX in exported models).
_OPEN_END = 2**31 - 1


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
        n = static_length(ctx, 1)
        return [TensorType(dt, None if n is None else fresh_shape(n))]
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
        return [TensorType(ctx.dtype(), fresh_shape(2))]
    axis = _flatten_axis(ctx, len(s))
    return [TensorType(ctx.dtype(), (dim_product(s[:axis]), dim_product(s[axis:])))]


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
        return [TensorType(ctx.dtype(), None if perm is None else fresh_shape(len(perm)))]
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
        n = static_length(ctx, 1) if len(ctx.node.inputs) > 1 else None
        return [TensorType(dt, None if s is None or n is None else fresh_shape(len(s) + n))]
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
            out.append(dim_sum(dims) if len(shapes) == len(ts) else fresh_dim())
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
        return [TensorType(dt, fresh_shape(len(s)))]
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
