"""Tactic "triton.norm": normalizations, softmaxes and reductions as one generated Triton kernel.

The anchor's input is seen as rows: its reduced axes (normalized, softmaxed or reduced) make a
row of R elements, the other axes index M rows. Every tensor the kernel touches is addressed
through its strides over those axes, so any axis set works (trailing axes give plain
`row * R + col` addressing; a middle axis gives strided columns). A program handles ROWS rows,
BLOCK columns at a time: when BLOCK >= R the row stays in registers (one pass over memory),
otherwise each statistic is a loop over the row and the result one more. Statistics are float32.
The layer's prologue is recomputed wherever the row is loaded and its epilogue is fused into the
store, both written by codegen.emit_elementwise.
"""

from __future__ import annotations

import math
import os
from dataclasses import dataclass, field
from typing import Any

import torch
import triton

from ...ir import DType, Node, Value
from ...ops._util import normalize_axis
from ..base import (
    LayerContext,
    Runner,
    Tactic,
    binds_outputs,
    output_or_empty,
    register_tactic,
)
from .codegen import TL_DTYPE, emit_elementwise, register_dtype
from .compile import load_kernel

_NORMS = ("LayerNormalization", "RMSNormalization", "GroupNormalization", "InstanceNormalization",
          "Softmax", "LogSoftmax")
# Reduction anchor -> the statistic its row reduces to.
_REDUCTIONS = {
    "ReduceSum": "sum", "ReduceMean": "mean", "ReduceMax": "max", "ReduceMin": "min",
    "ReduceSumSquare": "sumsq", "ReduceL1": "l1", "ReduceL2": "l2", "ReduceLogSumExp": "lse",
    "GlobalAveragePool": "mean", "GlobalMaxPool": "max",
}
_FLOATS = (DType.FLOAT32, DType.FLOAT16, DType.BFLOAT16)
_MAX_SINGLE_PASS = 16384  # longest row kept in registers
_INT32_LIMIT = 2**31 - 1  # offsets are int32


class _Decline(Exception):
    """The kernel template cannot run this layer (applies() answers False)."""


@dataclass
class _Access:
    """One tensor the kernel reads: its argument name and its strides over a domain's axes."""

    arg: str
    strides: tuple[int, ...]
    dtype: DType


@dataclass
class _Plan:
    """What the kernel computes for one layer, independent of the config."""

    op: str
    sizes: tuple[int, ...]  # tile domain: the anchor input's axes (GroupNormalization: C split by group)
    reduced: tuple[bool, ...]
    eps: float
    prologue: list[Node]
    epilogue: list[Node]
    x_name: str  # the anchor's row input
    anchor_out: str
    axis_split: list[list[int]]  # per input axis, its sizes in the tile domain
    tile: dict[str, _Access]  # values loaded per tile: the row input or the prologue's operands
    params: dict[str, _Access]  # the anchor's own tensors: scale, bias
    epi: dict[str, _Access]  # epilogue operands (tile domain for norms, output axes for reductions)
    out_sizes: tuple[int, ...]
    out_dtype: DType
    out_shape: tuple[int, ...]
    args: list[tuple[str, Any]] = field(default_factory=list)  # ("input", index) | ("weight", tensor)
    scalars: dict[str, float] = field(default_factory=dict)

    @property
    def reduces(self) -> bool:
        return self.op in _REDUCTIONS

    @property
    def M(self) -> int:
        return math.prod(n for n, r in zip(self.sizes, self.reduced) if not r)

    @property
    def R(self) -> int:
        return math.prod(n for n, r in zip(self.sizes, self.reduced) if r)

    def split(self, strides: tuple[int, ...]) -> tuple[tuple[int, ...], tuple[int, ...]]:
        """A tile-domain access's strides as (row axes, column axes)."""
        rows = tuple(s for s, r in zip(strides, self.reduced) if not r)
        cols = tuple(s for s, r in zip(strides, self.reduced) if r)
        return rows, cols

    def axis_sizes(self) -> tuple[tuple[int, ...], tuple[int, ...]]:
        return self.split(self.sizes)


# -- analysis: which layers, and how each tensor is addressed ------------------------


