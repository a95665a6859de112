"""FLOPs and bytes counted from ONNX graphs built in code (no GPU needed)."""

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from bench.roofline import bound_ms, fractions, graph_cost, node_flops


def _init(name, *shape):
    return numpy_helper.from_array(np.zeros(shape, np.float32), name)


def conv_net(batch="N") -> onnx.ModelProto:
    """x[N,3,8,8] -Conv 3x3-> [N,4,8,8] -Flatten-> [N,256] -Gemm-> [N,10] -MatMul-> y[N,5]."""
    nodes = [
        helper.make_node("Conv", ["x", "w", "b"], ["c"], pads=[1, 1, 1, 1], name="conv"),
        helper.make_node("Relu", ["c"], ["r"]),
        helper.make_node("Flatten", ["r"], ["f"]),
        helper.make_node("Gemm", ["f", "w2", "b2"], ["g"], transB=1, name="fc"),
        helper.make_node("MatMul", ["g", "w3"], ["y"], name="proj"),
    ]
    g = helper.make_graph(nodes, "convnet", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [batch, 3, 8, 8])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, [batch, 5])],
                          initializer=[_init("w", 4, 3, 3, 3), _init("b", 4), _init("w2", 10, 256), _init("b2", 10),
                                       _init("w3", 10, 5)])
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])


def attention_block() -> onnx.ModelProto:
    """Self-attention written out as exporters write it, with a Reshape whose target is computed
    from the input's shape (the batch is symbolic): x[N,S,16] -> heads [N,2,S,8] -> QK^T -> PV."""
    i64 = lambda name, v: numpy_helper.from_array(np.array(v, np.int64), name)  # noqa: E731
    nodes = [
        helper.make_node("MatMul", ["x", "wq"], ["q"]),
        helper.make_node("Shape", ["x"], ["shp"]),
        helper.make_node("Slice", ["shp", "zero", "two", "zero"], ["ns"]),         # [N, S]
        helper.make_node("Concat", ["ns", "heads"], ["tgt"], axis=0),               # [N, S, 2, 8]
        helper.make_node("Reshape", ["q", "tgt"], ["q4"]),
        helper.make_node("Transpose", ["q4"], ["qh"], perm=[0, 2, 1, 3]),           # [N, 2, S, 8]
        helper.make_node("Transpose", ["q4"], ["kt"], perm=[0, 2, 3, 1]),           # [N, 2, 8, S]
        helper.make_node("MatMul", ["qh", "kt"], ["scores"]),                       # [N, 2, S, S]
        helper.make_node("Softmax", ["scores"], ["p"], axis=-1),
        helper.make_node("MatMul", ["p", "qh"], ["y"]),                             # [N, 2, S, 8]
    ]
    g = helper.make_graph(nodes, "attn", [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", 6, 16])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["N", 2, 6, 8])],
                          initializer=[_init("wq", 16, 16), i64("zero", [0]), i64("two", [2]), i64("heads", [2, 8])])
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])


def test_conv_gemm_matmul_flops_and_bytes():
    cost = graph_cost(conv_net(), {"x": (2, 3, 8, 8)})
    conv = 2 * (2 * 4 * 8 * 8) * (3 * 3 * 3)
    gemm = 2 * 2 * 256 * 10
    matmul = 2 * 2 * 10 * 5
    assert cost.flops == conv + gemm + matmul
    assert cost.counted_nodes == 3 and cost.unknown_nodes == []
    weights = 4 * 27 + 4 + 2560 + 10 + 50
    io = 2 * 3 * 8 * 8 + 2 * 5
    assert (cost.float_weights, cost.float_io) == (weights, io)
    assert cost.bytes_at("fp16") == 2 * (weights + io)
    assert cost.bytes_at("fp32") == cost.bytes_at("tf32") == 4 * (weights + io)


def test_flops_scale_with_the_batch_given():
    one, eight = (graph_cost(conv_net(), {"x": (b, 3, 8, 8)}) for b in (1, 8))
    assert eight.flops == 8 * one.flops
    assert eight.float_weights == one.float_weights


def test_reshape_targets_computed_from_shapes_are_followed():
    cost = graph_cost(attention_block(), {"x": (3, 6, 16)})
    proj = 2 * 3 * 6 * 16 * 16
    qk = pv = 2 * (3 * 2) * 6 * 8 * 6
    assert cost.unknown_nodes == []
    assert cost.flops == proj + qk + pv
    # The int64 shape constants are weights too, at their own size whatever the precision.
    assert cost.other_weight_bytes == 8 * (1 + 1 + 2)
    assert cost.bytes_at("fp16") - cost.bytes_at("fp32") == -2 * (cost.float_weights + cost.float_io)


def test_ops_without_known_shapes_are_reported_not_guessed():
    node = helper.make_node("MatMul", ["a", "b"], ["c"], name="mm")
    assert node_flops(node, {"a": [4, 5]}) is None
    assert node_flops(helper.make_node("Relu", ["a"], ["c"]), {}) == 0


def test_gemm_transposes_and_attention_op():
    gemm = helper.make_node("Gemm", ["a", "b"], ["c"], transA=1, transB=1)
    assert node_flops(gemm, {"a": [7, 3], "b": [5, 7]}) == 2 * 3 * 7 * 5
    attn4 = helper.make_node("Attention", ["q", "k", "v"], ["o"])
    assert node_flops(attn4, {"q": [2, 4, 10, 8], "k": [2, 4, 12, 8], "v": [2, 4, 12, 8]}) == 2 * 2 * 4 * 10 * 12 * 16
    attn3 = helper.make_node("Attention", ["q", "k", "v"], ["o"], q_num_heads=4, kv_num_heads=4)
    assert node_flops(attn3, {"q": [2, 10, 32], "k": [2, 12, 32], "v": [2, 12, 32]}) == 2 * 2 * 4 * 10 * 12 * 16


def test_roofline_bound_and_fractions():
    # 1 TFLOP at 100 TFLOP/s is 10 ms; 1 GB at 1000 GB/s is 1 ms: math-bound at 10 ms.
    assert bound_ms(10**12, 10**9, 100.0, 1000.0) == pytest.approx(10.0)
    f = fractions(20.0, 10**12, 10**9, 100.0, 1000.0)
    assert f == pytest.approx({"matrix_frac": 0.5, "bandwidth_frac": 0.05, "roofline_frac": 0.5})
