"""Small graph-editing helpers the passes share: typed node creation, constants, removal."""

from __future__ import annotations

from typing import Any

import torch

from ..ir import Graph, Node, Value
from ..ops.inference import infer_node
from ..ops.registry import LATEST_OPSET


def constant_value(graph: Graph, v: Value | None) -> torch.Tensor | None:
    """The tensor of `v` if it is an initializer of this graph (or an enclosing one)."""
    g = graph
    while v is not None and g is not None:
        if g.values.get(v.name) is v and v.name in g.initializers:
            return g.initializers[v.name]
        g = g.parent
    return None


def is_constant(graph: Graph, v: Value | None) -> bool:
    return constant_value(graph, v) is not None


def new_node(
    graph: Graph,
    index: int,
    op_type: str,
    inputs: list[Value | None],
    attrs: dict[str, Any] | None = None,
    sources: list[str] | None = None,
    num_outputs: int = 1,
    domain: str = "",
    name: str | None = None,
) -> Node:
    """Insert a node at `index` with fresh, type-inferred outputs."""
    name = graph.fresh_name(name or op_type.lower())
    outs = [Value(graph.fresh_name(f"{name}_out{i}")) for i in range(num_outputs)]
    # A node a pass creates has the newest semantics of its op, whatever the model's opset.
    opset = LATEST_OPSET if domain == "" else graph.opset_imports.get(domain, 1)
    node = Node(op_type, inputs, outs, attrs, name=name, domain=domain, opset=opset)
    node.sources = list(sources) if sources is not None else []
    graph.insert(index, node)
    infer_types(graph, node)
    return node


def infer_types(graph: Graph, node: Node) -> None:
    types = [v.type if v is not None else None for v in node.inputs]
    consts = [constant_value(graph, v) for v in node.inputs]
    for v, t in zip(node.outputs, infer_node(node, types, consts)):
        v.type = t


def add_constant(graph: Graph, hint: str, tensor: torch.Tensor) -> Value:
    return graph.add_initializer(graph.fresh_name(hint), tensor.detach().contiguous())


def replace_with_constant(graph: Graph, v: Value, tensor: torch.Tensor) -> None:
    """Make `v` a weight: its readers (and the graph output of its name) read the tensor."""
    c = graph.add_initializer(graph.fresh_name(v.name + "_const"), tensor.detach().contiguous())
    graph.replace_all_uses(v, c)
    if any(o is v for o in graph.outputs):
        # An output keeps its name: give the constant the output's name.
        producer = v.producer
        name = v.name
        graph.values.pop(c.name)
        t = graph.initializers.pop(c.name)
        v.name = graph.fresh_name(name + "_folded")
        if producer is not None:
            graph.values[v.name] = v
        graph.values.pop(name, None)
        c.name = name
        graph.values[name] = c
        graph.initializers[name] = t
        graph.outputs = [c if o is v else o for o in graph.outputs]


def source_names(nodes: list[Node]) -> list[str]:
    """The model node names behind `nodes` (their sources, or their own names), first seen first."""
    names: list[str] = []
    for n in nodes:
        names.extend(s for s in (n.sources or [n.name]) if s not in names)
    return names


def single_user(v: Value) -> Node | None:
    """The one node reading `v` (None if zero or several readers)."""
    return v.users[0][0] if len(v.users) == 1 else None


def is_graph_output(graph: Graph, v: Value) -> bool:
    return any(o is v for o in graph.outputs)


def forward(graph: Graph, old: Value, new: Value) -> bool:
    """Readers of `old` read `new` instead; True if anything changed.

    A graph output keeps its name: if it cannot move to `new` (an input or weight, say), its
    producer becomes `Identity(new)`, a copy instead of whatever it computed."""
    if old is new or (not old.users and not is_graph_output(graph, old)):
        return False  # nothing reads it: dead code, for dead_code_elimination
    had_users = bool(old.users)
    graph.replace_all_uses(old, new)
    node = old.producer
    if is_graph_output(graph, old) and node is not None and node.op_type != "Identity":
        if any(v.users or is_graph_output(graph, v) for v in node.outputs if v is not old):
            return had_users
        for i in range(len(node.inputs)):
            node.set_input(i, None)
        node.inputs = [None]
        node.set_input(0, new)
        node.op_type, node.domain, node.attrs = "Identity", "", {}
        node.outputs = [old]
        old.index = 0
        return True
    return had_users or not is_graph_output(graph, old)


def remove_dead(graph: Graph, nodes: list[Node]) -> None:
    """Remove those of `nodes` (last first) whose results nobody reads any more."""
    for node in reversed(nodes):
        if node in graph.nodes and not any(v.users or is_graph_output(graph, v) for v in node.outputs):
            graph.remove_node(node)
