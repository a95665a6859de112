"""Pattern recognition: decomposed ONNX forms of common functions become single ops.

GELU (erf and tanh forms), SiLU, Softmax, LayerNorm and RMSNorm, as exporters write them,
become Gelu / Swish / Softmax / LayerNormalization / RMSNormalization nodes, which later
stages run as one kernel. Each rewrite keeps the source node names of what it absorbed.
"""

from __future__ import annotations

import math

import torch

from ..ir import Graph, Node, Value
from .manager import register_pass
from .pattern import Const, Match, Op, Var, match, scalar
from .rewrite import add_constant, constant_value, new_node, remove_dead, single_user

x = Var("x")


def _replace(graph: Graph, root: Node, m: Match, op_type: str, inputs: list[Value | None], attrs: dict) -> Node:
    """Insert the fused node where the pattern's root was and move the root's readers to it."""
    node = new_node(graph, graph.nodes.index(root), op_type, inputs, attrs, sources=m.sources(), name=op_type.lower())
    out = root.outputs[0]
    if out.type is not None and node.outputs[0].type is not None and out.type.shape is not None:
        node.outputs[0].type = out.type  # keep the (possibly more precise) known type
    graph.replace_all_uses(out, node.outputs[0])
    remove_dead(graph, m.matched)
    return node


def is_live(graph: Graph, node: Node) -> bool:
    """A replaced root stays in the graph until dead-code elimination; it must not match again."""
    return any(v.users or any(o is v for o in graph.outputs) for v in node.outputs)


def _rewrite_each(graph: Graph, root_ops: tuple[str, ...], try_rewrite) -> bool:
    changed = False
    for node in list(graph.nodes):
        if node.op_type in root_ops and not node.domain and is_live(graph, node) and try_rewrite(graph, node):
            changed = True
    return changed


# -- GELU --------------------------------------------------------------------------------------

def _erf_arg():
    return Op(("Div", "Mul"), x, Const("c"))


_GELU_ERF = [
    # 0.5 * x * (1 + erf(x / sqrt(2))), in the groupings exporters produce
    Op("Mul", Op("Mul", x, Op("Add", Op("Erf", _erf_arg()), Const("one", scalar(1.0)), commutative=True), commutative=True),
       Const("half", scalar(0.5)), commutative=True),
    Op("Mul", x, Op("Mul", Op("Add", Op("Erf", _erf_arg()), Const("one", scalar(1.0)), commutative=True),
                    Const("half", scalar(0.5)), commutative=True), commutative=True),
    Op("Mul", Op("Mul", x, Const("half", scalar(0.5)), commutative=True),
       Op("Add", Op("Erf", _erf_arg()), Const("one", scalar(1.0)), commutative=True), commutative=True),
]


def _erf_scale_ok(m: Match) -> bool:
    node = m.matched[0]  # the Div/Mul inside Erf
    c = float(m.consts["c"].reshape(-1)[0]) if m.consts["c"].numel() == 1 else None
    if c is None:
        return False
    value = c if node.op_type == "Div" else 1.0 / c if c else 0.0
    return abs(value - math.sqrt(2.0)) < 1e-3


_TANH_INNER = Op("Mul", Const("k", scalar(math.sqrt(2.0 / math.pi))),
                 Op("Add", x, Op("Mul", Const("a", scalar(0.044715)), Op("Pow", x, Const("three", scalar(3.0))),
                                 commutative=True), commutative=True), commutative=True)
_GELU_TANH = [
    Op("Mul", Op("Mul", x, Op("Add", Op("Tanh", _TANH_INNER), Const("one", scalar(1.0)), commutative=True), commutative=True),
       Const("half", scalar(0.5)), commutative=True),
    Op("Mul", Op("Mul", x, Const("half", scalar(0.5)), commutative=True),
       Op("Add", Op("Tanh", _TANH_INNER), Const("one", scalar(1.0)), commutative=True), commutative=True),
]


def _try_gelu(graph: Graph, root: Node) -> bool:
    for p in _GELU_ERF:
        m = match(p, root.outputs[0], graph)
        if m and _erf_scale_ok(m):
            _replace(graph, root, m, "Gelu", [m["x"]], {"approximate": "none"})
            return True
    for p in _GELU_TANH:
        m = match(p, root.outputs[0], graph)
        if m:
            _replace(graph, root, m, "Gelu", [m["x"]], {"approximate": "tanh"})
            return True
    return False


