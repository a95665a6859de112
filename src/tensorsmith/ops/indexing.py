"""Ops that pick, place, sort or accumulate elements by index.

Gather/Scatter families, TopK/ArgMax/Unique (sorting), NonZero/Compress (data-dependent sizes),
OneHot, cumulative sums and products, ReverseSequence and TensorScatter (KV-cache updates).
Ops whose output size depends on data get a fresh symbolic dim in their inference rule.
"""

from __future__ import annotations

import math

import torch

from ..ir import DType, TensorType
from ._util import WIDE_UINTS, normalize_axis, widen, with_wide_uints
from .inference import fresh_dim
from .registry import InferContext, register, same_as
from .shape_values import shape_value

INT64 = DType.INT64
# Same-size signed types: gather/scatter kernels move uint16/32/64 bits through these views.
_SIGNED_VIEW = {torch.uint16: torch.int16, torch.uint32: torch.int32, torch.uint64: torch.int64}


def _bits(x: torch.Tensor) -> torch.Tensor:
    return x.view(_SIGNED_VIEW[x.dtype]) if x.dtype in _SIGNED_VIEW else x


def _unbits(y: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
    return y.view(dtype) if dtype in _SIGNED_VIEW else y


def _norm_index(idx: torch.Tensor, dim: int | torch.Tensor) -> torch.Tensor:
    """Indices as int64 with negative ones counted from the end."""
    idx = idx.to(torch.int64)
    return torch.where(idx < 0, idx + dim, idx)




# -- Gather, GatherElements, GatherND -------------------------------------------------


def _gather_infer(ctx: InferContext) -> list[TensorType]:
    s, idx = ctx.shape(0), ctx.shape(1)
    if s is None or idx is None:
        return [TensorType(ctx.dtype(), None)]
    axis = normalize_axis(ctx.attr("axis", 0), len(s))
    return [TensorType(ctx.dtype(), tuple(s[:axis]) + tuple(idx) + tuple(s[axis + 1:]))]


@register("Gather", infer=_gather_infer)
def gather(ctx, data, indices):
    axis = normalize_axis(ctx.attr("axis", 0), data.dim())
    idx = _norm_index(indices, data.shape[axis])
    out = data.index_select(axis, idx.reshape(-1))
    return out.reshape(data.shape[:axis] + indices.shape + data.shape[axis + 1:])


@register("GatherElements", infer=lambda ctx: [TensorType(ctx.dtype(), ctx.shape(1))])
def gather_elements(ctx, data, indices):
    axis = normalize_axis(ctx.attr("axis", 0), data.dim())
    idx = _norm_index(indices, data.shape[axis])
    return _unbits(torch.gather(_bits(data), axis, idx), data.dtype)


def _gathernd_infer(ctx: InferContext) -> list[TensorType]:
    s, idx = ctx.shape(0), ctx.shape(1)
    b = ctx.attr("batch_dims", 0)
    if s is None or idx is None or not isinstance(idx[-1], int):
        return [TensorType(ctx.dtype(), None)]
    return [TensorType(ctx.dtype(), tuple(idx[:-1]) + tuple(s[b + idx[-1]:]))]


@register("GatherND", infer=_gathernd_infer)
def gather_nd(ctx, data, indices):
    b = ctx.attr("batch_dims", 0)
    k = indices.shape[-1]
    batch = data.shape[:b]
    inner, rest = data.shape[b:b + k], data.shape[b + k:]
    nb = math.prod(batch)
    # Flatten the batch dims and the k indexed dims, so one advanced index does the work.
    flat = data.reshape(nb, math.prod(inner), *rest)
    idx = indices.to(torch.int64).reshape(nb, -1, k)
    lin = torch.zeros(idx.shape[:2], dtype=torch.int64, device=data.device)
    for j, d in enumerate(inner):
        lin = lin * d + _norm_index(idx[..., j], d)
    out = flat[torch.arange(nb, device=data.device)[:, None], lin]
    return out.reshape(*indices.shape[:-1], *rest)


# -- Scatter, ScatterElements, ScatterND, TensorScatter -------------------------------

_REDUCE = {"add": "sum", "mul": "prod", "max": "amax", "min": "amin"}


def _reduction(ctx) -> str:
    r = ctx.attr("reduction", "none")
    if r != "none" and r not in _REDUCE:
        raise ValueError(f"{ctx.node.op_type}: unknown reduction '{r}'")
    return r


def _scatter_elements(ctx, data, indices, updates):
    axis = normalize_axis(ctx.attr("axis", 0), data.dim())
    idx = _norm_index(indices, data.shape[axis])
    r = _reduction(ctx)
    if r == "none":
        return _unbits(torch.scatter(_bits(data), axis, idx, _bits(updates)), data.dtype)
    return _scatter_reduce(data, axis, idx, updates, _REDUCE[r])


@with_wide_uints
def _scatter_reduce(data, axis, idx, updates, how):
    if data.dtype == torch.bool:
        # torch has no bool reductions here; add/max are OR, mul/min are AND.
        return _scatter_reduce(data.to(torch.uint8), axis, idx, updates.to(torch.uint8), how).clamp(max=1).bool()
    return data.scatter_reduce(axis, idx, updates, how, include_self=True)


register("ScatterElements", infer=same_as(0))(_scatter_elements)
register("Scatter", infer=same_as(0))(_scatter_elements)


@register("ScatterND", infer=same_as(0))
def scatter_nd(ctx, data, indices, updates):
    k = indices.shape[-1]
    inner, rest = data.shape[:k], data.shape[k:]
    out = data.reshape(math.prod(inner), *rest).clone()
    idx = indices.to(torch.int64).reshape(-1, k)
    lin = torch.zeros(idx.shape[0], dtype=torch.int64, device=data.device)
    for j, d in enumerate(inner):
        lin = lin * d + _norm_index(idx[:, j], d)
    upd = updates.reshape(lin.shape[0], *rest)
    r = _reduction(ctx)
    if r == "none":
        view = _bits(out)
        view[lin] = _bits(upd)
    else:
        index = lin.reshape(-1, *([1] * len(rest))).expand(upd.shape)
        out = _scatter_reduce(out, 0, index, upd, _REDUCE[r])
    return out.reshape(data.shape)


@register("TensorScatter", infer=same_as(0), since=24)
def tensor_scatter(ctx, past, update, write_indices=None):
    axis = normalize_axis(ctx.attr("axis", -2), past.dim())
    if axis == 0:
        raise ValueError("TensorScatter: axis must not be the batch axis 0")
    mode = ctx.attr("mode", "linear")
    if mode not in ("linear", "circular"):
        raise ValueError(f"TensorScatter: unknown mode '{mode}'")
    batch, max_len, seq = past.shape[0], past.shape[axis], update.shape[axis]
    if write_indices is None:
        start = torch.zeros(batch, dtype=torch.int64, device=past.device)
    else:
        start = write_indices.to(torch.int64).reshape(batch)
    pos = start[:, None] + torch.arange(seq, device=past.device)[None, :]
    if mode == "circular":
        pos = pos.remainder(max_len)
    elif update.numel() and int(pos.max()) >= max_len:
        raise ValueError(f"TensorScatter: writes up to index {int(pos.max())} past max_sequence_length {max_len}")
    shape = [batch] + [1] * (past.dim() - 1)
    shape[axis] = seq
    index = pos.reshape(shape).expand(update.shape)
    return _unbits(torch.scatter(_bits(past), axis, index, _bits(update)), past.dtype)


# -- OneHot, NonZero, Compress --------------------------------------------------------


def _onehot_infer(ctx: InferContext) -> list[TensorType]:
    s = ctx.shape(0)
    dt = ctx.dtype(2)
    if s is None:
        return [TensorType(dt, None)]
    depth = ctx.const(1)
    d = int(depth.reshape(-1)[0].item()) if depth is not None else fresh_dim()
    axis = normalize_axis(ctx.attr("axis", -1), len(s) + 1)
    return [TensorType(dt, tuple(s[:axis]) + (d,) + tuple(s[axis:]))]


@register("OneHot", infer=_onehot_infer)
def one_hot(ctx, indices, depth, values):
    depth = int(depth.reshape(-1)[0].item())
    axis = normalize_axis(ctx.attr("axis", -1), indices.dim() + 1)
    # Float indices truncate (as the cast does); negative ones count from the end; out-of-range
    # ones match no class and give all 'off'.
    idx = widen(indices).to(torch.int64)
    idx = torch.where(idx < 0, idx + depth, idx).unsqueeze(axis)
    shape = [1] * (indices.dim() + 1)
    shape[axis] = depth
    classes = torch.arange(depth, device=indices.device).reshape(shape)
    values = values.reshape(-1)
    return torch.where(idx == classes, values[1], values[0])


def _nonzero_infer(ctx: InferContext) -> list[TensorType]:
    s = ctx.shape()
    rank = fresh_dim() if s is None else max(len(s), 1)
    return [TensorType(INT64, (rank, fresh_dim()))]


@register("NonZero", infer=_nonzero_infer)
def nonzero(ctx, x):
    mask = widen(x) != 0
    if x.dim() == 0:
        # A scalar is treated as a 1-element 1-D tensor (numpy semantics): (1, n) indices.
        return torch.zeros((1, int(mask)), dtype=torch.int64, device=x.device)
    return torch.nonzero(mask).T.contiguous()


def _compress_infer(ctx: InferContext) -> list[TensorType]:
    s = ctx.shape()
    axis = ctx.attr("axis")
    if s is None or axis is None:
        return [TensorType(ctx.dtype(), (fresh_dim(),))]
    axis = normalize_axis(axis, len(s))
    return [TensorType(ctx.dtype(), tuple(s[:axis]) + (fresh_dim(),) + tuple(s[axis + 1:]))]


@register("Compress", infer=_compress_infer)
def compress(ctx, x, condition):
    axis = ctx.attr("axis")
    if axis is None:
        x, axis = x.reshape(-1), 0
    axis = normalize_axis(axis, x.dim())
    cond = condition.reshape(-1).to(torch.bool)
    if cond.numel() > x.shape[axis]:
        raise ValueError(f"Compress: condition has {cond.numel()} entries, the axis has {x.shape[axis]}")
    return x.index_select(axis, torch.nonzero(cond).reshape(-1))


# -- TopK, ArgMax, ArgMin, Unique (ordering) ------------------------------------------


def _order_key(x: torch.Tensor) -> torch.Tensor:
    """A tensor that sorts like x, in a dtype whose sort/argmax kernels exist on every device."""
    if x.dtype == torch.bool:
        return x.to(torch.uint8)
    if x.dtype == torch.uint64:
        # Flip the sign bit: unsigned order becomes signed order of the int64 view.
        return x.view(torch.int64) ^ torch.tensor(-(2**63), dtype=torch.int64, device=x.device)
    if x.dtype in WIDE_UINTS:
        return x.to(torch.int64)
    return x


def _topk_infer(ctx: InferContext) -> list[TensorType]:
    s = ctx.shape()
    if s is None:
        return [TensorType(ctx.dtype(), None), TensorType(INT64, None)]
    axis = normalize_axis(ctx.attr("axis", -1), len(s))
    k = shape_value(ctx, 1)
    k = k[0] if k is not None and len(k) == 1 else fresh_dim()
    shape = tuple(s[:axis]) + (k,) + tuple(s[axis + 1:])
    return [TensorType(ctx.dtype(), shape), TensorType(INT64, shape)]


@register("TopK", infer=_topk_infer)
def topk(ctx, x, k):
    axis = normalize_axis(ctx.attr("axis", -1), x.dim())
    k = int(k.reshape(-1)[0].item())
    if not 0 <= k <= x.shape[axis]:
        raise ValueError(f"TopK: k={k} is out of range for a dim of {x.shape[axis]}")
    # A stable sort keeps ties in index order, as ONNX requires (smaller index first).
    _, order = torch.sort(_order_key(x), dim=axis, descending=bool(ctx.attr("largest", 1)), stable=True)
    idx = order.narrow(axis, 0, k)
    return _unbits(torch.gather(_bits(x), axis, idx), x.dtype), idx


def _arg_infer(ctx: InferContext) -> list[TensorType]:
    s = ctx.shape()
    if s is None:
        return [TensorType(INT64, None)]
    axis = normalize_axis(ctx.attr("axis", 0), len(s))
    if ctx.attr("keepdims", 1):
        return [TensorType(INT64, tuple(s[:axis]) + (1,) + tuple(s[axis + 1:]))]
    return [TensorType(INT64, tuple(s[:axis]) + tuple(s[axis + 1:]))]


def _arg(fn):
    def ref(ctx, x):
        axis = normalize_axis(ctx.attr("axis", 0), x.dim())
        keep = bool(ctx.attr("keepdims", 1))
        key = _order_key(x)
        if ctx.attr("select_last_index", 0):
            return x.shape[axis] - 1 - fn(key.flip(axis), dim=axis, keepdim=keep)
        return fn(key, dim=axis, keepdim=keep)

    return ref


register("ArgMax", infer=_arg_infer)(_arg(torch.argmax))
register("ArgMin", infer=_arg_infer)(_arg(torch.argmin))


def _unique_infer(ctx: InferContext) -> list[TensorType]:
    s = ctx.shape()
    axis = ctx.attr("axis")
    n = fresh_dim()
    if axis is None or s is None:
        y = (n,)
    else:
        axis = normalize_axis(axis, len(s))
        y = tuple(s[:axis]) + (n,) + tuple(s[axis + 1:])
    inverse = (s[axis] if axis is not None and s is not None else fresh_dim(),)
    return [TensorType(ctx.dtype(), y), TensorType(INT64, (n,)), TensorType(INT64, inverse), TensorType(INT64, (n,))]


@register("Unique", infer=_unique_infer)
def unique(ctx, x):
    axis = ctx.attr("axis")
    if axis is None:
        x, axis = x.reshape(-1), 0
    axis = normalize_axis(axis, x.dim())
    key = _order_key(x)
    if key.dtype in (torch.float16, torch.bfloat16):
        key = key.float()  # exact, order-preserving, and every device can sort it
    _, inverse, counts = torch.unique(key, sorted=True, return_inverse=True, return_counts=True, dim=axis)
    n = counts.shape[0]
    positions = torch.arange(inverse.shape[0], device=x.device)
    first = torch.full((n,), inverse.shape[0], dtype=torch.int64, device=x.device)
    first = first.scatter_reduce(0, inverse, positions, "amin")
    if not ctx.attr("sorted", 1):
        # Order of first occurrence: permute the uniques and renumber the inverse.
        perm = torch.argsort(first)
        rank = torch.empty_like(perm)
        rank[perm] = torch.arange(n, device=x.device)
        first, counts, inverse = first[perm], counts[perm], rank[inverse]
    return x.index_select(axis, first), first, inverse, counts


# -- CumSum, CumProd, ReverseSequence -------------------------------------------------


def _cumulative(op: str):
    @with_wide_uints
    def ref(ctx, x, axis):
        axis = normalize_axis(int(axis.item()), x.dim())
        if ctx.attr("reverse", 0):
            x = x.flip(axis)
        if ctx.attr("exclusive", 0):
            # Shift by one: start from the identity (0 or 1), drop the last element.
            first = torch.full_like(x.narrow(axis, 0, 1), 0 if op == "sum" else 1)
            x = torch.cat([first, x.narrow(axis, 0, x.shape[axis] - 1)], dim=axis)
        out = (torch.cumsum if op == "sum" else torch.cumprod)(x, dim=axis, dtype=x.dtype)
        return out.flip(axis) if ctx.attr("reverse", 0) else out

    return ref


register("CumSum", infer=same_as(0))(_cumulative("sum"))
register("CumProd", infer=same_as(0), since=26)(_cumulative("prod"))


@register("ReverseSequence", infer=same_as(0))
def reverse_sequence(ctx, x, sequence_lens):
    t_axis = normalize_axis(ctx.attr("time_axis", 0), x.dim())
    b_axis = normalize_axis(ctx.attr("batch_axis", 1), x.dim())
    if {t_axis, b_axis} != {0, 1}:
        raise ValueError(f"ReverseSequence: time_axis and batch_axis must be 0 and 1, got {t_axis}, {b_axis}")
    steps = torch.arange(x.shape[t_axis], device=x.device)[:, None]
    lens = sequence_lens.to(torch.int64)[None, :]
    # Source time step of each (time, batch): reversed within the sequence, unchanged past it.
    src = torch.where(steps < lens, lens - 1 - steps, steps)
    if t_axis == 1:
        src = src.T
    index = src.reshape(*src.shape, *([1] * (x.dim() - 2))).expand(x.shape)
    return _unbits(torch.gather(_bits(x), t_axis, index), x.dtype)
