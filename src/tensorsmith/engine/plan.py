"""A Plan: what the builder hands to the runtime (the graph, its I/O, target and per-Layer tactics)."""

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
class LayerPlan:
    """The tactic chosen for one Layer, and the values it reads and writes (activations)."""

    name: str
    tactic: str
    config: dict
    inputs: list[str]
    outputs: list[str]
    ms: float | None = None  # tuned time, when it was timed


@dataclass
class Plan:
    graph: Graph
    target: str  # "cpu", or "cuda" for the GPU target
    inputs: list[IOTensor] = field(default_factory=list)
    outputs: list[IOTensor] = field(default_factory=list)
    layers: list[LayerPlan] = field(default_factory=list)  # empty on the CPU target (op by op)
    precision: str = "fp32"
    memory: dict = field(default_factory=dict)  # MemoryPlan.summary() of a plan of Layers
    strict: bool = False  # build(strict=True): no approximate tactics, every override must match
    layer_precisions: dict[str, str] = field(default_factory=dict)  # per-Layer overrides, {pattern: "fp16"...}

    @staticmethod
    def from_graph(graph: Graph, target: str, precision: str = "fp32", strict: bool = False,
                   layer_precisions: dict[str, str] | None = None) -> "Plan":
        ins = [IOTensor(v.name, v.type or TensorType(None, None)) for v in graph.inputs]
        outs = [IOTensor(v.name, v.type or TensorType(None, None)) for v in graph.outputs]
        return Plan(graph, target, ins, outs, precision=precision, strict=strict,
                    layer_precisions=dict(layer_precisions or {}))
