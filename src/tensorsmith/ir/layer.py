"""Layers: the fused groups of nodes that later stages run as one unit (one kernel on the GPU).

A graph's `layers` partition its nodes; the node list is kept layer by layer, in an order
that is topological for the layers too. Kinds are TensorRT's words for what a layer does.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from .graph import Graph, Node, Value

LAYER_KINDS = (
    "convolution", "matmul", "attention", "normalization", "reduction", "pooling",
    "elementwise", "shuffle", "constant", "other",
)


@dataclass
class Layer:
    name: str
    kind: str
    nodes: list[Node]
    anchor: Node | None = None
    attrs: dict = field(default_factory=dict)  # what later stages attach: tactic, precision...

    @property
    def sources(self) -> list[str]:
        """Names of the source-model nodes this layer computes, in order."""
        out: list[str] = []
        for n in self.nodes:
            out.extend(s for s in n.sources if s not in out)
        return out

    def inputs(self, graph: Graph) -> list[Value]:
        """Activations the layer reads from outside itself (weights excluded)."""
        inside = {id(v) for n in self.nodes for v in n.outputs}
        seen: dict[int, Value] = {}
        for n in self.nodes:
            for v in n.inputs:
                if v is not None and id(v) not in inside and not _is_weight(graph, v):
                    seen.setdefault(id(v), v)
        return list(seen.values())

    def weights(self, graph: Graph) -> list[Value]:
        seen: dict[int, Value] = {}
        for n in self.nodes:
            for v in n.inputs:
                if v is not None and _is_weight(graph, v):
                    seen.setdefault(id(v), v)
        return list(seen.values())

    def outputs(self, graph: Graph) -> list[Value]:
        """Values the layer produces that something outside it reads (or the graph returns)."""
        members = {id(n) for n in self.nodes}
        graph_outs = {id(v) for v in graph.outputs}
        return [
            v for n in self.nodes for v in n.outputs
            if id(v) in graph_outs or any(id(u) not in members for u, _ in v.users)
        ]


def _is_weight(graph: Graph, v: Value) -> bool:
    g: Graph | None = graph
    while g is not None:
        if g.values.get(v.name) is v:
            return v.name in g.initializers
        g = g.parent
    return False
