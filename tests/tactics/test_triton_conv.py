"""triton.conv: 2-D Conv Layers as implicit GEMMs with fused epilogues, under the Triton interpreter."""


# tests/conftest.py turns on TRITON_INTERPRET when there is no GPU.

import numpy as np
import pytest

pytest.importorskip("triton")

import torch
from onnx import TensorProto, helper, numpy_helper

from tensorsmith.tactics import TACTICS
from tensorsmith.tactics.triton import conv
from tensorsmith.testing.layers import check_tactic, layer_contexts

from ..conftest import assert_replay_matches_direct_call

CONV = TACTICS["triton.conv"]
F = TensorProto.FLOAT


def conv_model(x_shape, oc, k=3, bias=True, epilogue=(), residual=False, **attrs):
    """Conv(x, w[, b]) followed by `epilogue` ops; "Add" adds a second input `r` of the output's shape."""
    rng = np.random.default_rng(0)
    c = x_shape[1]
    inits = [numpy_helper.from_array((rng.standard_normal((oc, c, k, k)) * 0.3).astype(np.float32), "w")]
    if bias:
        inits.append(numpy_helper.from_array(rng.standard_normal(oc).astype(np.float32), "b"))
    nodes = [helper.make_node("Conv", ["x", "w", "b"] if bias else ["x", "w"], ["h0"], **attrs)]
    inputs = [helper.make_tensor_value_info("x", F, list(x_shape))]
    for i, op in enumerate(epilogue):
        args = [f"h{i}", "r"] if op == "Add" else [f"h{i}"]
        nodes.append(helper.make_node(op, args, [f"h{i + 1}"]))
    if residual:
        inputs.append(helper.make_tensor_value_info("r", F, None))
    nodes.append(helper.make_node("Identity", [f"h{len(epilogue)}"], ["y"]))
    g = helper.make_graph(nodes, "m", inputs, [helper.make_tensor_value_info("y", F, None)], initializer=inits)
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])


def conv_layer(model, shapes, precision="fp32", device="cpu"):
    lcs = [lc for lc in layer_contexts(model, input_shapes=shapes, device=device, precision=precision)
           if lc.layer.kind == "convolution"]
    assert len(lcs) == 1, [lc.layer.name for lc in lcs]
    return lcs[0]


def _check_all(lc, n_configs=3):
    assert CONV.applies(lc)
    configs = CONV.configs(lc)
    assert 1 <= len(configs) <= 8
    for config in configs[:n_configs]:
        assert check_tactic(CONV, lc, config) <= 0, config


@pytest.mark.parametrize("precision", ["fp32", "fp16"])
@pytest.mark.parametrize("attrs", [
    {"pads": [1, 1, 1, 1]},
    {"strides": [2, 2], "pads": [1, 1, 1, 1]},
    {"dilations": [2, 2], "pads": [2, 1, 2, 1]},
    {"strides": [2, 1], "pads": [0, 1, 1, 0]},
    {"auto_pad": "SAME_UPPER", "strides": [2, 2]},
])
def test_conv_bias_relu(precision, attrs):
    lc = conv_layer(conv_model((1, 4, 8, 8), 8, epilogue=["Relu"], **attrs), {"x": (1, 4, 8, 8)}, precision)
    assert [n.op_type for n in lc.nodes][:2] == ["Conv", "Relu"]
    _check_all(lc, n_configs=2)


@pytest.mark.parametrize("precision", ["fp32", "fp16", "bf16"])
def test_conv_residual_add_relu(precision):
    model = conv_model((2, 16, 6, 6), 24, epilogue=["Add", "Relu"], residual=True, pads=[1, 1, 1, 1])
    lc = conv_layer(model, {"x": (2, 16, 6, 6), "r": (2, 24, 6, 6)}, precision)
    assert len(lc.inputs) == 2
    _check_all(lc)


def test_conv_without_bias_and_with_uneven_channels():
    model = conv_model((2, 3, 7, 9), 5, k=3, bias=False, epilogue=["Sigmoid"], strides=[2, 2])
    _check_all(conv_layer(model, {"x": (2, 3, 7, 9)}))


@pytest.mark.parametrize("r_shape,pointwise", [
    ((1, 16, 1, 1), True), ((2, 16, 5, 5), True), ((16, 5, 5), True), ((2, 1, 5, 5), True), ((1, 16, 5, 1), False),
])
def test_pointwise_conv_runs_as_a_gemm_per_image(r_shape, pointwise):
    model = conv_model((2, 32, 5, 5), 16, k=1, epilogue=["Add", "Tanh"], residual=True)
    lc = conv_layer(model, {"x": (2, 32, 5, 5), "r": r_shape})
    assert conv._ConvProblem(lc).pointwise == pointwise  # (an operand broadcast along W alone is not)
    _check_all(lc)


@pytest.mark.parametrize("precision", ["fp16", "bf16"])
def test_pointwise_conv_half(precision):
    model = conv_model((2, 48, 4, 6), 40, k=1, epilogue=["Add", "Relu"], residual=True)
    lc = conv_layer(model, {"x": (2, 48, 4, 6), "r": (2, 40, 4, 6)}, precision)
    assert conv._ConvProblem(lc).pointwise
    _check_all(lc)


def test_strided_pointwise_conv_is_an_implicit_gemm():
    lc = conv_layer(conv_model((2, 16, 8, 8), 24, k=1, epilogue=["Relu"], strides=[2, 2]), {"x": (2, 16, 8, 8)})
    assert not conv._ConvProblem(lc).pointwise
    _check_all(lc)