def _static_shape(lc: LayerContext, v: Value) -> tuple[int, ...]:
    try:
        return lc.shape(v)
    except ValueError:
        raise _Decline from None


def _broadcast_strides(shape: tuple[int, ...], full: tuple[int, ...]) -> tuple[int, ...]:
    """Strides of a contiguous tensor of `shape` read as `full` under ONNX (right-aligned) broadcasting."""
    if len(shape) > len(full):
        raise _Decline
    contiguous, step = [], 1
    for d in reversed(shape):
        contiguous.insert(0, step)
        step *= d
    lead = len(full) - len(shape)
    out = []
    for i, d in enumerate(full):
        j = i - lead
        if j < 0 or shape[j] == 1:
            out.append(0)
        elif shape[j] == d:
            out.append(contiguous[j])
        else:
            raise _Decline
    return tuple(out)


def _anchor_axes(lc: LayerContext, node: Node, shape: tuple[int, ...]) -> tuple[list[list[int]], set[int], float]:
    """(per input axis: its sizes in the tile domain, reduced input axes, epsilon) for the anchor."""
    rank, op, attrs = len(shape), node.op_type, node.attrs
    split = [[d] for d in shape]
    eps = float(attrs.get("epsilon", 1e-5))
    if rank == 0:
        raise _Decline
    if op in ("LayerNormalization", "RMSNormalization", "GroupNormalization"):
        if int(attrs.get("stash_type", 1)) != DType.FLOAT32.onnx:
            raise _Decline
    if op in ("LayerNormalization", "RMSNormalization"):
        return split, set(range(normalize_axis(int(attrs.get("axis", -1)), rank), rank)), eps
    if op in ("Softmax", "LogSoftmax"):
        if node.opset >= 13:
            return split, {normalize_axis(int(attrs.get("axis", -1)), rank)}, eps
        return split, set(range(normalize_axis(int(attrs.get("axis", 1)), rank), rank)), eps
    if op in ("InstanceNormalization", "GroupNormalization", "GlobalAveragePool", "GlobalMaxPool"):
        if rank < (2 if op == "GroupNormalization" else 3):
            raise _Decline
        if op == "GroupNormalization":
            groups = int(attrs.get("num_groups", 0))
            if groups <= 0 or shape[1] % groups:
                raise _Decline
            split[1] = [groups, shape[1] // groups]
            return split, {1} | set(range(2, rank)), eps  # only C's within-group part, see _domain
        return split, set(range(2, rank)), eps
    # Reductions: axes from input 1 (the importer moves the old attribute there), static only.
    axes_v = node.inputs[1] if len(node.inputs) > 1 else None
    if axes_v is not None:
        if not lc.is_weight(axes_v):
            raise _Decline
        axes = [int(a) for a in lc.weight(axes_v).reshape(-1).tolist()]
    else:
        axes = [int(a) for a in attrs.get("axes", [])]
    if not axes:
        if int(attrs.get("noop_with_empty_axes", 0)):
            raise _Decline
        axes = list(range(rank))
    norm = {normalize_axis(a, rank) for a in axes}
    if len(norm) != len(axes):
        raise _Decline
    return split, norm, eps


def _domain(split: list[list[int]], reduced_axes: set[int], op: str) -> tuple[tuple[int, ...], tuple[bool, ...]]:
    sizes, reduced = [], []
    for i, subs in enumerate(split):
        for k, d in enumerate(subs):
            sizes.append(d)
            # GroupNormalization reduces the channels within a group, not over groups.
            reduced.append(i in reduced_axes and not (op == "GroupNormalization" and i == 1 and k == 0))
    return tuple(sizes), tuple(reduced)


def _to_domain(strides: tuple[int, ...], split: list[list[int]]) -> tuple[int, ...]:
    """Strides over input axes -> strides over tile-domain axes (split axes get one per part)."""
    out = []
    for s, subs in zip(strides, split):
        inner = math.prod(subs)
        for d in subs:
            inner //= d
            out.append(s * inner)
    return tuple(out)


class _Args:
    """Kernel pointer arguments, one per distinct tensor."""

    def __init__(self, lc: LayerContext):
        self.lc = lc
        self.index = {v.name: i for i, v in enumerate(lc.inputs)}
        self.names: dict[str, str] = {}
        self.args: list[tuple[str, Any]] = []

    def arg(self, v: Value, tensor: torch.Tensor | None = None) -> str:
        key = v.name if tensor is None else f"{v.name}#{id(tensor)}"
        if key not in self.names:
            self.names[key] = f"p{len(self.args)}"
            if tensor is not None:
                self.args.append(("weight", tensor.contiguous()))
            elif self.lc.is_weight(v):
                self.args.append(("weight", self.lc.weight(v).contiguous()))
            elif v.name in self.index:
                self.args.append(("input", self.index[v.name]))
            else:
                raise _Decline
        return self.names[key]


def _dtype(v: Value) -> DType:
    if v.type is None or v.type.dtype is None or v.type.dtype == DType.FLOAT64 or v.type.dtype not in TL_DTYPE:
        raise _Decline
    return v.type.dtype


def _scalar(lc: LayerContext, v: Value) -> float | None:
    if lc.is_weight(v) and lc.weight(v).numel() == 1:
        return float(lc.weight(v).reshape(-1)[0])
    return None


def _operands(lc, nodes, produced, args, full, split, scalars) -> dict[str, _Access]:
    """Accesses for the values `nodes` read from outside (broadcast to `full`, mapped by `split`)."""
    out: dict[str, _Access] = {}
    inside = {id(n) for n in lc.nodes}
    for n in nodes:
        for v in n.inputs:
            if v is None or v.name in produced or v.name in out:
                continue
            if v.producer is not None and id(v.producer) in inside:
                raise _Decline  # an in-layer value the template has no variable for (e.g. LayerNorm's Mean)
            s = _scalar(lc, v)
            if s is not None:
                scalars[v.name] = s
                continue
            strides = _broadcast_strides(_static_shape(lc, v), full)
            out[v.name] = _Access(args.arg(v), _to_domain(strides, split), _dtype(v))
    return out


def _plan(lc: LayerContext) -> _Plan:
    anchor = lc.anchor
    if anchor is None or anchor.domain or (anchor.op_type not in _NORMS and anchor.op_type not in _REDUCTIONS):
        raise _Decline
    op = anchor.op_type
    pos = lc.nodes.index(anchor)
    prologue, epilogue = lc.nodes[:pos], lc.nodes[pos + 1:]
    x = anchor.inputs[0]
    xshape = _static_shape(lc, x)
    if _dtype(x) not in _FLOATS or any(d == 0 for d in xshape) or math.prod(xshape) > _INT32_LIMIT:
        raise _Decline
    split, reduced_axes, eps = _anchor_axes(lc, anchor, xshape)
    sizes, reduced = _domain(split, reduced_axes, op)
    # The prologue may only compute the row input; the epilogue is the chain from output 0.
    pro_outs = {o.name for n in prologue for o in n.outputs}
    for n in prologue:
        for o in n.outputs:
            if any(u is anchor and i != 0 for u, i in o.users) or any(u not in lc.nodes for u, _ in o.users):
                raise _Decline
    if prologue and x.name not in pro_outs:
        raise _Decline
    final = (epilogue[-1] if epilogue else anchor).outputs[0]
    if len(lc.outputs) != 1 or lc.outputs[0] is not final:
        raise _Decline
    out_shape = _static_shape(lc, final)
    if math.prod(out_shape) > _INT32_LIMIT:
        raise _Decline

    args, scalars = _Args(lc), {}
    if prologue:
        tile = _operands(lc, prologue, pro_outs, args, xshape, split, scalars)
    else:
        tile = {x.name: _Access(args.arg(x), _to_domain(_broadcast_strides(xshape, xshape), split), _dtype(x))}
    params = _params(lc, anchor, xshape, split, args)
    if op in _REDUCTIONS:
        out_sizes = _static_shape(lc, anchor.outputs[0])
        epi_full, epi_split = out_sizes, [[d] for d in out_sizes]
    else:
        out_sizes = sizes
        epi_full, epi_split = xshape, split
    produced = {anchor.outputs[0].name} | {o.name for n in epilogue for o in n.outputs}
    epi = _operands(lc, epilogue, produced, args, epi_full, epi_split, scalars)
    return _Plan(op, sizes, reduced, eps, prologue, epilogue, x.name, anchor.outputs[0].name, split, tile, params,
                 epi, tuple(out_sizes), _dtype(final), out_shape, args.args, scalars)


def _params(lc: LayerContext, anchor: Node, xshape, split, args: _Args) -> dict[str, _Access]:
    """Scale and bias of the normalizations, addressed over the tile domain."""
    op = anchor.op_type
    names = {"LayerNormalization": ("scale", "bias"), "RMSNormalization": ("scale",),
             "GroupNormalization": ("scale", "bias"), "InstanceNormalization": ("scale", "bias")}.get(op, ())
    out: dict[str, _Access] = {}
    channels = xshape[1] if len(xshape) > 1 else 0
    for k, name in enumerate(names):
        v = anchor.inputs[k + 1] if len(anchor.inputs) > k + 1 else None
        if v is None:
            if name == "scale":
                raise _Decline
            continue
        shape, tensor = _static_shape(lc, v), None
        if op in ("GroupNormalization", "InstanceNormalization"):
            numel = math.prod(shape)
            if op == "GroupNormalization" and anchor.opset < 21 and numel == split[1][0] and numel != channels:
                if not lc.is_weight(v):
                    raise _Decline
                tensor = lc.weight(v).reshape(-1).repeat_interleave(channels // numel)  # per group -> per channel
                numel = channels
            if numel != channels:
                raise _Decline
            shape = (1, channels) + (1,) * (len(xshape) - 2)  # a per-channel vector
        strides = _broadcast_strides(shape, xshape)
        out[name] = _Access(args.arg(v, tensor), _to_domain(strides, split), _dtype(v))
    return out


# -- code generation ------------------------------------------------------------------


def _index(idx: str, sizes: tuple[int, ...], strides: tuple[int, ...]) -> str:
    """Offset expression of flat index `idx` over axes `sizes` for a tensor with `strides`."""
    merged: list[list[int]] = []
    for n, s in zip(sizes, strides):
        if n == 1:
            continue
        if merged and merged[-1][1] == s * n:  # the outer axis continues the inner one: one axis
            merged[-1] = [merged[-1][0] * n, s]
        else:
            merged.append([n, s])
    terms, inner = [], 1
    for k in range(len(merged) - 1, -1, -1):
        n, s = merged[k]
        if s:
            t = idx if inner == 1 else f"({idx} // {inner})"
            if k > 0:
                t = f"({t} % {n})"
            terms.append(t if s == 1 else f"{t} * {s}")
        inner *= n
    return " + ".join(reversed(terms)) if terms else f"{idx} * 0"


def _load(acc: _Access, offset: str, mask: str) -> str:
    other = "0.0" if acc.dtype.is_float else "0"
    return f"tl.load({acc.arg} + ({offset}), mask={mask}, other={other}).to({register_dtype(acc.dtype)})"


class _Source:
    """Builds the kernel text for a plan and a config."""

    def __init__(self, plan: _Plan, block: int, rows: int):
        self.p, self.BLOCK, self.ROWS = plan, block, rows
        self.lines: list[str] = []
        self.row_vars: dict[tuple, str] = {}
        self.row_sizes, self.col_sizes = plan.axis_sizes()
        contiguous = _broadcast_strides(plan.out_shape, plan.out_shape)
        self.out = _Access("out", _to_domain(contiguous, plan.axis_split) if not plan.reduces else contiguous,
                           plan.out_dtype)

    def emit(self, indent: int, *lines: str) -> None:
        self.lines.extend("    " * indent + ln for ln in lines)

    def row_offset(self, acc: _Access) -> str:
        """The variable holding a tile access's per-row offsets (emitted once, before any loop)."""
        key = (acc.arg, acc.strides)
        if key not in self.row_vars:
            var = self.row_vars[key] = f"ro{len(self.row_vars)}"
            self.emit(1, f"{var} = {_index('rows', self.row_sizes, self.p.split(acc.strides)[0])}")
        return self.row_vars[key]

    def tile_load(self, acc: _Access) -> str:
        """A [ROWS, BLOCK] load; [1, BLOCK] for tensors the same in every row (scale, bias...)."""
        row_strides, col_strides = self.p.split(acc.strides)
        col = _index("cols", self.col_sizes, col_strides)
        if not any(row_strides):
            return _load(acc, f"({col})[None, :]", "cmask[None, :]")
        return _load(acc, self.tile_offset(acc), "mask")

    def tile_offset(self, acc: _Access) -> str:
        col = _index("cols", self.col_sizes, self.p.split(acc.strides)[1])
        return f"{self.row_offset(acc)}[:, None] + ({col})[None, :]"

    def row_tile(self, indent: int, k: int) -> str:
        """Lines loading the columns `cols` and computing the anchor's row input; its variable."""
        self.emit(indent, "cmask = cols < R", "mask = rmask[:, None] & cmask[None, :]")
        env = {}
        for i, (name, acc) in enumerate(self.p.tile.items()):
            env[name] = f"t{i}"
            self.emit(indent, f"t{i} = {self.tile_load(acc)}")
        self.emit(indent, *emit_elementwise(self.p.prologue, env, self.scalar_of, prefix=f"q{k}_"))
        return env[self.p.x_name]

    def scalar_of(self, v: Value) -> float | None:
        return self.p.scalars.get(v.name)

    def text(self) -> str:
        p = self.p
        args = [f"p{i}" for i in range(len(p.args))] + ["out"]
        self.emit(0, "import triton", "import triton.language as tl", "", "",
                  "@triton.jit", f"def norm_kernel({', '.join(args)}):")
        self.emit(1, f"ROWS: tl.constexpr = {self.ROWS}", f"BLOCK: tl.constexpr = {self.BLOCK}",
                  f"M: tl.constexpr = {p.M}", f"R: tl.constexpr = {p.R}",
                  "rows = tl.program_id(0) * ROWS + tl.arange(0, ROWS)", "rmask = rows < M")
        tile_accesses = [*p.tile.values(), *p.params.values()] + ([] if p.reduces else [*p.epi.values(), self.out])
        for acc in tile_accesses:
            if any(self.p.split(acc.strides)[0]) or acc is self.out:
                self.row_offset(acc)
        single = self.BLOCK >= p.R
        if single:
            self.emit(1, "cols = tl.arange(0, BLOCK)")
            x = self.row_tile(1, 0)
        stats = _STATS[_REDUCTIONS.get(p.op, p.op)]
        for k, (init, update, finish) in enumerate(stats):
            self.emit(1, *init)
            if single:
                self.emit(1, *[u.format(x=x) for u in update])
            else:
                self.emit(1, "for c0 in range(0, R, BLOCK):", "    cols = c0 + tl.arange(0, BLOCK)")
                xk = self.row_tile(2, k)
                self.emit(2, *[u.format(x=xk) for u in update])
            self.emit(1, *[f.format(eps=repr(p.eps)) for f in finish])
        if p.reduces:
            self.reduce_store()
        elif single:
            self.norm_store(1, x)
        else:
            self.emit(1, "for c0 in range(0, R, BLOCK):", "    cols = c0 + tl.arange(0, BLOCK)")
            self.norm_store(2, self.row_tile(2, len(stats)))
        return "\n".join(self.lines) + "\n"

    def epilogue(self, indent: int, first: str, load) -> str:
        """Lines computing the epilogue from the anchor's result `first`; the result's variable."""
        p = self.p
        env = {p.anchor_out: first}
        for i, (name, acc) in enumerate(p.epi.items()):
            env[name] = f"e{i}"
            self.emit(indent, f"e{i} = {load(acc)}")
        self.emit(indent, *emit_elementwise(p.epilogue, env, self.scalar_of, prefix="z"))
        return env[p.epilogue[-1].outputs[0].name] if p.epilogue else first

    def norm_store(self, indent: int, x: str) -> None:
        p = self.p
        params = {k: f"w_{k}" for k in p.params}
        for k, acc in p.params.items():
            self.emit(indent, f"w_{k} = {self.tile_load(acc)}")
        self.emit(indent, _NORM_OUT[p.op].format(x=x, affine=_affine(params)))
        res = self.epilogue(indent, "y", self.tile_load)
        self.emit(indent, f"tl.store(out + ({self.tile_offset(self.out)}), {res}.to({TL_DTYPE[p.out_dtype]}), "
                          "mask=mask)")

    def reduce_store(self) -> None:
        p = self.p
        res = self.epilogue(1, "r", lambda acc: _load(acc, _index("rows", p.out_sizes, acc.strides), "rmask"))
        self.emit(1, f"tl.store(out + rows, {res}.to({TL_DTYPE[p.out_dtype]}), mask=rmask)")


# Per statistic: (init lines, update lines over the tile {x}, finish lines), each a pass over the row.
_MEAN = (["acc = tl.zeros([ROWS, BLOCK], dtype=tl.float32)"],
         ["acc += tl.where(cmask[None, :], {x}, 0.0)"],
         ["mean = tl.sum(acc, axis=1) / R"])
_VAR = (["acc2 = tl.zeros([ROWS, BLOCK], dtype=tl.float32)"],
        ["d = tl.where(cmask[None, :], {x} - mean[:, None], 0.0)", "acc2 += d * d"],
        ["rstd = 1.0 / tl.sqrt(tl.sum(acc2, axis=1) / R + {eps})"])
_MS = (["acc = tl.zeros([ROWS, BLOCK], dtype=tl.float32)"],
       ["d = tl.where(cmask[None, :], {x}, 0.0)", "acc += d * d"],
       ["rstd = 1.0 / tl.sqrt(tl.sum(acc, axis=1) / R + {eps})"])
# Online softmax statistics: running max m and sum s of exp(x - m); -inf rows stay NaN-free here.
_SOFTMAX = (["m = tl.full([ROWS], float('-inf'), tl.float32)", "s = tl.zeros([ROWS], dtype=tl.float32)"],
            ["xm = tl.where(cmask[None, :], {x}, float('-inf'))",
             "m_new = tl.maximum(m, tl.max(xm, axis=1))",
             "m_safe = tl.where(m_new == float('-inf'), 0.0, m_new)",
             "s = s * tl.exp(m - m_safe) + tl.sum(tl.exp(xm - m_safe[:, None]), axis=1)",
             "m = m_new"],
            [])


def _acc(init: str, update: str, finish: str):
    return ([f"acc = tl.full([ROWS, BLOCK], {init}, tl.float32)"], [update], [finish])


_STATS = {
    "LayerNormalization": [_MEAN, _VAR], "GroupNormalization": [_MEAN, _VAR],
    "InstanceNormalization": [_MEAN, _VAR], "RMSNormalization": [_MS],
    "Softmax": [_SOFTMAX], "LogSoftmax": [_SOFTMAX],
    "sum": [_acc("0.0", "acc += tl.where(cmask[None, :], {x}, 0.0)", "r = tl.sum(acc, axis=1)")],
    "mean": [_acc("0.0", "acc += tl.where(cmask[None, :], {x}, 0.0)", "r = tl.sum(acc, axis=1) / R")],
    "sumsq": [_acc("0.0", "acc += tl.where(cmask[None, :], {x} * {x}, 0.0)", "r = tl.sum(acc, axis=1)")],
    "l1": [_acc("0.0", "acc += tl.where(cmask[None, :], tl.abs({x}), 0.0)", "r = tl.sum(acc, axis=1)")],
    "l2": [_acc("0.0", "acc += tl.where(cmask[None, :], {x} * {x}, 0.0)", "r = tl.sqrt(tl.sum(acc, axis=1))")],
    "max": [_acc("float('-inf')", "acc = tl.maximum(acc, tl.where(cmask[None, :], {x}, float('-inf')))",
                 "r = tl.max(acc, axis=1)")],
    "min": [_acc("float('inf')", "acc = tl.minimum(acc, tl.where(cmask[None, :], {x}, float('inf')))",
                 "r = tl.min(acc, axis=1)")],
    "lse": [(_SOFTMAX[0], _SOFTMAX[1], ["r = m + tl.log(s)"])],
}


def _affine(params: dict[str, str]) -> str:
    return "".join(f" * {params['scale']}" if k == "scale" else f" + {params['bias']}" for k in params)


_CENTERED = "y = ({x} - mean[:, None]) * rstd[:, None]{affine}"
_NORM_OUT = {
    "LayerNormalization": _CENTERED, "GroupNormalization": _CENTERED, "InstanceNormalization": _CENTERED,
    "RMSNormalization": "y = {x} * rstd[:, None]{affine}",
    "Softmax": "y = tl.exp({x} - m[:, None]) / s[:, None]",
    "LogSoftmax": "y = {x} - m[:, None] - tl.log(s)[:, None]",
}


# -- the tactic ---------------------------------------------------------------------------


def _pow2(n: int) -> int:
    return 1 << max(0, n - 1).bit_length()


def _clamp(v: int, lo: int, hi: int) -> int:
    return max(lo, min(hi, v))


def _configs(M: int, R: int, strided: bool) -> list[dict[str, int]]:
    """Single-pass tiles of ~1K and ~4K elements when the row fits, looped ones for long rows."""
    block, max_rows = _pow2(R), min(128, _pow2(M))
    out: list[dict[str, int]] = []
    if block <= _MAX_SINGLE_PASS:
        for elems in (1024, 4096):
            rows = _clamp(elems // block, 1, max_rows)
            warps = _clamp(rows * block // 512, 2, 16)
            fewest = max(2, rows * block // 1024)  # at most 32 elements a thread: no spills
            for w in (max(fewest, warps // 2), warps, min(16, warps * 2)):
                out.append({"BLOCK": block, "ROWS": rows, "num_warps": w})
    if block > 4096:
        for b, w in ((2048, 4), (4096, 8), (8192, 16)):
            if b < block:
                out.append({"BLOCK": b, "ROWS": 1, "num_warps": w})
    if strided and block > 64:
        # Columns strided in memory (softmax over a middle axis): neighbouring rows are contiguous.
        rows = min(32, max_rows)
        out.append({"BLOCK": _clamp(2048 // rows, 1, block), "ROWS": rows, "num_warps": 4})
    unique = []
    for c in out:
        if c not in unique:
            unique.append(c)
    return unique[:8]


def _usable_device(lc: LayerContext) -> bool:
    return lc.device.type == "cuda" or os.environ.get("TRITON_INTERPRET") == "1"


class TritonNormTactic(Tactic):
    """LayerNormalization, RMSNormalization, Group/InstanceNormalization, (Log)Softmax and float
    reductions (Reduce{Sum,Mean,Max,Min,SumSquare,L1,L2,LogSumExp}, Global{Average,Max}Pool) over
    any axes, with the layer's elementwise prologue and epilogue fused in."""

    name = "triton.norm"

    def applies(self, lc: LayerContext) -> bool:
        if not _usable_device(lc):
            return False
        try:
            plan = _plan(lc)
            _Source(plan, _pow2(plan.R), 1).text()  # every prologue/epilogue node must be expressible
        except (_Decline, ValueError):
            return False
        return True

    def configs(self, lc: LayerContext) -> list[dict[str, Any]]:
        plan = _plan(lc)
        x = plan.tile.get(plan.x_name)
        strided = x is not None and plan.split(x.strides)[1][-1:] != (1,)
        return _configs(plan.M, plan.R, strided)

    def compile(self, lc: LayerContext, config: dict[str, Any]) -> Runner:
        plan = _plan(lc)
        block, rows = int(config["BLOCK"]), int(config.get("ROWS", 1))
        if block & (block - 1) or rows & (rows - 1):
            raise ValueError(f"triton.norm: BLOCK and ROWS must be powers of 2, got {config}")
        kernel = load_kernel(_Source(plan, block, rows).text(), "norm_kernel")
        grid = (triton.cdiv(plan.M, rows),)
        warps = int(config.get("num_warps", 4))
        slots = [a if kind == "weight" else int(a) for kind, a in plan.args]
        is_input = [kind == "input" for kind, _ in plan.args]
        shape, dtype, device = plan.out_shape, plan.out_dtype.torch, lc.device

        def run(inputs: list[torch.Tensor], out: list | None = None) -> list[torch.Tensor]:
            y = output_or_empty(out, 0, shape, dtype, device)
            args = [inputs[s] if inp else s for s, inp in zip(slots, is_input)]
            kernel[grid](*args, y, num_warps=warps)
            return [y]

        return binds_outputs(run, [True])


TRITON_NORM = register_tactic(TritonNormTactic())
