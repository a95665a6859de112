"""Constant folding: nodes whose inputs are all weights become weights; static shapes become constants."""

from __future__ import annotations

import math

import torch

from ..ir import Graph, Node
from ..ops import RunContext, lookup
from ..ops.inference import infer_graph
from .manager import register_pass
from .rewrite import constant_value, replace_with_constant

# A folded weight larger than this stays a computation (ConstantOfShape can make any size).
MAX_FOLDED_ELEMENTS = 1 << 24


def _numel_ok(node: Node) -> bool:
    for v in node.outputs:
        t = v.type
        if t is None or not t.is_static or math.prod(t.shape) > MAX_FOLDED_ELEMENTS:
            return False
    return True


def _fold(graph: Graph, node: Node, values: list[torch.Tensor]) -> None:
    for v, t in zip(node.outputs, values):
        if v.users or any(o is v for o in graph.outputs):
            replace_with_constant(graph, v, t)
    graph.remove_node(node)


@register_pass("constant_folding", 1, "evaluate nodes whose inputs are all constants and store the results as weights")
def constant_folding(graph: Graph) -> bool:
    changed = False
    for node in list(graph.nodes):
        if any(node.subgraphs()) or not _numel_ok(node):
            continue
        op = lookup(node.op_type, node.domain)
        if not op.deterministic:
            continue
        args = [constant_value(graph, v) if v is not None else None for v in node.inputs]
        if any(a is None and v is not None for a, v in zip(args, node.inputs)):
            continue
        try:
            with torch.inference_mode(False), torch.no_grad():
                res = op.reference(RunContext(node), *args)
        except Exception:
            continue  # leave it to run time, where the error names the node
        res = list(res) if isinstance(res, (tuple, list)) else [res]
        if len(res) < len(node.outputs):
            continue
        _fold(graph, node, res[: len(node.outputs)])
        changed = True
    return changed


def _static_dims(node: Node) -> list[int] | None:
    x = node.inputs[0]
    if x is None or x.type is None or x.type.shape is None:
        return None
    return list(x.type.shape)


@register_pass("shape_folding", 1, "replace Shape/Size of statically known dims (and Gathers of them) by constants")
def shape_folding(graph: Graph) -> bool:
    changed = False
    for node in list(graph.nodes):
        if node.domain:
            continue
        dims = _static_dims(node) if node.op_type in ("Shape", "Size") else None
        if dims is None:
            if node.op_type == "Gather" and _fold_gather_of_shape(graph, node):
                changed = True
            continue
        if node.op_type == "Shape":
            r = len(dims)
            start, end = node.attrs.get("start", 0), node.attrs.get("end", r)
            start, end = (max(0, min(r, s + r if s < 0 else s)) for s in (start, end))
            dims = dims[start:end]
        if not all(isinstance(d, int) for d in dims):
            continue
        value = torch.tensor(dims if node.op_type == "Shape" else math.prod(dims), dtype=torch.int64)
        _fold(graph, node, [value])
        changed = True
    return changed


def _fold_gather_of_shape(graph: Graph, node: Node) -> bool:
    """Gather(Shape(x), i) with x.shape[i] static, even when other dims of x are symbolic."""
    src = node.inputs[0]
    shape_node = src.producer if src is not None else None
    idx = constant_value(graph, node.inputs[1]) if len(node.inputs) > 1 else None
    if shape_node is None or shape_node.op_type != "Shape" or idx is None or shape_node.attrs.get("start", 0) != 0:
        return False
    dims = _static_dims(shape_node)
    if dims is None:
        return False
    indices = [int(i) for i in idx.reshape(-1).tolist()]
    if not all(-len(dims) <= i < len(dims) for i in indices):
        return False
    picked = [dims[i] for i in indices]
    if not all(isinstance(d, int) for d in picked):
        return False
    _fold(graph, node, [torch.tensor(picked, dtype=torch.int64).reshape(idx.shape)])
    return True


@register_pass("shape_inference", 1, "infer types again after folding, so later passes see the now-static shapes",
               fixed_point=False)
def shape_inference(graph: Graph) -> bool:
    before = [v.type for n in graph.nodes for v in n.outputs]
    infer_graph(graph)
    return before != [v.type for n in graph.nodes for v in n.outputs]