@register_pass("gelu_recognition", 3, "x*0.5*(1+erf(x/sqrt 2)) and its tanh form -> Gelu")
def gelu_recognition(graph: Graph) -> bool:
    return _rewrite_each(graph, ("Mul",), _try_gelu)


# -- SiLU --------------------------------------------------------------------------------------

_SILU = Op("Mul", x, Op("Sigmoid", x), commutative=True)


def _try_silu(graph: Graph, root: Node) -> bool:
    m = match(_SILU, root.outputs[0], graph)
    if m:
        _replace(graph, root, m, "Swish", [m["x"]], {"alpha": 1.0})
        return True
    return False


@register_pass("silu_recognition", 3, "x*sigmoid(x) -> Swish (SiLU)")
def silu_recognition(graph: Graph) -> bool:
    return _rewrite_each(graph, ("Mul",), _try_silu)


# -- Softmax -----------------------------------------------------------------------------------

def _keepdims(node: Node) -> bool:
    return node.attrs.get("keepdims", 1) == 1 and not node.attrs.get("noop_with_empty_axes", 0)


_EXP_STABLE = Op("Exp", Op("Sub", x, Op("ReduceMax", x, Const("max_axes"), attrs=_keepdims)), bind="exp")
_SOFTMAX = [
    Op("Div", _EXP_STABLE, Op("ReduceSum", _EXP_STABLE, Const("sum_axes"), attrs=_keepdims)),
    Op("Div", Op("Exp", x, bind="exp"), Op("ReduceSum", Op("Exp", x, bind="exp"), Const("sum_axes"), attrs=_keepdims)),
]


def _single_axis(t: torch.Tensor, rank: int | None) -> int | None:
    if t.numel() != 1 or rank is None:
        return None
    a = int(t.reshape(-1)[0])
    return a + rank if a < 0 else a


def _try_softmax(graph: Graph, root: Node) -> bool:
    for p in _SOFTMAX:
        m = match(p, root.outputs[0], graph)
        if not m:
            continue
        rank = m["x"].type.rank if m["x"].type else None
        axis = _single_axis(m.consts["sum_axes"], rank)
        if axis is None or ("max_axes" in m.consts and _single_axis(m.consts["max_axes"], rank) != axis):
            continue
        _replace(graph, root, m, "Softmax", [m["x"]], {"axis": axis})
        return True
    return False


@register_pass("softmax_recognition", 3, "exp(x-max(x))/sum(exp(...)) -> Softmax")
def softmax_recognition(graph: Graph) -> bool:
    return _rewrite_each(graph, ("Div",), _try_softmax)


# -- LayerNorm and RMSNorm ---------------------------------------------------------------------

_SQUARE_OF = lambda v: Op("Pow", v, Const("two", scalar(2.0)))  # noqa: E731
_MEAN = Op("ReduceMean", x, Const("axes"), attrs=_keepdims, bind="mean")
_CENTERED = Op("Sub", x, _MEAN, bind="centered")
_VAR = Op("ReduceMean", _SQUARE_OF(_CENTERED), Const("axes2"), attrs=_keepdims)
_VAR_MUL = Op("ReduceMean", Op("Mul", _CENTERED, _CENTERED), Const("axes2"), attrs=_keepdims)
_STD = lambda var: Op("Sqrt", Op("Add", var, Const("eps", lambda t: t.numel() == 1), commutative=True))  # noqa: E731
_LAYERNORM_CORE = [Op("Div", _CENTERED, _STD(var)) for var in (_VAR, _VAR_MUL)]

_MS = Op("ReduceMean", _SQUARE_OF(x), Const("axes"), attrs=_keepdims)
_MS_MUL = Op("ReduceMean", Op("Mul", x, x), Const("axes"), attrs=_keepdims)
_RMS_CORE = [
    *(Op("Div", x, _STD(ms)) for ms in (_MS, _MS_MUL)),
    *(Op("Mul", x, Op("Reciprocal", _STD(ms)), commutative=True) for ms in (_MS, _MS_MUL)),
]


def _trailing_axis(axes: torch.Tensor, rank: int) -> int | None:
    """The first axis if `axes` are the last k axes of a rank-`rank` tensor, else None."""
    got = sorted(int(a) % rank for a in axes.reshape(-1).tolist())
    return got[0] if got and got == list(range(got[0], rank)) else None


