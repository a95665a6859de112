"""Tactics: the ways to run one Layer.

A Tactic looks at a Layer (through a LayerContext: its nodes, concrete shapes, weights, device
and precision), says whether it applies, lists the configs it can be tuned over (JSON-able
dicts: tile sizes, warps, stages...), and compiles a config into a Runner. The tuner times the
runners on the real shapes, checks each against the reference, and keeps the fastest; the
engine stores only the tactic's name and config, from which loading compiles it again.

Runner calling convention: `runner(inputs) -> outputs`, where `inputs` are the Layer's
activation inputs in `LayerContext.inputs` order and outputs are in `LayerContext.outputs`
order. Weights are bound at compile time. A runner must not synchronize with the host and
must not allocate anything but its outputs (it runs inside CUDA graph capture).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any, Callable

import torch

from ..ir import Graph, Layer, Node, Value

Runner = Callable[[list[torch.Tensor]], list[torch.Tensor]]


@dataclass
class LayerContext:
    """Everything a tactic may look at to decide and compile, for one Layer at concrete shapes."""

    layer: Layer
    graph: Graph
    weights: dict[str, torch.Tensor]  # by value name, on `device`, already in the layer's precision
    device: torch.device
    dtype: torch.dtype  # compute precision of the layer's float tensors
    inputs: list[Value] = field(default_factory=list)
    outputs: list[Value] = field(default_factory=list)
    # The layout of 4-D activations across the engine: half-precision builds run convolutions
    # channels-last end to end, so a kernel that reads NCHW would pay a conversion each side.
    activation_layout: str = "contiguous"

    def __post_init__(self):
        if not self.inputs:
            self.inputs = self.layer.inputs(self.graph)
        if not self.outputs:
            self.outputs = self.layer.outputs(self.graph)

    @property
    def nodes(self) -> list[Node]:
        return self.layer.nodes

    @property
    def anchor(self) -> Node | None:
        return self.layer.anchor

    def shape(self, v: Value) -> tuple[int, ...]:
        """The concrete shape of a value (the builder makes every shape static before tuning)."""
        s = v.type.shape if v.type is not None else None
        if s is None or not all(isinstance(d, int) for d in s):
            raise ValueError(f"value '{v.name}' has no static shape ({v.type}); build with concrete input shapes")
        return tuple(s)

    def is_weight(self, v: Value | None) -> bool:
        return v is not None and v.name in self.weights

    def weight(self, v: Value) -> torch.Tensor:
        return self.weights[v.name]

    def numel(self, v: Value) -> int:
        return math.prod(self.shape(v))


def activation_layout_for(graph: Graph, dtype: torch.dtype) -> str:
    """The layout of 4-D activations in an engine: half-precision builds with convolutions run
    channels-last end to end (tensor-core convs want NHWC). The builder and the loader both ask
    here, so a loaded engine compiles each Layer in the layout it was tuned in."""
    if dtype in (torch.float16, torch.bfloat16) and any(n.op_type == "Conv" for n in graph.nodes):
        return "channels_last"
    return "contiguous"


class Tactic:
    """Base class. Subclasses set `name` and override `applies` and `compile` (and `configs`).

    Activations may arrive in any layout (half-precision convolutions hand over channels-last
    tensors); a tactic whose kernels index memory as contiguous leaves `accepts_strided` False
    and `build` hands it contiguous inputs.
    """

    name: str = "?"
    accepts_strided: bool = False

    def applies(self, lc: LayerContext) -> bool:
        raise NotImplementedError

    def configs(self, lc: LayerContext) -> list[dict[str, Any]]:
        return [{}]

    def compile(self, lc: LayerContext, config: dict[str, Any]) -> Runner:
        raise NotImplementedError

    def build(self, lc: LayerContext, config: dict[str, Any]) -> Runner:
        """`compile`, with inputs made contiguous first unless the tactic accepts any strides."""
        runner = self.compile(lc, config)
        if self.accepts_strided:
            return runner
        return lambda inputs: runner([t.contiguous() for t in inputs])

    def workspace_bytes(self, lc: LayerContext, config: dict[str, Any]) -> int:
        """Scratch memory the runner needs besides its outputs (the workspace limit excludes it)."""
        return 0

    def __repr__(self) -> str:
        return f"<Tactic {self.name}>"


TACTICS: dict[str, Tactic] = {}


def register_tactic(tactic: Tactic) -> Tactic:
    if tactic.name in TACTICS:
        raise RuntimeError(f"tactic '{tactic.name}' registered twice")
    TACTICS[tactic.name] = tactic
    return tactic


def get_tactic(name: str) -> Tactic:
    try:
        return TACTICS[name]
    except KeyError:
        from ..errors import TensorsmithError

        raise TensorsmithError(f"unknown tactic '{name}'; this tensorsmith has: {sorted(TACTICS)}") from None
