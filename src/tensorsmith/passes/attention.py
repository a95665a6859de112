"""Attention recognition: MatMul -> scale -> (+mask) -> Softmax -> MatMul becomes one Attention op."""

from __future__ import annotations

import math

from ..ir import Graph, Node, Value
from .manager import register_pass
from .pattern import Const, Match, Op, Var, match
from .recognize import is_live
from .rewrite import constant_value, forward, is_graph_output, new_node, remove_dead

_q, _k, _v = Var("q"), Var("kt"), Var("v")
_one_number = lambda t: t.numel() == 1  # noqa: E731
# Exporters scale Q, or K^T, or both (by sqrt(scale) each, as torch's SDPA decomposition does).
_Q = Op("Mul", _q, Const("q_scale", _one_number), commutative=True)
_K = Op("Mul", _k, Const("k_scale", _one_number), commutative=True)


def _scores(q, k):
    """The score tensor before the mask: QK^T, optionally scaled by Mul or Div."""
    qk = Op("MatMul", q, k, bind="qk")
    return [
        Op("Mul", qk, Const("s_scale", lambda t: t.numel() == 1), commutative=True, bind="s_op"),
        Op("Div", qk, Const("s_scale", lambda t: t.numel() == 1), bind="s_op"),
        qk,
    ]


def _probabilities(scores):
    p = Op("Softmax", scores, bind="softmax")
    # torch's SDPA export zeroes fully masked rows: Where(IsNaN(p), 0, p), as Attention does.
    return [p, Op("Where", Op("IsNaN", p), Const("zero", lambda t: t.numel() == 1 and not t.any()), p)]


def _patterns() -> list[Op]:
    out = []
    for q in (_Q, _q):
        for k in (_K, _k):
            for s in _scores(q, k):
                for masked in (Op("Add", s, Var("mask"), commutative=True), s):
                    out.extend(Op("MatMul", p, _v) for p in _probabilities(masked))
    return out


_PATTERNS = _patterns()


def _scale(m: Match) -> float:
    scale = 1.0
    for name in ("q_scale", "k_scale"):
        if name in m.consts:
            scale *= float(m.consts[name].reshape(-1)[0])
    if "s_scale" in m.consts:
        c = float(m.consts["s_scale"].reshape(-1)[0])
        scale *= c if m.nodes["s_op"].op_type == "Mul" else 1.0 / c
    return scale


def _ranks_ok(m: Match) -> int | None:
    """Rank 3 ([batch, seq, dim], one head) or 4 ([batch, heads, seq, dim]) for Q, K^T, V."""
    ranks = {v.type.rank if v.type else None for v in (m["q"], m["kt"], m["v"])}
    if len(ranks) != 1 or next(iter(ranks)) not in (3, 4):
        return None
    rank = next(iter(ranks))
    sm = m.nodes["softmax"]
    if sm.attrs.get("axis", -1) % rank != rank - 1:
        return None
    if "mask" in m.values:
        mt, kt = m["mask"].type, m["kt"].type
        if mt is None or mt.rank is None or not 1 <= mt.rank <= (2 if rank == 3 else 4) or not (mt.dtype and mt.dtype.is_float):
            return None  # a 3-D mask over fused batch*heads does not broadcast like Attention's
        if kt.shape is None or mt.shape[-1] != kt.shape[-1]:
            return None  # Attention pads a shorter mask with -inf instead of broadcasting it
    return rank


def _try_attention(graph: Graph, root: Node) -> bool:
    for p in _PATTERNS:
        m = match(p, root.outputs[0], graph)
        if m is None:
            continue
        rank = _ranks_ok(m)
        if rank is None:
            continue
        index = graph.nodes.index(root)
        perm = [0, 2, 1] if rank == 3 else [0, 1, 3, 2]
        k = new_node(graph, index, "Transpose", [m["kt"]], {"perm": perm}, sources=[], name="attention_k")
        inputs: list[Value | None] = [m["q"], k.outputs[0], m["v"]]
        if "mask" in m.values:
            inputs.append(m["mask"])
        attrs = {"scale": _scale(m)}
        if rank == 3:
            attrs.update(q_num_heads=1, kv_num_heads=1)
        attn = new_node(graph, index + 1, "Attention", inputs, attrs, sources=m.sources(), name="attention")
        if root.outputs[0].type is not None:
            attn.outputs[0].type = root.outputs[0].type
        changed = forward(graph, root.outputs[0], attn.outputs[0])
        remove_dead(graph, m.matched)
        return changed
    return False


@register_pass("attention_recognition", 3, "MatMul(Q,K^T)*scale(+mask) -> Softmax -> MatMul(V) -> Attention")
def attention_recognition(graph: Graph) -> bool:
    changed = False
    for node in list(graph.nodes):
        if node.op_type == "MatMul" and not node.domain and is_live(graph, node) and _try_attention(graph, node):
            changed = True
    return changed


_VIEW_OPS = ("Transpose", "Reshape", "Squeeze", "Unsqueeze")


def _scalar_factor(graph: Graph, v: Value) -> tuple[Node, Value, float] | None:
    """A Mul or Div by a positive scalar constant that `v` is read through (past single-reader
    shuffles), as (node, its non-constant operand, factor on its result)."""
    while True:
        p = v.producer
        if p is None or p.domain or p.graph is not graph or len(v.users) != 1 or is_graph_output(graph, v):
            return None
        if p.op_type in _VIEW_OPS:
            v = p.inputs[0]
            continue
        if p.op_type not in ("Mul", "Div"):
            return None
        for i in ((0, 1) if p.op_type == "Mul" else (0,)):
            c = constant_value(graph, p.inputs[1 - i])
            if c is None or c.numel() != 1 or constant_value(graph, p.inputs[i]) is not None:
                continue
            f = float(c.reshape(-1)[0])
            f = f if p.op_type == "Mul" else (1.0 / f if f else 0.0)
            if f > 0 and math.isfinite(f) and (p.outputs[0].type == p.inputs[i].type):
                return p, p.inputs[i], f
        return None


@register_pass("attention_scale_folding", 3, "Attention(Q*a, K*b, V) -> Attention(Q, K, V) with scale*a*b")
def attention_scale_folding(graph: Graph) -> bool:
    changed = False
    for node in list(graph.nodes):
        if node.op_type != "Attention" or node.domain or "scale" not in node.attrs:
            continue
        for k in (0, 1):
            found = _scalar_factor(graph, node.inputs[k])
            if found is None:
                continue
            mul, x, factor = found
            graph.replace_all_uses(mul.outputs[0], x)
            remove_dead(graph, [mul])
            node.attrs["scale"] = float(node.attrs["scale"]) * factor
            node.sources.extend(s for s in mul.sources if s not in node.sources)
            changed = True
    return changed
