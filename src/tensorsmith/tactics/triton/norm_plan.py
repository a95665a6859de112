"""What a triton.norm kernel computes for one Layer, whatever the config: whether the template
takes the Layer, and how the kernel addresses each tensor it touches.

The anchor's input is seen as rows: its reduced axes (normalized, softmaxed or reduced) make a
row of R elements, the other axes index M rows. Every tensor is addressed through its strides over
those axes (the tile domain: the input's axes, with GroupNormalization's C split into groups and
channels within a group), so any axis set works. `build_plan` raises Decline for a Layer the
template cannot run.

Kept apart from the kernel text (norm_source.py) and the tactic (norm.py): this is the half that
reads the graph; the source generator sees only the Plan.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

import torch

from ...ir import DType, Node, Value
from ...ops._util import normalize_axis
from ..base import LayerContext
from .codegen import TL_DTYPE

_NORMS = ("LayerNormalization", "RMSNormalization", "GroupNormalization", "InstanceNormalization",
          "Softmax", "LogSoftmax")
# Reduction anchor -> the statistic its row reduces to.
REDUCTIONS = {
    "ReduceSum": "sum", "ReduceMean": "mean", "ReduceMax": "max", "ReduceMin": "min",
    "ReduceSumSquare": "sumsq", "ReduceL1": "l1", "ReduceL2": "l2", "ReduceLogSumExp": "lse",
    "GlobalAveragePool": "mean", "GlobalMaxPool": "max",
}
_FLOATS = (DType.FLOAT32, DType.FLOAT16, DType.BFLOAT16)
_INT32_LIMIT = 2**31 - 1  # offsets are int32


class Decline(Exception):
    """The kernel template cannot run this layer (applies() answers False)."""


@dataclass
class Access:
    """One tensor the kernel reads: its argument name and its strides over a domain's axes."""

    arg: str
    strides: tuple[int, ...]
    dtype: DType


@dataclass
class Plan:
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
    tile: dict[str, Access]  # values loaded per tile: the row input or the prologue's operands
    params: dict[str, Access]  # the anchor's own tensors: scale, bias
    epi: dict[str, Access]  # epilogue operands (tile domain for norms, output axes for reductions)
    out_sizes: tuple[int, ...]
    out_dtype: DType
    out_shape: tuple[int, ...]
    args: list[tuple[str, Any]] = field(default_factory=list)  # ("input", index) | ("weight", tensor)
    scalars: dict[str, float] = field(default_factory=dict)

    @property
    def reduces(self) -> bool:
        return self.op in REDUCTIONS

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


def _static_shape(lc: LayerContext, v: Value) -> tuple[int, ...]:
    try:
        return lc.shape(v)
    except ValueError:
        raise Decline from None


def broadcast_strides(shape: tuple[int, ...], full: tuple[int, ...]) -> tuple[int, ...]:
    """Strides of a contiguous tensor of `shape` read as `full` under ONNX (right-aligned) broadcasting."""
    if len(shape) > len(full):
        raise Decline
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
            raise Decline
    return tuple(out)


