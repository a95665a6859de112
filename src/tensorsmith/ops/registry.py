"""The op registry: per op, its type inference rule and its PyTorch reference.

An op is declared once::

    @register("Relu", infer=same_as(0))
    def relu(ctx, x):
        return torch.relu(x)

The reference takes a RunContext and the input tensors (None for an omitted optional input)
and returns a tensor or a tuple of tensors. It must run on any torch device: create new
tensors on the device of the inputs. The importer turns attributes that later opsets made
inputs into inputs, so a reference sees the newest signature; `ctx.opset` tells the version
for ops whose semantics changed.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable

import torch

from ..errors import ShapeInferenceError, UnsupportedOperatorError
from ..ir import DType, Node, TensorType

Reference = Callable[..., Any]


class _NodeView:
    """What both contexts tell of a node: its attributes, its opset and how many outputs it has."""

    def __init__(self, node: Node):
        self.node = node

    @property
    def opset(self) -> int:
        return self.node.opset

    @property
    def num_outputs(self) -> int:
        return len(self.node.outputs)

    def attr(self, name: str, default: Any = None) -> Any:
        return self.node.attrs.get(name, default)


class InferContext(_NodeView):
    """What an inference rule sees of a node: input types, attributes and known constant inputs."""

    def __init__(self, node: Node, input_types: list[TensorType | None], consts: list[torch.Tensor | None]):
        super().__init__(node)
        self.inputs = input_types
        self._consts = consts

    def const(self, i: int) -> torch.Tensor | None:
        """The value of input i when it is known at build time (initializer or folded constant)."""
        return self._consts[i] if i < len(self._consts) else None

    def input(self, i: int) -> TensorType | None:
        return self.inputs[i] if i < len(self.inputs) else None

    def shape(self, i: int = 0):
        """Shape of input i (None when the input or its rank is unknown)."""
        t = self.input(i)
        return None if t is None else t.shape

    def dtype(self, i: int = 0):
        t = self.input(i)
        return None if t is None else t.dtype

    def fail(self, message: str) -> ShapeInferenceError:
        return ShapeInferenceError(self.node.name, self.node.op_type, message)


class RunContext(_NodeView):
    """What a reference sees of its node while running: attributes, opset, and subgraph execution."""

    def __init__(self, node: Node, run_subgraph: Callable | None = None):
        super().__init__(node)
        self._run_subgraph = run_subgraph

    def run_subgraph(self, graph, inputs: list[torch.Tensor]) -> list[torch.Tensor]:
        """Run a subgraph attribute (If/Loop/Scan body) with the enclosing scope visible."""
        return self._run_subgraph(graph, inputs)


@dataclass
class OpDef:
    name: str
    domain: str
    reference: Reference
    infer: Callable[[InferContext], list[TensorType]] | None
    since: int = 1
    deterministic: bool = True  # False for random ops: never folded at build time


REGISTRY: dict[tuple[str, str], OpDef] = {}

# Nodes that passes create use the newest semantics of their op.
from onnx.defs import onnx_opset_version as _onnx_opset_version  # noqa: E402

LATEST_OPSET = _onnx_opset_version()
_DOMAIN_ALIASES = {"ai.onnx": ""}


def register(
    name: str,
    *,
    infer: Callable[[InferContext], list[TensorType]] | None = None,
    domain: str = "",
    since: int = 1,
    deterministic: bool = True,
    aliases: tuple[str, ...] = (),
):
    """Decorator that registers a reference implementation under `name` (and `aliases`)."""

    def deco(fn: Reference) -> Reference:
        for n in (name, *aliases):
            key = (_DOMAIN_ALIASES.get(domain, domain), n)
            if key in REGISTRY:
                raise RuntimeError(f"op {domain}::{n} registered twice")
            REGISTRY[key] = OpDef(n, key[0], fn, infer, since, deterministic)
        return fn

    return deco


# Inputs whose values the reference reads on the host (shapes, axes, sizes, thresholds), as
# TensorRT's shape tensors: on a GPU they stay on the CPU, so reading them needs no device sync
# (and works inside CUDA graph capture).
_REDUCE = ("ReduceSum", "ReduceMean", "ReduceMax", "ReduceMin", "ReduceProd", "ReduceL1", "ReduceL2",
           "ReduceLogSum", "ReduceLogSumExp", "ReduceSumSquare")
HOST_INPUTS: dict[str, tuple[int, ...]] = {
    "Reshape": (1,), "Expand": (1,), "Tile": (1,), "Split": (1,), "Slice": (1, 2, 3, 4), "Pad": (1, 3),
    "Squeeze": (1,), "Unsqueeze": (1,), "TopK": (1,), "Resize": (1, 2, 3), "Upsample": (1,),
    "Range": (0, 1, 2), "ConstantOfShape": (0,), "OneHot": (1,), "CenterCropPad": (1,), "Trilu": (1,),
    "CumSum": (1,), "CumProd": (1,), "Dropout": (1, 2), "NonMaxSuppression": (2, 3, 4), "DFT": (1, 2),
    "STFT": (1, 3), "HannWindow": (0,), "HammingWindow": (0,), "BlackmanWindow": (0,),
    "MelWeightMatrix": (0, 1, 2, 3, 4), "Loop": (0, 1), "Col2Im": (1, 2), "MaxUnpool": (2,),
    "AffineGrid": (1,), **{op: (1,) for op in _REDUCE},
}


def is_host_input(op_type: str, index: int) -> bool:
    return index in HOST_INPUTS.get(op_type, ())


def lookup(op_type: str, domain: str = "", opset: int = 0, node: str = "") -> OpDef:
    d = _DOMAIN_ALIASES.get(domain, domain)
    op = REGISTRY.get((d, op_type))
    if op is None or (opset and opset < op.since):
        raise UnsupportedOperatorError(op_type, domain, opset, node)
    return op


def is_supported(op_type: str, domain: str = "") -> bool:
    return (_DOMAIN_ALIASES.get(domain, domain), op_type) in REGISTRY


# -- common inference rules ------------------------------------------------------------


def same_as(i: int = 0, dtype: DType | None = None):
    """Every output has the type of input i (optionally with another dtype)."""

    def infer(ctx: InferContext) -> list[TensorType]:
        t = ctx.input(i)
        shape = t.shape if t else None
        dt = dtype if dtype is not None else (t.dtype if t else None)
        return [TensorType(dt, shape)] * ctx.num_outputs

    return infer


def broadcast(dtype: DType | None = None, inputs: slice = slice(None)):
    """One output with the numpy-broadcast shape of the inputs; dtype of input 0 unless given."""
    from ..ir import broadcast_shapes

    def infer(ctx: InferContext) -> list[TensorType]:
        ts = [t for t in ctx.inputs[inputs] if t is not None]
        try:
            shape = broadcast_shapes(*(t.shape for t in ts))
        except ValueError as e:
            raise ctx.fail(str(e)) from None
        dt = dtype if dtype is not None else ts[0].dtype
        return [TensorType(dt, shape)]

    return infer
