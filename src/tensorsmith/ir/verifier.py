"""Checks the IR invariants: single assignment, topological order, defined inputs, links, types."""

from __future__ import annotations

from typing import Callable

from ..errors import InvalidGraphError
from .graph import Graph, Node


def verify(graph: Graph, check_node: Callable[[Node], None] | None = None, _outer: frozenset = frozenset()) -> None:
    """Raise InvalidGraphError at the first broken invariant.

    `check_node` is called on each node after its inputs are known to be defined; the op
    registry passes one that re-infers the node's types and compares them.
    """
    defined: set[str] = set(_outer)
    ids: dict[str, int] = {}

    def define(v, where: str) -> None:
        if v.name in defined and v.name not in _outer:
            raise InvalidGraphError(f"value '{v.name}' is assigned twice ({where})", fix="give every value a unique name")
        defined.add(v.name)
        ids[v.name] = id(v)

    for v in graph.inputs:
        define(v, "graph input")
    for name in graph.initializers:
        if name not in graph.values:
            raise InvalidGraphError(f"initializer '{name}' has no value", fix="create it with Graph.add_initializer")
        if name not in {v.name for v in graph.inputs}:
            define(graph.values[name], "initializer")
    for node in graph.nodes:
        if node.graph is not graph:
            raise InvalidGraphError("node is not owned by this graph", node=node.name)
        for i, v in enumerate(node.inputs):
            if v is None:
                continue
            if v.name not in defined:
                later = any(v is o for n in graph.nodes for o in n.outputs)
                what = "is used before it is produced (nodes not in topological order)" if later else "is not defined"
                raise InvalidGraphError(
                    f"input {i} '{v.name}' {what}", node=node.name,
                    fix="define it as a graph input, an initializer or the output of an earlier node",
                )
            if (node, i) not in v.users:
                raise InvalidGraphError(f"input {i} '{v.name}' does not list the node as a user", node=node.name)
        for sub in node.subgraphs():
            verify(sub, check_node, frozenset(defined))
        if check_node is not None:
            check_node(node)
        for i, v in enumerate(node.outputs):
            if v.producer is not node or v.index != i:
                raise InvalidGraphError(f"output {i} '{v.name}' does not name the node as its producer", node=node.name)
            define(v, f"output {i} of node '{node.name}'")
    for v in graph.outputs:
        if v.name not in defined:
            raise InvalidGraphError(
                f"graph output '{v.name}' is not produced by any node, input or initializer",
                fix="remove the output or add the node that computes it",
            )
