"""Each pass on a small hand-made graph: the structure after it, and the outputs unchanged."""

import math

import numpy as np
import pytest
import torch

import tensorsmith
from tensorsmith.errors import TensorsmithError
from tensorsmith.ops.interpreter import run_graph
from tensorsmith.passes import PASSES, group_layers, run_passes
from tensorsmith.passes.cleanup import common_subexpression_elimination, dead_code_elimination, identity_elimination
from tensorsmith.passes.constant_folding import constant_folding, shape_folding
from tensorsmith.passes.fold_linear import batchnorm_folding, residual_bias_merging, scale_shift_folding
from tensorsmith.passes.shuffle import concat_slice_elimination, transpose_cancellation, transpose_into_gemm

from . import graphgen
from .graphgen import Builder


def build(block, shape=(2, graphgen.C, 5, 5), seed=0, opset=17):
    b = Builder(np.random.default_rng(seed), opset)
    out = b.op("Identity", [block(b, "x")])
    model = b.model([("x", list(shape))], out)
    x = np.random.default_rng(seed + 1).standard_normal(shape).astype(np.float32)
    return tensorsmith.import_onnx(model), {"x": x}


def outputs(graph, feeds):
    with torch.inference_mode():
        return [t.numpy().copy() for t in run_graph(graph, {k: torch.from_numpy(v) for k, v in feeds.items()})]


def apply(graph, feeds, *passes):
    """Run passes (then dead-code elimination); assert the outputs did not change; return op types."""
    before = outputs(graph, feeds)
    changed = False
    for p in passes:
        changed |= p(graph)
    dead_code_elimination(graph)
    tensorsmith.ir.verify(graph)
    for a, b in zip(outputs(graph, feeds), before):
        np.testing.assert_allclose(a, b, rtol=1e-4, atol=1e-5)
    assert changed, "the pass reported no change"
    return [n.op_type for n in graph.nodes]


def test_dead_code_elimination_removes_unread_nodes_and_weights():
    def block(b, x):
        b.op("Conv", [x, b.rand((graphgen.C, graphgen.C, 1, 1))])  # nobody reads it
        return b.op("Relu", [x])
    g, feeds = build(block)
    assert apply(g, feeds, dead_code_elimination) == ["Relu", "Identity"]
    assert g.initializers == {}


def test_identity_elimination_removes_noops():
    g, feeds = build(graphgen.noops)
    assert [n.op_type for n in g.nodes] == ["Identity", "Dropout", "Cast", "Transpose", "Pad", "Identity"]
    name = g.outputs[0].name
    assert apply(g, feeds, identity_elimination) == ["Identity"]
    assert g.outputs[0].name == name  # the output keeps its name


def test_identity_elimination_keeps_training_dropout():
    g, _ = build(lambda b, x: b.op("Dropout", [x, b.const(np.array(0.5, np.float32)), b.const(np.array(True))]))
    identity_elimination(g)
    assert "Dropout" in [n.op_type for n in g.nodes]


def test_common_subexpression_elimination_merges_duplicates():
    g, feeds = build(graphgen.duplicate_branches)
    assert apply(g, feeds, common_subexpression_elimination) == ["Mul", "Add", "Identity"]
    add = g.nodes[1]
    assert add.inputs[0] is add.inputs[1]


def test_constant_folding_and_shape_folding_collapse_shape_chains():
    g, feeds = build(graphgen.shape_chain)
    ops = apply(g, feeds, shape_folding, constant_folding, common_subexpression_elimination, constant_folding)
    assert ops == ["Reshape", "Reshape", "Neg", "Identity"]
    assert all(g.is_initializer(n.inputs[1]) for n in g.nodes if n.op_type == "Reshape")


def test_shape_folding_keeps_symbolic_dims_but_folds_static_ones():
    b = Builder(np.random.default_rng(0))
    s = b.op("Shape", ["x"])
    d1 = b.op("Gather", [s, b.const(np.array([1], np.int64))], axis=0)
    d0 = b.op("Gather", [s, b.const(np.array([0], np.int64))], axis=0)
    out = b.op("Concat", [d0, d1], axis=0)
    g = tensorsmith.import_onnx(b.model([("x", ["N", 3])], out))
    assert shape_folding(g)
    dead_code_elimination(g)
    ops = [n.op_type for n in g.nodes]
    assert ops == ["Shape", "Gather", "Concat"]  # dim 0 is symbolic; dim 1 became a constant