def _anchor_axes(lc: LayerContext, node: Node, shape: tuple[int, ...]) -> tuple[list[list[int]], set[int], float]:
    """(per input axis: its sizes in the tile domain, reduced input axes, epsilon) for the anchor."""
    rank, op, attrs = len(shape), node.op_type, node.attrs
    split = [[d] for d in shape]
    eps = float(attrs.get("epsilon", 1e-5))
    if rank == 0:
        raise Decline
    if op in ("LayerNormalization", "RMSNormalization", "GroupNormalization"):
        if int(attrs.get("stash_type", 1)) != DType.FLOAT32.onnx:
            raise Decline
    if op in ("LayerNormalization", "RMSNormalization"):
        return split, set(range(normalize_axis(int(attrs.get("axis", -1)), rank), rank)), eps
    if op in ("Softmax", "LogSoftmax"):
        if node.opset >= 13:
            return split, {normalize_axis(int(attrs.get("axis", -1)), rank)}, eps
        return split, set(range(normalize_axis(int(attrs.get("axis", 1)), rank), rank)), eps
    if op in ("InstanceNormalization", "GroupNormalization", "GlobalAveragePool", "GlobalMaxPool"):
        if rank < (2 if op == "GroupNormalization" else 3):
            raise Decline
        if op == "GroupNormalization":
            groups = int(attrs.get("num_groups", 0))
            if groups <= 0 or shape[1] % groups:
                raise Decline
            split[1] = [groups, shape[1] // groups]
            return split, {1} | set(range(2, rank)), eps  # only C's within-group part, see _domain
        return split, set(range(2, rank)), eps
    # Reductions: axes from input 1 (the importer moves the old attribute there), static only.
    axes_v = node.inputs[1] if len(node.inputs) > 1 else None
    if axes_v is not None:
        if not lc.is_weight(axes_v):
            raise Decline
        axes = [int(a) for a in lc.weight(axes_v).reshape(-1).tolist()]
    else:
        axes = [int(a) for a in attrs.get("axes", [])]
    if not axes:
        if int(attrs.get("noop_with_empty_axes", 0)):
            raise Decline
        axes = list(range(rank))
    norm = {normalize_axis(a, rank) for a in axes}
    if len(norm) != len(axes):
        raise Decline
    return split, norm, eps


def _domain(split: list[list[int]], reduced_axes: set[int], op: str) -> tuple[tuple[int, ...], tuple[bool, ...]]:
    sizes, reduced = [], []
    for i, subs in enumerate(split):
        for k, d in enumerate(subs):
            sizes.append(d)
            # GroupNormalization reduces the channels within a group, not over groups.
            reduced.append(i in reduced_axes and not (op == "GroupNormalization" and i == 1 and k == 0))
    return tuple(sizes), tuple(reduced)


def to_domain(strides: tuple[int, ...], split: list[list[int]]) -> tuple[int, ...]:
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
                raise Decline
        return self.names[key]


def _dtype(v: Value) -> DType:
    if v.type is None or v.type.dtype is None or v.type.dtype == DType.FLOAT64 or v.type.dtype not in TL_DTYPE:
        raise Decline
    return v.type.dtype


def _scalar(lc: LayerContext, v: Value) -> float | None:
    if lc.is_weight(v) and lc.weight(v).numel() == 1:
        return float(lc.weight(v).reshape(-1)[0])
    return None


def _operands(lc, nodes, produced, args, full, split, scalars) -> dict[str, Access]:
    """Accesses for the values `nodes` read from outside (broadcast to `full`, mapped by `split`)."""
    out: dict[str, Access] = {}
    inside = {id(n) for n in lc.nodes}
    for n in nodes:
        for v in n.inputs:
            if v is None or v.name in produced or v.name in out:
                continue
            if v.producer is not None and id(v.producer) in inside:
                raise Decline  # an in-layer value the template has no variable for (e.g. LayerNorm's Mean)
            s = _scalar(lc, v)
            if s is not None:
                scalars[v.name] = s
                continue
            strides = broadcast_strides(_static_shape(lc, v), full)
            out[v.name] = Access(args.arg(v), to_domain(strides, split), _dtype(v))
    return out


def build_plan(lc: LayerContext) -> Plan:
    """What the kernel computes for `lc`; raises Decline where the template does not take the Layer."""
    anchor = lc.anchor
    if anchor is None or anchor.domain or (anchor.op_type not in _NORMS and anchor.op_type not in REDUCTIONS):
        raise Decline
    op = anchor.op_type
    pos = lc.nodes.index(anchor)
    prologue, epilogue = lc.nodes[:pos], lc.nodes[pos + 1:]
    x = anchor.inputs[0]
    xshape = _static_shape(lc, x)
    if _dtype(x) not in _FLOATS or any(d == 0 for d in xshape) or math.prod(xshape) > _INT32_LIMIT:
        raise Decline
    split, reduced_axes, eps = _anchor_axes(lc, anchor, xshape)
    sizes, reduced = _domain(split, reduced_axes, op)
    # The prologue may only compute the row input; the epilogue is the chain from output 0.
    pro_outs = {o.name for n in prologue for o in n.outputs}
    for n in prologue:
        for o in n.outputs:
            if any(u is anchor and i != 0 for u, i in o.users) or any(u not in lc.nodes for u, _ in o.users):
                raise Decline
    if prologue and x.name not in pro_outs:
        raise Decline
    final = (epilogue[-1] if epilogue else anchor).outputs[0]
    if len(lc.outputs) != 1 or lc.outputs[0] is not final:
        raise Decline
    out_shape = _static_shape(lc, final)
    if math.prod(out_shape) > _INT32_LIMIT:
        raise Decline

    args, scalars = _Args(lc), {}
    if prologue:
        tile = _operands(lc, prologue, pro_outs, args, xshape, split, scalars)
    else:
        tile = {x.name: Access(args.arg(x), to_domain(broadcast_strides(xshape, xshape), split), _dtype(x))}
    params = _params(lc, anchor, xshape, split, args)
    if op in REDUCTIONS:
        out_sizes = _static_shape(lc, anchor.outputs[0])
        epi_full, epi_split = out_sizes, [[d] for d in out_sizes]
    else:
        out_sizes = sizes
        epi_full, epi_split = xshape, split
    produced = {anchor.outputs[0].name} | {o.name for n in epilogue for o in n.outputs}
    epi = _operands(lc, epilogue, produced, args, epi_full, epi_split, scalars)
    return Plan(op, sizes, reduced, eps, prologue, epilogue, x.name, anchor.outputs[0].name, split, tile, params,
                 epi, tuple(out_sizes), _dtype(final), out_shape, args.args, scalars)


def _params(lc: LayerContext, anchor: Node, xshape, split, args: _Args) -> dict[str, Access]:
    """Scale and bias of the normalizations, addressed over the tile domain."""
    op = anchor.op_type
    names = {"LayerNormalization": ("scale", "bias"), "RMSNormalization": ("scale",),
             "GroupNormalization": ("scale", "bias"), "InstanceNormalization": ("scale", "bias")}.get(op, ())
    out: dict[str, Access] = {}
    channels = xshape[1] if len(xshape) > 1 else 0
    for k, name in enumerate(names):
        v = anchor.inputs[k + 1] if len(anchor.inputs) > k + 1 else None
        if v is None:
            if name == "scale":
                raise Decline
            continue
        shape, tensor = _static_shape(lc, v), None
        if op in ("GroupNormalization", "InstanceNormalization"):
            numel = math.prod(shape)
            if op == "GroupNormalization" and anchor.opset < 21 and numel == split[1][0] and numel != channels:
                if not lc.is_weight(v):
                    raise Decline
                tensor = lc.weight(v).reshape(-1).repeat_interleave(channels // numel)  # per group -> per channel
                numel = channels
            if numel != channels:
                raise Decline
            shape = (1, channels) + (1,) * (len(xshape) - 2)  # a per-channel vector
        strides = broadcast_strides(shape, xshape)
        out[name] = Access(args.arg(v, tensor), to_domain(strides, split), _dtype(v))
    return out
