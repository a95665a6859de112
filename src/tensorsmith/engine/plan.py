"""A Plan: what the builder hands to the runtime (the graph to run, its I/O and its target)."""

from __future__ import annotations

from dataclasses import dataclass, field

from ..ir import Graph, TensorType


@dataclass(frozen=True)
class IOTensor:
    """One input or output of an engine, as a user binds it."""

    name: str
    type: TensorType

    def __str__(self) -> str:
        return f"{self.name}: {self.type}"


@dataclass
class Plan:
    graph: Graph
    target: str  # "cpu", or "cuda" for the GPU target
    inputs: list[IOTensor] = field(default_factory=list)
    outputs: list[IOTensor] = field(default_factory=list)

    @staticmethod
    def from_graph(graph: Graph, target: str) -> "Plan":
        ins = [IOTensor(v.name, v.type or TensorType(None, None)) for v in graph.inputs]
        outs = [IOTensor(v.name, v.type or TensorType(None, None)) for v in graph.outputs]
        return Plan(graph, target, ins, outs)
