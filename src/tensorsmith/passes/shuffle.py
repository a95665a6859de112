"""Data-movement cleanups: transpose pairs, transposes folded into Gemm, no-op Concat/Slice/Split."""

from __future__ import annotations

from ..ir import Graph, Node
from .manager import register_pass
from .rewrite import constant_value, forward, new_node


def _perm(node: Node) -> list[int] | None:
    p = node.attrs.get("perm")
    if p is None:
        r = node.inputs[0].type.rank if node.inputs[0].type else None
        return None if r is None else list(reversed(range(r)))
    return list(p)


@register_pass("transpose_cancellation", 2, "Transpose(Transpose(x)) -> one Transpose, or x when the perms cancel")
def transpose_cancellation(graph: Graph) -> bool:
    changed = False
    for node in list(graph.nodes):
        if node.op_type != "Transpose" or node.domain or node.graph is not graph:
            continue
        inner = node.inputs[0].producer
        if inner is None or inner.op_type != "Transpose" or inner.domain or inner.graph is not graph:
            continue
        p1, p2 = _perm(inner), _perm(node)
        if p1 is None or p2 is None or len(p1) != len(p2):
            continue
        composed = [p1[i] for i in p2]
        src = inner.inputs[0]
        if composed == list(range(len(composed))):
            changed |= forward(graph, node.outputs[0], src)
        else:
            node.set_input(0, src)
            node.attrs["perm"] = composed
            node.sources.extend(s for s in inner.sources if s not in node.sources)
            changed = True
    return changed


def _is_swap_last2(node: Node | None) -> bool:
    return node is not None and node.op_type == "Transpose" and not node.domain and _perm(node) == [1, 0]


@register_pass("transpose_into_gemm", 2, "Gemm/MatMul of a transposed 2-D operand -> Gemm with transA/transB")
def transpose_into_gemm(graph: Graph) -> bool:
    changed = False
    for node in list(graph.nodes):
        if node.domain or node.graph is not graph:
            continue
        if node.op_type == "Gemm":
            for i, attr in ((0, "transA"), (1, "transB")):
                t = node.inputs[i].producer
                if _is_swap_last2(t) and t.graph is graph:
                    node.set_input(i, t.inputs[0])
                    node.attrs[attr] = 1 - node.attrs.get(attr, 0)
                    node.sources.extend(s for s in t.sources if s not in node.sources)
                    changed = True
        elif node.op_type == "MatMul":
            a, b = node.inputs
            ta, tb = a.producer, b.producer
            if not all(v.type is not None and v.type.rank == 2 for v in (a, b)):
                continue
            swap_a, swap_b = _is_swap_last2(ta), _is_swap_last2(tb)
            if not (swap_a or swap_b) or constant_value(graph, b) is not None and not swap_a:
                continue
            inputs = [ta.inputs[0] if swap_a else a, tb.inputs[0] if swap_b else b]
            sources = list(node.sources) + [s for t, sw in ((ta, swap_a), (tb, swap_b)) if sw for s in t.sources]
            gemm = new_node(graph, graph.nodes.index(node), "Gemm", inputs,
                            {"transA": int(swap_a), "transB": int(swap_b)}, sources=sources, name=node.name)
            graph.replace_all_uses(node.outputs[0], gemm.outputs[0])
            changed = True
    return changed


@register_pass("concat_slice_elimination", 2,
               "Slice of a Concat that selects exactly one of its inputs -> that input; Concat(Split(x)) -> x")
def concat_slice_elimination(graph: Graph) -> bool:
    changed = False
    for node in list(graph.nodes):
        if node.domain or node.graph is not graph:
            continue
        if node.op_type == "Slice" and _slice_of_concat(graph, node):
            changed = True
        elif node.op_type == "Concat" and _concat_of_split(graph, node):
            changed = True
    return changed


def _ints(graph: Graph, node: Node, i: int) -> list[int] | None:
    if i >= len(node.inputs) or node.inputs[i] is None:
        return None
    t = constant_value(graph, node.inputs[i])
    return None if t is None else [int(v) for v in t.reshape(-1).tolist()]


def _slice_of_concat(graph: Graph, node: Node) -> bool:
    cat = node.inputs[0].producer
    if cat is None or cat.op_type != "Concat" or cat.domain or cat.graph is not graph:
        return False
    starts, ends, axes, steps = (_ints(graph, node, i) for i in (1, 2, 3, 4))
    rank = cat.outputs[0].type.rank if cat.outputs[0].type else None
    if starts is None or ends is None or rank is None or len(starts) != 1 or (steps and steps != [1]):
        return False
    axis = (axes[0] if axes else 0) % rank
    if axis != cat.attrs.get("axis", 0) % rank:
        return False
    offset = 0
    for v in cat.inputs:
        size = v.type.shape[axis] if v.type is not None and v.type.shape is not None else None
        if not isinstance(size, int):
            return False
        if starts[0] == offset and ends[0] == offset + size:
            return forward(graph, node.outputs[0], v)
        offset += size
    return False


def _concat_of_split(graph: Graph, node: Node) -> bool:
    split = node.inputs[0].producer if node.inputs and node.inputs[0] is not None else None
    if split is None or split.op_type != "Split" or split.domain or split.graph is not graph:
        return False
    if [v for v in node.inputs] != list(split.outputs):
        return False
    rank = split.inputs[0].type.rank if split.inputs[0].type else None
    if rank is None or split.attrs.get("axis", 0) % rank != node.attrs.get("axis", 0) % rank:
        return False
    return forward(graph, node.outputs[0], split.inputs[0])
