"""Horizontal fusion: MatMuls that read the same activation with constant weights become one.

A transformer's Q, K and V projections are three GEMMs of x [M, K] with [K, N] weights, each
with its bias Add. One GEMM against the concatenated [K, 3N] weight does the same work in one
launch on a wider tile grid, and its output splits along the last axis into strided views
(Split), which the head-split Reshape/Transpose and attention read in place.
"""

from __future__ import annotations

import torch

from ..ir import Graph, Node, Value
from .manager import register_pass
from .rewrite import add_constant, constant_value, forward, is_graph_output, new_node, remove_dead, single_user


def _weight(graph: Graph, mm: Node) -> torch.Tensor | None:
    if mm.op_type != "MatMul" or mm.domain or mm.graph is not graph:
        return None
    w = constant_value(graph, mm.inputs[1])
    if w is None or w.dim() != 2 or not w.dtype.is_floating_point:
        return None
    return w


def _bias_add(graph: Graph, mm: Node, n: int) -> tuple[Node, torch.Tensor] | None:
    """The Add that is the MatMul's only reader, with a constant per-column bias of size n."""
    out = mm.outputs[0]
    add = single_user(out)
    if add is None or add.op_type != "Add" or add.domain or is_graph_output(graph, out):
        return None
    other = add.inputs[1] if add.inputs[0] is out else add.inputs[0]
    b = constant_value(graph, other)
    if b is None or b.numel() != n or (b.dim() > 0 and b.shape[-1] != n) or b.dtype != constant_value(graph, mm.inputs[1]).dtype:
        return None
    if add.outputs[0].type is None or add.outputs[0].type.shape != out.type.shape:
        return None  # the bias must not broadcast the result to a bigger shape
    return add, b.reshape(-1)


def _groups(graph: Graph) -> list[list[Node]]:
    """MatMuls sharing their activation input and the K and dtype of their 2-D constant weight."""
    by_input: dict[tuple[int, int, torch.dtype], list[Node]] = {}
    for node in graph.nodes:
        w = _weight(graph, node)
        x = node.inputs[0] if w is not None else None
        if x is None or constant_value(graph, x) is not None or x.type is None or x.type.rank is None or x.type.rank < 2:
            continue
        if node.outputs[0].type is None or node.outputs[0].type.shape is None:
            continue
        by_input.setdefault((id(x), w.shape[0], w.dtype), []).append(node)
    return [g for g in by_input.values() if len(g) > 1]


def _fuse(graph: Graph, group: list[Node]) -> None:
    weights = [constant_value(graph, mm.inputs[1]) for mm in group]
    sizes = [w.shape[1] for w in weights]
    adds = [_bias_add(graph, mm, n) for mm, n in zip(group, sizes)]
    x = group[0].inputs[0]
    first = min(graph.nodes.index(mm) for mm in group)
    sources = [s for mm in group for s in (mm.sources or [mm.name])]
    w_all = add_constant(graph, "fused_matmul_weight", torch.cat(weights, dim=1))
    fused = new_node(graph, first, "MatMul", [x, w_all], sources=sources, name="fused_matmul")
    y, at = fused.outputs[0], first + 1
    if any(a is not None for a in adds):
        bias = torch.cat([a[1] if a is not None else torch.zeros(n, dtype=w.dtype)
                          for a, n, w in zip(adds, sizes, weights)])
        b_all = add_constant(graph, "fused_matmul_bias", bias)
        y = new_node(graph, at, "Add", [y, b_all], sources=[s for a in adds if a for s in a[0].sources],
                     name="fused_matmul_bias").outputs[0]
        at += 1
    split_sizes = add_constant(graph, "fused_matmul_split", torch.tensor(sizes, dtype=torch.int64))
    split = new_node(graph, at, "Split", [y, split_sizes], attrs={"axis": y.type.rank - 1},
                     num_outputs=len(group), name="fused_matmul_split")
    olds: list[Node] = []
    for mm, a, part in zip(group, adds, split.outputs):
        old: Value = a[0].outputs[0] if a is not None else mm.outputs[0]
        part.type = old.type
        forward(graph, old, part)
        olds.extend([mm, a[0]] if a is not None else [mm])
    remove_dead(graph, sorted(olds, key=graph.nodes.index))


@register_pass("matmul_horizontal_fusion", 3,
               "merge MatMuls that read the same input with constant weights (Q/K/V) into one MatMul and a Split")
def matmul_horizontal_fusion(graph: Graph) -> bool:
    groups = _groups(graph)
    for group in groups:
        _fuse(graph, group)
    return bool(groups)