def test_batchnorm_folds_into_conv():
    g, feeds = build(graphgen.conv_bn)
    conv_name = next(n.name for n in g.nodes if n.op_type == "Conv")
    bn_name = next(n.name for n in g.nodes if n.op_type == "BatchNormalization")
    assert apply(g, feeds, batchnorm_folding) == ["Conv", "Identity"]
    assert g.nodes[0].sources == [conv_name, bn_name]


def test_batchnorm_folds_into_gemm():
    def block(b, x):
        flat = b.op("Flatten", [x])
        y = b.op("Gemm", [flat, b.rand((graphgen.C * 25, 4)), b.rand((4,))])
        return b.op("BatchNormalization", [y, b.rand((4,)), b.rand((4,)), b.rand((4,)),
                                           b.const(np.full(4, 0.7, np.float32))])
    g, feeds = build(block)
    assert apply(g, feeds, batchnorm_folding) == ["Flatten", "Gemm", "Identity"]


def test_scale_and_shift_fold_into_conv():
    g, feeds = build(graphgen.conv_scale_shift)
    assert apply(g, feeds, scale_shift_folding, scale_shift_folding) == ["Conv", "Identity"]


def test_scale_folds_into_matmul_weights():
    g, feeds = build(graphgen.matmul_scale, shape=(2, 5, graphgen.D))
    assert apply(g, feeds, scale_shift_folding) == ["MatMul", "Identity"]


def test_scale_that_broadcasts_the_output_is_not_folded():
    def block(b, x):
        y = b.op("Conv", [x, b.rand((graphgen.C, graphgen.C, 1, 1))])
        return b.op("Mul", [y, b.rand((3, 1, 1, 1, 1))])  # makes the result 5-D
    g, _ = build(block)
    assert not scale_shift_folding(g)


def _conv_biases(graph):
    return [n.inputs[2] if len(n.inputs) > 2 else None for n in graph.nodes if n.op_type == "Conv"]


def test_residual_bias_merging_puts_both_biases_on_the_conv_that_takes_the_add():
    g, feeds = build(graphgen.downsample_residual)
    assert apply(g, feeds, residual_bias_merging) == ["Conv", "Conv", "Add", "Relu", "Identity"]
    first, second = _conv_biases(g)
    assert first is not None and second is None
    biased = next(n for n in g.nodes if n.op_type == "Conv" and n.inputs[2] is not None)
    for _ in range(2):  # fp16 builds group twice; the first grouping reorders the nodes
        group_layers(g)
        (layer,) = [l for l in g.layers if any(n.op_type == "Add" for n in l.nodes)]
        assert layer.anchor is biased


def test_residual_bias_merging_leaves_a_conv_output_read_twice():
    def block(b, x):
        y = graphgen.downsample_residual(b, x)
        shortcut = b.nodes[-3].output[0]  # the 1x1 Conv's output, read once more below
        return b.op("Add", [y, shortcut])
    g, feeds = build(block)
    assert not residual_bias_merging(g)
    assert all(bias is not None for bias in _conv_biases(g))


def test_transpose_pair_cancels():
    g, feeds = build(lambda b, x: b.op("Transpose", [b.op("Transpose", [x], perm=[0, 2, 3, 1])], perm=[0, 3, 1, 2]))
    assert apply(g, feeds, transpose_cancellation) == ["Identity"]


def test_transpose_pair_composes():
    g, feeds = build(lambda b, x: b.op("Transpose", [b.op("Transpose", [x], perm=[0, 2, 3, 1])], perm=[0, 2, 1, 3]))
    assert apply(g, feeds, transpose_cancellation) == ["Transpose", "Identity"]
    assert g.nodes[0].attrs["perm"] == [0, 3, 2, 1]


def test_transpose_folds_into_gemm():
    g, feeds = build(graphgen.gemm_transpose, shape=(2, 5, graphgen.D))
    assert apply(g, feeds, transpose_into_gemm) == ["Reshape", "Gemm", "Reshape", "Identity"]
    assert next(n for n in g.nodes if n.op_type == "Gemm").attrs["transA"] == 0


def test_matmul_of_transposed_activation_becomes_gemm():
    def block(b, x):
        flat = b.op("Reshape", [x, b.const(np.array([graphgen.D, -1], np.int64))])
        return b.op("MatMul", [b.op("Transpose", [flat], perm=[1, 0]), b.op("Relu", [flat])])
    g, feeds = build(block, shape=(2, 5, graphgen.D))
    assert apply(g, feeds, transpose_into_gemm) == ["Reshape", "Relu", "Gemm", "Identity"]


