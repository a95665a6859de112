"""Random ONNX graphs that compose the patterns the passes look for, for equivalence tests.

A graph is a chain of blocks applied to a running value (plus side branches that read
earlier values), in one of two families: "cnn" on [N,C,H,W] and "seq" on [B,S,D]. Every
block is numerically tame (no exp of large values, no division by values near zero).
"""

from __future__ import annotations

import math

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper


class Builder:
    def __init__(self, rng: np.random.Generator, opset: int = 17):
        self.rng, self.opset = rng, opset
        self.nodes: list[onnx.NodeProto] = []
        self.inits: list[onnx.TensorProto] = []
        self.n = 0

    def name(self, hint: str) -> str:
        self.n += 1
        return f"{hint}{self.n}"

    def const(self, arr, hint: str = "c") -> str:
        name = self.name(hint)
        self.inits.append(numpy_helper.from_array(np.asarray(arr), name))
        return name

    def rand(self, shape, scale: float = 0.5, hint: str = "w") -> str:
        return self.const((self.rng.standard_normal(shape) * scale).astype(np.float32), hint)

    def op(self, op_type: str, inputs: list[str], outputs: int = 1, **attrs) -> str | list[str]:
        outs = [self.name(op_type.lower()) for _ in range(outputs)]
        self.nodes.append(helper.make_node(op_type, inputs, outs, name=self.name(op_type + "_"), **attrs))
        return outs[0] if outputs == 1 else outs

    def model(self, inputs: list[tuple[str, list]], output: str) -> onnx.ModelProto:
        g = helper.make_graph(
            self.nodes, "random",
            [helper.make_tensor_value_info(n, TensorProto.FLOAT, s) for n, s in inputs],
            [helper.make_tensor_value_info(output, TensorProto.FLOAT, None)],
            initializer=self.inits,
        )
        return helper.make_model(g, opset_imports=[helper.make_opsetid("", self.opset)])


# -- CNN blocks on [N, C, H, W] (C fixed) --------------------------------------------------------

C = 6


def conv_bn(b: Builder, x: str) -> str:
    y = b.op("Conv", [x, b.rand((C, C, 3, 3), 0.2), b.rand((C,), 0.1)], pads=[1, 1, 1, 1])
    return b.op("BatchNormalization", [y, b.const(b.rng.uniform(0.5, 1.5, C).astype(np.float32)),
                                       b.rand((C,), 0.1), b.rand((C,), 0.1),
                                       b.const(b.rng.uniform(0.5, 1.5, C).astype(np.float32))], epsilon=1e-5)


def conv_scale_shift(b: Builder, x: str) -> str:
    y = b.op("Conv", [x, b.rand((C, C, 1, 1), 0.3)])
    y = b.op("Mul", [y, b.rand((1, C, 1, 1), 0.5)])
    return b.op("Add", [b.rand((C, 1, 1), 0.5), y])


def relu(b: Builder, x: str) -> str:
    return b.op("Relu", [x])


def residual(b: Builder, x: str) -> str:
    y = b.op("Conv", [x, b.rand((C, C, 3, 3), 0.2)], pads=[1, 1, 1, 1])
    return b.op("Relu", [b.op("Add", [y, x])])


def downsample_residual(b: Builder, x: str) -> str:
    """A ResNet block's end after BatchNorm folding: two biased Convs meet in the residual Add."""
    y = b.op("Conv", [x, b.rand((C, C, 3, 3), 0.2), b.rand((C,), 0.3)], pads=[1, 1, 1, 1])
    shortcut = b.op("Conv", [x, b.rand((C, C, 1, 1), 0.3), b.rand((C,), 0.3)])
    return b.op("Relu", [b.op("Add", [y, shortcut])])


def noops(b: Builder, x: str) -> str:
    x = b.op("Identity", [x])
    x = b.op("Dropout", [x])
    x = b.op("Cast", [x], to=TensorProto.FLOAT)
    x = b.op("Transpose", [x], perm=[0, 1, 2, 3])
    return b.op("Pad", [x, b.const(np.zeros(8, np.int64))])


def transpose_pair(b: Builder, x: str) -> str:
    t = b.op("Transpose", [x], perm=[0, 2, 3, 1])
    t = b.op("Sigmoid", [t]) if b.rng.random() < 0.5 else t
    return b.op("Transpose", [t], perm=[0, 3, 1, 2])


def concat_slice(b: Builder, x: str) -> str:
    y = b.op("Tanh", [x])
    cat = b.op("Concat", [x, y], axis=1)
    return b.op("Slice", [cat, b.const(np.array([C], np.int64)), b.const(np.array([2 * C], np.int64)),
                          b.const(np.array([1], np.int64))])


def shape_chain(b: Builder, x: str) -> str:
    s = b.op("Shape", [x])
    n = b.op("Gather", [s, b.const(np.array([0], np.int64))], axis=0)
    shape = b.op("Concat", [n, b.const(np.array([C, -1], np.int64))], axis=0)
    flat = b.op("Reshape", [x, shape])
    back = b.op("Reshape", [flat, b.op("Shape", [x])])
    return b.op("Neg", [back])


