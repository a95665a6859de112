"""The elementwise tail of a convolution Layer (the nodes after its Conv) as ONE generated kernel.

cuDNN runs the Conv (torch_ops.CudnnConvTactic, config fuse="triton") without its bias: the
bias is the tail kernel's first Add. cuDNN adds a bias to a channels-last output with a separate
broadcast kernel for most of its algorithms (35 of them per MobileNetV3 call at batch 1), while
in the tail it is one more per-channel load. What follows it — HardSwish, Sigmoid, x*sigmoid(x), a residual Add (+Relu), per-channel scales,
the casts of a half-precision graph — then costs one pass over the conv's output, one load and
one store per element with the math in float32, instead of several PyTorch kernels per op.

The kernel is elementwise.py's, with the conv output as its first input. When the conv output
is channels-last (half-precision builds) it runs in NHWC order and writes channels-last
outputs; a residual is read in the conv output's layout (copied only if it arrives otherwise).
Operands besides the conv output are limited to what convolution tails hold: tensors of the
output's shape, scalars, and per-channel constants ([C,1,1] or [1,C,1,1]).
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable
from typing import Any

import torch

from ...ir import Node, TensorType, Value
from ..base import LayerContext, binds_outputs
from .elementwise import Unsupported, default_config, make_runner, plan_kernel
from .tiles import on_triton_device

# run(y, inputs, out=None): see ConvTail.runner; `out` as a Runner's (tactics/base.py), one entry
# per Layer output; the kernel writes all but `y` (marked with binds_outputs).
TailRunner = Callable[..., list[torch.Tensor]]


def _fits(shape: tuple[int, ...], out: tuple[int, ...]) -> bool:
    """A tail operand of the output's shape, a scalar, or one value per output channel."""
    if math.prod(shape) == 1:
        return True
    if len(shape) > len(out):
        return False
    p = (1,) * (len(out) - len(shape)) + tuple(shape)
    return p == out or p == (1, out[1]) + (1,) * (len(out) - 2)


def _tail_runner(tail, head: Value, config: dict[str, Any]) -> TailRunner:
    """The runner of a planned tail (ConvTail or MatmulTail): its kernel reads the head op's
    output `y` and the Layer inputs at `tail.picks`; `head` itself may be a Layer output too."""
    launch = make_runner(tail.lc, tail.nodes, tail.activations, tail.outs, config)
    picks = tail.picks
    layer_outs = [v is head for v in tail.lc.outputs]
    kernel_outs = [i for i, is_head in enumerate(layer_outs) if not is_head]

    def run(y: torch.Tensor, inputs: list[torch.Tensor], out: list | None = None) -> list[torch.Tensor]:
        given = None if out is None else [out[i] for i in kernel_outs]
        results = iter(launch([y] + [inputs[i] for i in picks], given))
        return [y if is_head else next(results) for is_head in layer_outs]

    return binds_outputs(run, [not is_head for is_head in layer_outs])


def _layer_inputs_read(lc: LayerContext, nodes: list[Node]) -> tuple[list[Value], list[int]]:
    """The Layer inputs that `nodes` read, and their positions in the runner's inputs."""
    read = {v.name for n in nodes for v in n.inputs if v is not None}
    names = [x.name for x in lc.inputs]
    others = [v for v in lc.inputs if v.name in read]
    return others, [names.index(v.name) for v in others]


def _bias(lc: LayerContext, conv: Node) -> Value | None:
    b = conv.inputs[2] if len(conv.inputs) > 2 else None
    return b if b is not None and lc.is_weight(b) else None


def _bias_add(lc: LayerContext, conv_out: Value, bias: Value) -> tuple[LayerContext, Value, Node]:
    """A detached `Add(raw, bias[C,1,1])` whose output carries conv_out's name (the kernel's code
    refers to values by name, so the tail reads the biased value); the Layer context gains the
    reshaped bias. Fresh Values only: the graph's own Values and Nodes are left untouched."""
    shape = lc.shape(conv_out)
    dtype = conv_out.type.dtype
    raw = Value(conv_out.name + "__unbiased", TensorType(dtype, shape))
    b = Value(bias.name + "__per_channel", TensorType(dtype, (shape[1], 1, 1)))
    out = Value(conv_out.name, TensorType(dtype, shape))
    add = Node("Add", [raw, b], [out], name=conv_out.name + "__bias_add")
    weights = {**lc.weights, b.name: lc.weight(bias).reshape(shape[1], 1, 1)}
    return dataclasses.replace(lc, weights=weights), raw, add


