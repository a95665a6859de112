"""Passes that remove work without changing numerics: dead code, no-op nodes, duplicates."""

from __future__ import annotations

import torch

from ..ir import Graph, Node
from .manager import register_pass
from .rewrite import constant_value, forward, is_graph_output


@register_pass("dead_code_elimination", 0, "remove nodes and weights whose results nobody reads")
def dead_code_elimination(graph: Graph) -> bool:
    changed = False
    live = {id(v) for v in graph.outputs}
    for node in reversed(list(graph.nodes)):
        if any(id(v) in live or v.users for v in node.outputs):
            for v in node.inputs:
                if v is not None:
                    live.add(id(v))
            for sub in node.subgraphs():
                changed |= dead_code_elimination(sub)
            continue
        graph.remove_node(node)
        changed = True
    for name in list(graph.initializers):
        v = graph.values.get(name)
        if v is not None and not v.users and not is_graph_output(graph, v):
            del graph.initializers[name]
            del graph.values[name]
            changed = True
    return changed


def _const_ints(graph: Graph, node: Node, i: int) -> list[int] | None:
    t = constant_value(graph, node.inputs[i]) if i < len(node.inputs) else None
    return None if t is None else [int(x) for x in t.reshape(-1).tolist()]


def _is_noop(graph: Graph, node: Node) -> bool:
    op = node.op_type
    x = node.inputs[0] if node.inputs else None
    if x is None or node.domain:
        return False
    in_t, out_t = x.type, node.outputs[0].type
    if op == "Identity":
        return True
    if op == "Dropout":
        # Inference Dropout passes x through, unless training_mode is given and not constant False.
        mode_input = node.inputs[2] if len(node.inputs) > 2 else None
        mode = constant_value(graph, mode_input)
        training = mode_input is not None and (mode is None or bool(mode.item()))
        return not training and (len(node.outputs) < 2 or not node.outputs[1].users)
    if op == "Cast":
        return in_t is not None and out_t is not None and in_t.dtype is not None and in_t.dtype == out_t.dtype
    if op in ("Reshape", "Expand", "Squeeze", "Unsqueeze", "Flatten"):
        return (
            in_t is not None and out_t is not None and in_t.is_static and in_t.shape == out_t.shape
            and (op != "Expand" or in_t.shape == out_t.shape)
        )
    if op == "Transpose":
        perm = node.attrs.get("perm")
        return perm is not None and list(perm) == list(range(len(perm)))
    if op == "Pad":
        pads = _const_ints(graph, node, 1)
        return pads is not None and all(p == 0 for p in pads)
    if op in ("Concat", "Sum", "Max", "Min", "Mean") and len(node.inputs) == 1:
        return True
    if op == "Slice":
        return in_t is not None and out_t is not None and in_t.is_static and in_t.shape == out_t.shape and _slice_is_forward(graph, node)
    if op == "Split" and len(node.outputs) == 1:
        return True
    return False


def _slice_is_forward(graph: Graph, node: Node) -> bool:
    steps = _const_ints(graph, node, 4) if len(node.inputs) > 4 and node.inputs[4] is not None else None
    return steps is None or all(s == 1 for s in steps)


@register_pass("identity_elimination", 0,
               "remove no-op nodes: Identity, inference Dropout, Cast to the same type, Reshape/Expand/"
               "Squeeze/Unsqueeze to the same shape, identity Transpose, zero Pad, full Slice, one-input Concat")
def identity_elimination(graph: Graph) -> bool:
    changed = False
    for node in list(graph.nodes):
        if _is_noop(graph, node) and forward(graph, node.outputs[0], node.inputs[0]):
            changed = True
    return changed


def _attr_key(a):
    if isinstance(a, torch.Tensor):
        return ("tensor", str(a.dtype), tuple(a.shape), tuple(a.reshape(-1).tolist()) if a.numel() <= 64 else id(a))
    if isinstance(a, list):
        return tuple(_attr_key(x) for x in a)
    if isinstance(a, (int, float, str, type(None))):
        return a
    return id(a)  # subgraphs and other objects: equal only to themselves


@register_pass("common_subexpression_elimination", 1,
               "merge nodes that apply the same op with the same attributes to the same inputs")
def common_subexpression_elimination(graph: Graph) -> bool:
    from ..ops import lookup

    seen: dict[tuple, Node] = {}
    changed = False
    for node in list(graph.nodes):
        if any(node.subgraphs()) or not lookup(node.op_type, node.domain).deterministic:
            continue
        key = (
            node.op_type, node.domain, len(node.outputs),
            tuple(id(v) if v is not None else None for v in node.inputs),
            tuple(sorted((k, _attr_key(a)) for k, a in node.attrs.items())),
        )
        first = seen.get(key)
        if first is None:
            seen[key] = node
            continue
        if all(not v.users for v in node.outputs):
            continue  # already merged; only a graph output name keeps it
        for old, new in zip(node.outputs, first.outputs):
            graph.replace_all_uses(old, new)
        first.sources.extend(s for s in node.sources if s not in first.sources)
        changed = True
    return changed