def test_configs_follow_the_channels():
    lc = conv_layer(conv_model((1, 4, 8, 8), 8), {"x": (1, 4, 8, 8)})
    for c in CONV.configs(lc):
        assert c["BLOCK_N"] == 16 and c["BLOCK_K"] == 16 and c["BLOCK_M"] <= 64


# -- where it must not apply -------------------------------------------------------------


def test_not_for_grouped_or_depthwise_conv():
    rng = np.random.default_rng(0)
    w = numpy_helper.from_array(rng.standard_normal((8, 1, 3, 3)).astype(np.float32), "w")
    g = helper.make_graph([helper.make_node("Conv", ["x", "w"], ["y"], group=8, pads=[1, 1, 1, 1])], "m",
                          [helper.make_tensor_value_info("x", F, [1, 8, 8, 8])],
                          [helper.make_tensor_value_info("y", F, None)], initializer=[w])
    model = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
    assert not CONV.applies(conv_layer(model, {"x": (1, 8, 8, 8)}))


def test_not_for_1d_or_3d_conv():
    rng = np.random.default_rng(0)
    for x_shape, w_shape in [((1, 4, 16), (8, 4, 3)), ((1, 4, 4, 4, 4), (8, 4, 3, 3, 3))]:
        w = numpy_helper.from_array(rng.standard_normal(w_shape).astype(np.float32), "w")
        g = helper.make_graph([helper.make_node("Conv", ["x", "w"], ["y"])], "m",
                              [helper.make_tensor_value_info("x", F, list(x_shape))],
                              [helper.make_tensor_value_info("y", F, None)], initializer=[w])
        model = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
        assert not CONV.applies(conv_layer(model, {"x": x_shape}))


def test_not_for_a_weight_computed_at_run_time():
    g = helper.make_graph([helper.make_node("Conv", ["x", "w"], ["y"])], "m",
                          [helper.make_tensor_value_info("x", F, [1, 4, 8, 8]),
                           helper.make_tensor_value_info("w", F, [8, 4, 3, 3])],
                          [helper.make_tensor_value_info("y", F, None)])
    model = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
    assert not CONV.applies(conv_layer(model, {"x": (1, 4, 8, 8), "w": (8, 4, 3, 3)}))


def test_not_for_other_anchors_or_without_a_triton_device(monkeypatch):
    rng = np.random.default_rng(0)
    w = numpy_helper.from_array(rng.standard_normal((8, 8)).astype(np.float32), "w")
    g = helper.make_graph([helper.make_node("MatMul", ["x", "w"], ["y"])], "m",
                          [helper.make_tensor_value_info("x", F, [4, 8])],
                          [helper.make_tensor_value_info("y", F, None)], initializer=[w])
    model = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
    assert not any(CONV.applies(lc) for lc in layer_contexts(model, input_shapes={"x": (4, 8)}))
    lc = conv_layer(conv_model((1, 4, 8, 8), 8), {"x": (1, 4, 8, 8)})
    monkeypatch.setenv("TRITON_INTERPRET", "0")
    assert not CONV.applies(lc)


# -- on the GPU, at ResNet shapes -----------------------------------------------------------


@pytest.fixture(autouse=True)
def _float32_is_float32():
    """As a float32 build does: no TF32 in the cuBLAS/cuDNN reference nor in the kernels' configs."""
    saved = torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32
    torch.backends.cuda.matmul.allow_tf32 = torch.backends.cudnn.allow_tf32 = False
    yield
    torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32 = saved

RESNET = [  # (input NCHW, OC, kernel, attrs)
    ((8, 3, 224, 224), 64, 7, {"strides": [2, 2], "pads": [3, 3, 3, 3]}),
    ((8, 64, 56, 56), 64, 3, {"pads": [1, 1, 1, 1]}),
    ((8, 64, 56, 56), 256, 1, {}),
    ((8, 256, 56, 56), 128, 1, {"strides": [2, 2]}),
    ((8, 256, 14, 14), 256, 3, {"pads": [1, 1, 1, 1]}),
    ((8, 512, 7, 7), 2048, 1, {}),
]


@pytest.mark.gpu
@pytest.mark.parametrize("precision", ["fp16", "fp32"])
@pytest.mark.parametrize("shape,oc,k,attrs", RESNET)
def test_gpu_resnet_conv_bias_relu(precision, shape, oc, k, attrs):
    lc = conv_layer(conv_model(shape, oc, k=k, epilogue=["Relu"], **attrs), {"x": shape}, precision, "cuda")
    assert CONV.applies(lc)
    for config in CONV.configs(lc):
        assert check_tactic(CONV, lc, config) <= 0, config


@pytest.mark.gpu
@pytest.mark.parametrize("precision", ["fp16", "fp32"])
def test_gpu_resnet_bottleneck_residual(precision):
    shape = (8, 64, 56, 56)
    model = conv_model(shape, 256, k=1, epilogue=["Add", "Relu"], residual=True)
    lc = conv_layer(model, {"x": shape, "r": (8, 256, 56, 56)}, precision, "cuda")
    assert CONV.applies(lc)
    for config in CONV.configs(lc):
        assert check_tactic(CONV, lc, config) <= 0, config


@pytest.mark.gpu
def test_gpu_conv_runner_survives_cuda_graph_capture():
    lc = conv_layer(conv_model((4, 64, 28, 28), 64, epilogue=["Relu"], pads=[1, 1, 1, 1]),
                    {"x": (4, 64, 28, 28)}, "fp16", "cuda")
    runner = CONV.compile(lc, CONV.configs(lc)[0])
    x = torch.randn(4, 64, 28, 28, device="cuda", dtype=torch.float16)
    assert_replay_matches_direct_call(runner, [x])