def test_slice_of_concat_selects_the_input():
    g, feeds = build(graphgen.concat_slice)
    assert apply(g, feeds, concat_slice_elimination) == ["Tanh", "Identity"]


def test_concat_of_split_is_the_input():
    def block(b, x):
        parts = b.op("Split", [x], outputs=2, axis=1, num_outputs=2)
        return b.op("Concat", parts, axis=1)
    g, feeds = build(block, shape=(2, 6, 5, 5), opset=18)
    assert apply(g, feeds, concat_slice_elimination) == ["Identity"]


@pytest.mark.parametrize("block,op", [
    (graphgen.gelu_erf, "Gelu"), (graphgen.gelu_tanh, "Gelu"), (graphgen.silu, "Swish"),
    (graphgen.softmax, "Softmax"), (graphgen.layernorm, "LayerNormalization"),
    (graphgen.rmsnorm, "RMSNormalization"),
])
def test_recognition(block, op):
    from tensorsmith.passes import recognize

    g, feeds = build(block, shape=(2, 5, graphgen.D))
    n_before = len(g.nodes)
    passes = [recognize.gelu_recognition, recognize.silu_recognition, recognize.softmax_recognition,
              recognize.layernorm_recognition, recognize.rmsnorm_recognition]
    before = outputs(g, feeds)
    assert any([p(g) for p in passes])
    dead_code_elimination(g)
    assert [n.op_type for n in g.nodes] == [op, "Identity"], str(g)
    assert len(g.nodes[0].sources) == n_before - 1  # it absorbed every node of the pattern
    np.testing.assert_allclose(outputs(g, feeds)[0], before[0], rtol=1e-4, atol=1e-5)


def test_layernorm_recognition_reads_epsilon_and_axis():
    from tensorsmith.passes.recognize import layernorm_recognition

    g, feeds = build(graphgen.layernorm, shape=(2, 5, graphgen.D))
    assert apply(g, feeds, layernorm_recognition) == ["LayerNormalization", "Identity"]
    ln = g.nodes[0]
    assert ln.attrs["axis"] == 2 and math.isclose(ln.attrs["epsilon"], 1e-5, rel_tol=1e-6)