def duplicate_branches(b: Builder, x: str) -> str:
    w = b.rand((1, C, 1, 1), 0.5)
    return b.op("Add", [b.op("Mul", [x, w]), b.op("Mul", [x, w])])


def silu(b: Builder, x: str) -> str:
    return b.op("Mul", [x, b.op("Sigmoid", [x])])


CNN_BLOCKS = [conv_bn, conv_scale_shift, relu, residual, noops, transpose_pair, concat_slice, shape_chain,
              duplicate_branches, silu, downsample_residual]


# -- sequence blocks on [B, S, D] -------------------------------------------------------------

D, H = 8, 2


def linear(b: Builder, x: str, d_out: int = D) -> str:
    return b.op("Add", [b.op("MatMul", [x, b.rand((D, d_out), 0.3)]), b.rand((d_out,), 0.1)])


def gelu_erf(b: Builder, x: str) -> str:
    e = b.op("Erf", [b.op("Div", [x, b.const(np.array(math.sqrt(2), np.float32))])])
    return b.op("Mul", [b.op("Mul", [x, b.op("Add", [e, b.const(np.array(1.0, np.float32))])]),
                        b.const(np.array(0.5, np.float32))])


def gelu_tanh(b: Builder, x: str) -> str:
    cube = b.op("Pow", [x, b.const(np.array(3.0, np.float32))])
    inner = b.op("Add", [x, b.op("Mul", [b.const(np.array(0.044715, np.float32)), cube])])
    t = b.op("Tanh", [b.op("Mul", [b.const(np.array(math.sqrt(2 / math.pi), np.float32)), inner])])
    return b.op("Mul", [b.op("Mul", [x, b.const(np.array(0.5, np.float32))]),
                        b.op("Add", [t, b.const(np.array(1.0, np.float32))])])


def layernorm(b: Builder, x: str) -> str:
    axes = b.const(np.array([-1], np.int64))
    mean = b.op("ReduceMean", [x, axes])
    d = b.op("Sub", [x, mean])
    var = b.op("ReduceMean", [b.op("Pow", [d, b.const(np.array(2.0, np.float32))]), axes])
    std = b.op("Sqrt", [b.op("Add", [var, b.const(np.array(1e-5, np.float32))])])
    n = b.op("Div", [d, std])
    return b.op("Add", [b.op("Mul", [n, b.rand((D,), 0.5)]), b.rand((D,), 0.1)])


def rmsnorm(b: Builder, x: str) -> str:
    ms = b.op("ReduceMean", [b.op("Mul", [x, x]), b.const(np.array([-1], np.int64))])
    r = b.op("Reciprocal", [b.op("Sqrt", [b.op("Add", [ms, b.const(np.array(1e-6, np.float32))])])])
    return b.op("Mul", [b.op("Mul", [x, r]), b.rand((D,), 0.5)])


def softmax(b: Builder, x: str) -> str:
    axes = b.const(np.array([-1], np.int64))
    e = b.op("Exp", [b.op("Sub", [x, b.op("ReduceMax", [x, axes])])])
    return b.op("Div", [e, b.op("ReduceSum", [e, axes])])