class ConvTail:
    """The nodes after the Layer's Conv, as one kernel over the conv output; raises Unsupported
    (or ValueError) for a Layer whose tail it cannot compute."""

    def __init__(self, lc: LayerContext):
        conv = lc.anchor
        if conv is None or conv.op_type != "Conv" or not lc.nodes or lc.nodes[0] is not conv:
            raise Unsupported("the Layer does not start with its Conv")
        self.lc, self.nodes = lc, lc.nodes[1:]
        if not self.nodes:
            raise Unsupported("nothing after the Conv")
        self.conv_out = conv.outputs[0]
        shape = lc.shape(self.conv_out)
        if len(shape) != 4:
            raise Unsupported("not a 2-D convolution")
        others, self.picks = _layer_inputs_read(lc, self.nodes)
        weights = {v.name: v for n in self.nodes for v in n.inputs if v is not None and lc.is_weight(v)}
        for v in others + list(weights.values()):
            if not _fits(lc.shape(v), shape):
                raise Unsupported(f"operand {v.name} {lc.shape(v)} of the conv tail is not full, scalar or per-channel")
        # The conv output itself may leave the Layer too; the kernel stores the rest.
        self.outs = [v for v in lc.outputs if v is not self.conv_out]
        if not self.outs or any(lc.shape(v) != shape for v in self.outs):
            raise Unsupported("a tail output does not have the conv output's shape")
        first = self.conv_out
        self.bias = _bias(lc, conv)
        if self.bias is not None and not any(v is self.conv_out for v in lc.outputs):
            self.lc, first, add = _bias_add(lc, self.conv_out, self.bias)
            self.nodes = [add] + self.nodes
        else:
            self.bias = None  # the conv output leaves the Layer as it is: cuDNN adds the bias
        self.activations = [first] + others
        plan_kernel(self.lc, self.nodes, self.activations, self.outs)  # every node has a Triton expression

    def config(self, channels_last: bool) -> dict[str, Any]:
        """The kernel config for a conv output in this layout (one: the conv dominates the time)."""
        return {**default_config(self.lc.numel(self.conv_out)), "channels_last": channels_last}

    def runner(self, config: dict[str, Any]) -> TailRunner:
        """`run(y, inputs, out=None)`: the Layer's outputs from the conv output `y` and the Layer's inputs."""
        return _tail_runner(self, self.conv_out, config)


class MatmulTail:
    """The nodes after a GEMM and its bias (an erf GELU, a residual Add, casts) as one kernel over
    the GEMM's output, for torch_ops.CublasLinearTactic: cuBLASLt fuses only bias, ReLU and tanh
    GELU, and run op by op ViT-B/16's erf GELU cost five kernels over [6304, 3072] at batch 32.

    The GEMM output is contiguous; other operands broadcast as elementwise.py handles them."""

    def __init__(self, lc: LayerContext, first: Value, consumed: int):
        self.lc, self.first = lc, first
        self.nodes = lc.nodes[consumed:]
        if not self.nodes:
            raise Unsupported("nothing after the GEMM")
        others, self.picks = _layer_inputs_read(lc, self.nodes)
        self.outs = [v for v in lc.outputs if v is not first]
        if not self.outs:
            raise Unsupported("the tail computes no Layer output")
        self.activations = [first] + others
        plan_kernel(lc, self.nodes, self.activations, self.outs)  # every node has a Triton expression

    def config(self) -> dict[str, Any]:
        return default_config(self.lc.numel(self.first))

    def runner(self, config: dict[str, Any]) -> TailRunner:
        """`run(y, inputs, out=None)`: the Layer's outputs from the GEMM output `y` and the Layer's inputs."""
        return _tail_runner(self, self.first, config)


def matmul_tail(lc: LayerContext, first: Value, consumed: int) -> MatmulTail | None:
    if not on_triton_device(lc):
        return None
    try:
        return MatmulTail(lc, first, consumed)
    except (Unsupported, ValueError):
        return None


def conv_tail(lc: LayerContext) -> ConvTail | None:
    """The Layer's tail as one kernel, or None where that kernel does not apply (or no Triton
    device: CUDA, or the CPU under the interpreter)."""
    if not on_triton_device(lc):
        return None
    try:
        return ConvTail(lc)
    except (Unsupported, ValueError):
        return None


__all__ = ["ConvTail", "MatmulTail", "TailRunner", "conv_tail", "matmul_tail"]