def _affine_tail(graph: Graph, core_out: Value, norm_shape: tuple[int, ...]):
    """Optional `* gamma + beta` after the normalization, with constant gamma/beta of the
    normalized shape (or broadcastable to it). Returns (gamma, beta, last node, nodes)."""
    last, nodes, gamma, beta = core_out, [], None, None
    user = single_user(core_out)
    if user is not None and user.op_type == "Mul" and user.graph is graph:
        other = user.inputs[1] if user.inputs[0] is core_out else user.inputs[0]
        t = constant_value(graph, other)
        if t is not None and _broadcasts_to(t, norm_shape):
            gamma, last = t, user.outputs[0]
            nodes.append(user)
            user = single_user(last)
            if user is not None and user.op_type == "Add" and user.graph is graph:
                other = user.inputs[1] if user.inputs[0] is last else user.inputs[0]
                t = constant_value(graph, other)
                if t is not None and _broadcasts_to(t, norm_shape):
                    beta, last = t, user.outputs[0]
                    nodes.append(user)
    return gamma, beta, last, nodes


def _broadcasts_to(t: torch.Tensor, shape: tuple[int, ...]) -> bool:
    if t.dim() > len(shape):
        return False
    try:
        return tuple(torch.broadcast_shapes(tuple(t.shape), shape)) == tuple(shape)
    except RuntimeError:
        return False


def _norm_context(m: Match):
    t = m["x"].type
    if t is None or t.shape is None:
        return None
    rank = len(t.shape)
    axis = _trailing_axis(m.consts["axes"], rank)
    if axis is None or ("axes2" in m.consts and _trailing_axis(m.consts["axes2"], rank) != axis):
        return None
    norm_shape = t.shape[axis:]
    if not all(isinstance(d, int) for d in norm_shape) or not t.dtype or not t.dtype.is_float:
        return None
    return axis, tuple(norm_shape), t.dtype.torch


def _fuse_norm(graph: Graph, root: Node, m: Match, op_type: str) -> bool:
    ctx = _norm_context(m)
    if ctx is None:
        return False
    axis, norm_shape, dtype = ctx
    gamma, beta, last, tail = _affine_tail(graph, root.outputs[0], norm_shape)
    m.matched.extend(tail)
    scale = torch.ones(norm_shape, dtype=dtype) if gamma is None else gamma.to(dtype).expand(norm_shape).contiguous()
    inputs = [m["x"], add_constant(graph, f"{op_type.lower()}_scale", scale)]
    if op_type == "LayerNormalization":
        bias = torch.zeros(norm_shape, dtype=dtype) if beta is None else beta.to(dtype).expand(norm_shape).contiguous()
        inputs.append(add_constant(graph, "layernorm_bias", bias))
    elif beta is not None:
        m.matched.pop()  # RMSNorm has no bias input: leave the Add in place
        last = m.matched[-1].outputs[0]
    eps = float(m.consts["eps"].reshape(-1)[0])
    end = last.producer
    node = new_node(graph, graph.nodes.index(end), op_type, inputs, {"axis": axis, "epsilon": eps},
                    sources=m.sources(), name=op_type.lower())
    if last.type is not None:
        node.outputs[0].type = last.type
    graph.replace_all_uses(last, node.outputs[0])
    remove_dead(graph, m.matched)
    return True


def _norm_rewrite(patterns: list[Op], op_type: str):
    def try_rewrite(graph: Graph, root: Node) -> bool:
        for p in patterns:
            m = match(p, root.outputs[0], graph)
            if m and _fuse_norm(graph, root, m, op_type):
                return True
        return False

    return try_rewrite


_try_layernorm = _norm_rewrite(_LAYERNORM_CORE, "LayerNormalization")
_try_rmsnorm = _norm_rewrite(_RMS_CORE, "RMSNormalization")


@register_pass("layernorm_recognition", 3, "mean/variance/normalize/scale/shift chains -> LayerNormalization")
def layernorm_recognition(graph: Graph) -> bool:
    return _rewrite_each(graph, ("Div",), _try_layernorm)


@register_pass("rmsnorm_recognition", 3, "x/sqrt(mean(x^2)+eps)*gamma -> RMSNormalization")
def rmsnorm_recognition(graph: Graph) -> bool:
    return _rewrite_each(graph, ("Div", "Mul"), _try_rmsnorm)