def attention(b: Builder, x: str) -> str:
    def heads(t):  # [B,S,D] -> [B,H,S,D/H] with a static reshape
        r = b.op("Reshape", [t, b.const(np.array([0, 0, H, D // H], np.int64))])
        return b.op("Transpose", [r], perm=[0, 2, 1, 3])

    q, k, v = (heads(linear(b, x)) for _ in range(3))
    kt = b.op("Transpose", [k], perm=[0, 1, 3, 2])
    s = b.op("Div", [b.op("MatMul", [q, kt]), b.const(np.array(math.sqrt(D // H), np.float32))])
    s = b.op("Add", [s, b.rand((1, 1, 1, 5), 0.5)]) if b.rng.random() < 0.5 else s
    p = b.op("Softmax", [s], axis=-1)
    y = b.op("Transpose", [b.op("MatMul", [p, v])], perm=[0, 2, 1, 3])
    return b.op("Reshape", [y, b.const(np.array([0, 0, D], np.int64))])


def attention_sdpa_style(b: Builder, x: str) -> str:
    """As torch's SDPA decomposition exports it: Q and K^T each scaled by sqrt(scale), NaN rows zeroed."""
    def heads(t, perm):
        r = b.op("Reshape", [t, b.const(np.array([0, 0, H, D // H], np.int64))])
        return b.op("Transpose", [r], perm=perm)

    root = np.array((D // H) ** -0.25, np.float32)
    q = b.op("Mul", [heads(linear(b, x), [0, 2, 1, 3]), b.const(root)])
    kt = b.op("Mul", [heads(linear(b, x), [0, 2, 3, 1]), b.const(root)])
    v = heads(linear(b, x), [0, 2, 1, 3])
    s = b.op("Add", [b.op("MatMul", [q, kt]), b.rand((1, 1, 1, 5), 0.5)])
    p = b.op("Softmax", [s], axis=-1)
    p = b.op("Where", [b.op("IsNaN", [p]), b.const(np.array(0.0, np.float32)), p])
    y = b.op("Transpose", [b.op("MatMul", [p, v])], perm=[0, 2, 1, 3])
    return b.op("Reshape", [y, b.const(np.array([0, 0, D], np.int64))])


def gemm_transpose(b: Builder, x: str) -> str:
    flat = b.op("Reshape", [x, b.const(np.array([-1, D], np.int64))])
    t = b.op("Transpose", [flat], perm=[1, 0])
    y = b.op("Gemm", [t, b.rand((D, D), 0.3), b.rand((D,), 0.1)], transA=1)
    return b.op("Reshape", [y, b.const(np.array([2, 5, D], np.int64))])


def matmul_scale(b: Builder, x: str) -> str:
    y = b.op("MatMul", [x, b.rand((D, D), 0.3)])
    return b.op("Mul", [y, b.rand((D,), 0.5)])


def seq_silu(b: Builder, x: str) -> str:
    return silu(b, x)


def seq_noops(b: Builder, x: str) -> str:
    x = b.op("Identity", [x])
    x = b.op("Reshape", [x, b.const(np.array([2, 5, D], np.int64))])
    return b.op("Cast", [x], to=TensorProto.FLOAT)


def attention_torch_mha(b: Builder, x: str) -> str:
    """As torch.nn.MultiheadAttention(batch_first=True) exports (torchvision's ViT): sequence-major
    packed projection, Unsqueeze/Transpose/Squeeze, one Gather per tensor, per-head reshapes."""
    bsz, seq, hd = 2, 5, D // H
    shape = lambda *s: b.const(np.array(s, np.int64))  # noqa: E731
    t = b.op("Transpose", [x], perm=[1, 0, 2])
    proj = b.op("Add", [b.rand((3 * D,), 0.1), b.op("MatMul", [t, b.rand((D, 3 * D), 0.3)])])
    p = b.op("Unsqueeze", [b.op("Reshape", [proj, shape(seq, bsz, 3, D)]), shape(0)])
    p = b.op("Squeeze", [b.op("Transpose", [p], perm=[3, 1, 2, 0, 4]), shape(3)])
    root = b.const(np.array([hd ** -0.25], np.float32))

    def head(i):
        g = b.op("Gather", [p, b.const(np.array(i, np.int64))], axis=0)
        g = b.op("Transpose", [b.op("Reshape", [g, shape(seq, bsz * H, hd)])], perm=[1, 0, 2])
        return b.op("Reshape", [g, shape(bsz, H, seq, hd)])

    q = b.op("Mul", [head(0), root])
    kt = b.op("Transpose", [b.op("Mul", [b.op("Transpose", [head(1)], perm=[0, 1, 3, 2]), root])], perm=[0, 1, 3, 2])
    s = b.op("MatMul", [q, b.op("Transpose", [kt], perm=[0, 1, 3, 2])])
    y = b.op("MatMul", [b.op("Softmax", [s], axis=-1), head(2)])
    y = b.op("Reshape", [b.op("Transpose", [y], perm=[2, 0, 1, 3]), shape(seq * bsz, D)])
    y = b.op("Gemm", [y, b.rand((D, D), 0.3), b.rand((D,), 0.1)], transB=1)
    return b.op("Transpose", [b.op("Reshape", [y, shape(seq, bsz, D)])], perm=[1, 0, 2])


def shuffle_chain(b: Builder, x: str) -> str:
    """Reshapes and transposes that reorder the data, then back to [2, 5, D]."""
    r = b.op("Reshape", [x, b.const(np.array([2, 5, 2, D // 2], np.int64))])
    r = b.op("Transpose", [r], perm=[int(i) for i in b.rng.permutation(4)])
    r = b.op("Reshape", [r, b.const(np.array([10, D], np.int64))])
    r = b.op("Transpose", [r], perm=[1, 0])
    r = b.op("Reshape", [r, b.const(np.array([D, 2, 5], np.int64))])
    r = b.op("Unsqueeze", [r, b.const(np.array([0], np.int64))])
    r = b.op("Transpose", [r], perm=[0, 2, 3, 1])
    return b.op("Reshape", [r, b.const(np.array([2, 5, D], np.int64))])


SEQ_BLOCKS = [linear, gelu_erf, gelu_tanh, layernorm, rmsnorm, softmax, attention, gemm_transpose,
              matmul_scale, seq_silu, seq_noops, attention_sdpa_style, attention_torch_mha, shuffle_chain]


def random_model(family: str, blocks: list[int], seed: int) -> tuple[onnx.ModelProto, dict[str, np.ndarray]]:
    rng = np.random.default_rng(seed)
    b = Builder(rng)
    if family == "cnn":
        table, shape = CNN_BLOCKS, [2, C, 5, 5]
    else:
        table, shape = SEQ_BLOCKS, [2, 5, D]
    x = "x"
    for i in blocks:
        x = table[i % len(table)](b, x)
    out = b.op("Identity", [x])
    feeds = {"x": rng.standard_normal(shape).astype(np.float32)}
    return b.model([("x", shape)], out), feeds