def test_attention_recognition():
    from tensorsmith.passes.attention import attention_recognition

    g, feeds = build(graphgen.attention, shape=(2, 5, graphgen.D), seed=3)
    ops = apply(g, feeds, attention_recognition)
    assert ops.count("Attention") == 1 and "Softmax" not in ops
    attn = next(n for n in g.nodes if n.op_type == "Attention")
    assert math.isclose(attn.attrs["scale"], 1 / math.sqrt(graphgen.D // graphgen.H), rel_tol=1e-6)


def test_attention_recognition_sdpa_export_style():
    from tensorsmith.passes.attention import attention_recognition

    g, feeds = build(graphgen.attention_sdpa_style, shape=(2, 5, graphgen.D), seed=4)
    ops = apply(g, feeds, attention_recognition)
    assert ops.count("Attention") == 1 and "IsNaN" not in ops and "Softmax" not in ops
    attn = next(n for n in g.nodes if n.op_type == "Attention")
    assert math.isclose(attn.attrs["scale"], 1 / math.sqrt(graphgen.D // graphgen.H), rel_tol=1e-5)


def test_softmax_over_another_axis_is_not_attention():
    from tensorsmith.passes.attention import attention_recognition

    def block(b, x):
        s = b.op("MatMul", [x, b.op("Transpose", [x], perm=[0, 2, 1])])
        return b.op("MatMul", [b.op("Softmax", [s], axis=1), x])
    g, _ = build(block, shape=(2, 5, graphgen.D))
    assert not attention_recognition(g)


def test_pass_manager_levels_and_disable():
    assert all(0 <= p.level <= 5 for p in PASSES.values())
    g, feeds = build(graphgen.conv_bn)
    run_passes(g, opt_level=3, disable=["batchnorm_folding"])
    assert "BatchNormalization" in [n.op_type for n in g.nodes]
    g, _ = build(graphgen.conv_bn)
    run_passes(g, opt_level=1)
    assert "BatchNormalization" in [n.op_type for n in g.nodes]
    g, _ = build(graphgen.conv_bn)
    run_passes(g, opt_level=2)
    assert "BatchNormalization" not in [n.op_type for n in g.nodes]


def test_level_zero_changes_no_numerics():
    assert all(p.name in ("dead_code_elimination", "identity_elimination") for p in PASSES.values() if p.level == 0)


def test_unknown_pass_and_level_are_typed_errors():
    g, _ = build(graphgen.relu)
    with pytest.raises(TensorsmithError, match="unknown pass.*'no_such_pass'.*constant_folding"):
        run_passes(g, disable=["no_such_pass"])
    with pytest.raises(TensorsmithError, match="opt_level"):
        run_passes(g, opt_level=9)


def test_build_accepts_opt_level_and_disable_passes():
    g_model = build(graphgen.conv_bn)[0]
    e = tensorsmith.build(g_model, opt_level=3, disable_passes=["batchnorm_folding", "layer_fusion"])
    assert "BatchNormalization" in [l.kind and n.op_type for l in e.layers for n in l.nodes]


def test_pipeline_order_is_explicit_and_complete():
    from tensorsmith.passes import PIPELINE, enabled_passes

    assert sorted(PIPELINE) == sorted(PASSES)
    assert [p.name for p in enabled_passes(5)] == PIPELINE


# -- horizontal fusion -------------------------------------------------------------------------

def test_qkv_projections_become_one_matmul_and_a_split():
    from tensorsmith.passes.horizontal import matmul_horizontal_fusion

    g, feeds = build(graphgen.attention, shape=(2, 5, graphgen.D))
    assert [n.op_type for n in g.nodes].count("MatMul") == 5
    ops = apply(g, feeds, matmul_horizontal_fusion)
    assert ops.count("MatMul") == 3 and ops.count("Split") == 1  # q@k^T and p@v remain
    fused = next(n for n in g.nodes if n.op_type == "MatMul")
    assert tuple(g.initializers[fused.inputs[1].name].shape) == (graphgen.D, 3 * graphgen.D)
    assert len(fused.sources) == 3


def test_horizontal_fusion_mixes_biased_and_plain_matmuls_and_keeps_outputs():
    from tensorsmith.passes.horizontal import matmul_horizontal_fusion

    def block(b, x):
        a = graphgen.linear(b, x, d_out=3)                       # MatMul + bias
        p = b.op("MatMul", [x, b.rand((graphgen.D, 4), 0.3)])    # no bias
        other_k = b.op("MatMul", [b.op("Relu", [x]), b.rand((graphgen.D, 2), 0.3)])  # another input
        return b.op("Concat", [a, p, other_k], axis=-1)
    g, feeds = build(block, shape=(2, 5, graphgen.D))
    ops = apply(g, feeds, matmul_horizontal_fusion)
    assert ops.count("MatMul") == 2 and ops.count("Split") == 1


def test_horizontal_fusion_leaves_a_lone_matmul():
    from tensorsmith.passes.horizontal import matmul_horizontal_fusion

    g, feeds = build(graphgen.linear, shape=(2, 5, graphgen.D))
    assert not matmul_horizontal_fusion(g)


# -- layer grouping ----------------------------------------------------------------------------

def _layer_ops(graph):
    from tensorsmith.passes.layers import group_layers

    group_layers(graph)
    return [[n.op_type for n in layer.nodes] for layer in graph.layers]


def _residual_block(pre_norm: bool):
    def block(b, x):
        y = b.op("Add", [b.op("MatMul", [x, b.rand((graphgen.D, graphgen.D))]), b.rand((graphgen.D,))])
        s = b.op("Add", [x, y])
        ln = b.op("LayerNormalization", [s, b.rand((graphgen.D,)), b.rand((graphgen.D,))], axis=-1)
        return b.op("Add", [s, ln]) if pre_norm else ln
    return block


def test_a_post_norm_residual_goes_to_the_norm_not_the_matmul():
    g, _ = build(_residual_block(pre_norm=False), shape=(2, 5, graphgen.D))
    layers = _layer_ops(g)
    assert layers[0] == ["MatMul", "Add"] and layers[1][:2] == ["Add", "LayerNormalization"]


def test_a_residual_read_twice_stays_in_the_matmul_epilogue():
    g, _ = build(_residual_block(pre_norm=True), shape=(2, 5, graphgen.D))
    assert _layer_ops(g)[0] == ["MatMul", "Add", "Add"]
