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

Output binding (optional): a runner marked with `binds_outputs(run, which)` also takes
`run(inputs, out)`, with `out` one entry per output, a tensor or None, sharing no memory with
the inputs. Where `which[i]` and `out[i]` is a tensor of the shape, dtype and layout the runner
would have allocated for output i, it writes output i there and returns that very tensor;
otherwise it allocates as usual. This is how the executor places activations in its arena
(runtime/arena.py): it learns the layouts from a run without `out`, and an `out[i]` that does
not fit costs an allocation, never a wrong result. Binding is per runner, not per tactic: the
same tactic may compile a runner that writes only some outputs (cuDNN allocates a conv output
that leaves the Layer) or none (a Layer whose last nodes run op by op).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any, Callable

import torch

from ..ir import Graph, Layer, Node, Value

Runner = Callable[..., list[torch.Tensor]]  # run(inputs) -> outputs; bound runners also run(inputs, out)


def binds_outputs(run: Runner, which) -> Runner:
    """Mark `run` as taking `out` (see the module docstring); `which[i]`: whether it writes output i there."""
    run.writes_into_out = tuple(bool(w) for w in which)
    return run


def output_binding(run: Runner) -> tuple[bool, ...]:
    """Per output, whether `run` writes it into a given `out` tensor; () for a runner that takes none."""
    return getattr(run, "writes_into_out", ())


def given_output(out: list | None, i: int, shape: tuple[int, ...], dtype: torch.dtype,
                 memory_format: torch.memory_format = torch.contiguous_format) -> torch.Tensor | None:
    """`out[i]` if the caller gave a tensor of this shape and dtype, dense in `memory_format`; else None."""
    t = out[i] if out is not None else None
    if t is None or tuple(t.shape) != tuple(shape) or t.dtype != dtype:
        return None
    return t if t.is_contiguous(memory_format=memory_format) else None


def output_or_empty(out: list | None, i: int, shape: tuple[int, ...], dtype: torch.dtype, device: torch.device,
                    memory_format: torch.memory_format = torch.contiguous_format) -> torch.Tensor:
    """`given_output(...)`, else a new tensor of that layout."""
    t = given_output(out, i, shape, dtype, memory_format)
    if t is None:
        t = torch.empty(shape, dtype=dtype, device=device, memory_format=memory_format)
    return t


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
    # Strict builds (build(strict=True), `--strict`) compute exactly the Layer's ops at its
    # precision: no tactic may swap in an approximation, however far below rounding it stays.
    strict: bool = False

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


def layer_dtype(layer: Layer, graph: Graph, default: torch.dtype) -> torch.dtype:
    """The float precision a Layer computes in: that of its anchor's (else its first node's)
    float outputs. A half build holds float32 Layers where precision overrides keep them so;
    the builder and the loader both ask here, so a loaded engine compiles each Layer as tuned."""
    nodes = ([layer.anchor] if layer.anchor is not None else []) + list(layer.nodes)
    for node in nodes:
        for v in node.outputs:
            dt = v.type.dtype if v.type is not None else None
            if dt is not None and dt.torch in _COMPUTE_DTYPES:
                return dt.torch
    return default


_COMPUTE_DTYPES = (torch.float32, torch.float16, torch.bfloat16, torch.float64)


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
        which = output_binding(runner)
        if not which:
            return lambda inputs: runner([t.contiguous() for t in inputs])
        return binds_outputs(lambda inputs, out=None: runner([t.contiguous() for t in inputs], out), which)

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
