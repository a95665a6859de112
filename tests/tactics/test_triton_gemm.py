"""triton.gemm: MatMul/Gemm Layers with fused epilogues, under the Triton interpreter on the CPU."""


# tests/conftest.py turns on TRITON_INTERPRET when there is no GPU.

import numpy as np
import pytest

pytest.importorskip("triton")

import torch
from onnx import TensorProto, helper, numpy_helper

from tensorsmith.tactics import TACTICS
from tensorsmith.tactics.triton import gemm
from tensorsmith.testing.layers import check_tactic, layer_contexts

from ..conftest import assert_replay_matches_direct_call

GEMM = TACTICS["triton.gemm"]
F = TensorProto.FLOAT


def _model(nodes, inputs, outputs, weights, opset=17):
    rng = np.random.default_rng(0)
    inits = [numpy_helper.from_array((rng.standard_normal(s) * 0.5).astype(np.float32), n) for n, s in weights.items()]
    g = helper.make_graph(
        nodes, "m",
        [helper.make_tensor_value_info(n, F, s) for n, s in inputs.items()],
        [helper.make_tensor_value_info(n, F, None) for n in outputs],
        initializer=inits)
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", opset)])


def _matmul_layer(model, shapes, precision="fp32", device="cpu"):
    lcs = [lc for lc in layer_contexts(model, input_shapes=shapes, device=device, precision=precision)
           if lc.layer.kind == "matmul"]
    assert len(lcs) == 1, [lc.layer.name for lc in lcs]
    return lcs[0]


def _check_all(lc, n_configs=3):
    assert GEMM.applies(lc)
    configs = GEMM.configs(lc)
    assert 1 <= len(configs) <= 8
    for config in configs[:n_configs]:
        assert check_tactic(GEMM, lc, config) <= 0, config


def mlp(act="Relu", m=32, k=48, n=40):
    nodes = [helper.make_node("MatMul", ["x", "w"], ["h"]), helper.make_node("Add", ["h", "b"], ["y0"])]
    nodes.append(helper.make_node(act, ["y0"], ["y"]) if act else helper.make_node("Identity", ["y0"], ["y"]))
    return _model(nodes, {"x": [m, k]}, ["y"], {"w": (k, n), "b": (n,)}, opset=20 if act == "Gelu" else 17)


@pytest.mark.parametrize("precision", ["fp32", "fp16", "bf16"])
@pytest.mark.parametrize("act", ["Relu", "Gelu", "Sigmoid"])
def test_matmul_bias_activation(precision, act):
    lc = _matmul_layer(mlp(act), {"x": (32, 48)}, precision)
    ops = [n.op_type for n in lc.nodes]
    assert ops[ops.index("MatMul") + 1:][:2] == ["Add", act]  # (+ the Cast back to float32 in fp16)
    _check_all(lc, n_configs=1)


def test_plain_matmul_and_uneven_k():
    lc = _matmul_layer(_model([helper.make_node("MatMul", ["x", "w"], ["y"])], {"x": [20, 37]}, ["y"],
                              {"w": (37, 24)}), {"x": (20, 37)})
    _check_all(lc, n_configs=3)


@pytest.mark.parametrize("precision", ["fp32", "fp16"])
def test_residual_add_and_scale(precision):
    nodes = [helper.make_node("MatMul", ["x", "w"], ["h"]), helper.make_node("Add", ["h", "r"], ["h2"]),
             helper.make_node("Mul", ["h2", "s"], ["h3"]), helper.make_node("Tanh", ["h3"], ["y"])]
    model = _model(nodes, {"x": [16, 32], "r": [16, 64], "s": [16, 1]}, ["y"], {"w": (32, 64)})
    lc = _matmul_layer(model, {"x": (16, 32), "r": (16, 64), "s": (16, 1)}, precision)
    assert len(lc.inputs) >= 3  # x, the residual and the per-row scale come from outside
    _check_all(lc)


@pytest.mark.parametrize("precision", ["fp32", "fp16"])
def test_batched_activation_folds_into_m(precision):
    nodes = [helper.make_node("MatMul", ["x", "w"], ["h"]), helper.make_node("Add", ["h", "b"], ["h2"]),
             helper.make_node("Add", ["h2", "r"], ["y"])]
    model = _model(nodes, {"x": [2, 3, 8, 32], "r": [8, 16]}, ["y"], {"w": (32, 16), "b": (16,)})
    lc = _matmul_layer(model, {"x": (2, 3, 8, 32), "r": (8, 16)}, precision)
    assert gemm._MatmulProblem(lc).fold
    _check_all(lc)


def test_batched_activation_times_activation():
    nodes = [helper.make_node("MatMul", ["x", "z"], ["h"]), helper.make_node("Add", ["h", "b"], ["h2"]),
             helper.make_node("Relu", ["h2"], ["y"])]
    model = _model(nodes, {"x": [3, 16, 24], "z": [3, 24, 32], "b": [3, 1, 32]}, ["y"], {})
    lc = _matmul_layer(model, {"x": (3, 16, 24), "z": (3, 24, 32), "b": (3, 1, 32)})
    assert not gemm._MatmulProblem(lc).fold
    _check_all(lc)


def test_weight_times_batched_activation():
    nodes = [helper.make_node("MatMul", ["w", "x"], ["h"]), helper.make_node("Relu", ["h"], ["y"])]
    lc = _matmul_layer(_model(nodes, {"x": [2, 24, 20]}, ["y"], {"w": (16, 24)}), {"x": (2, 24, 20)}, "fp16")
    assert not gemm._MatmulProblem(lc).fold
    _check_all(lc)


@pytest.mark.parametrize("trans_a,trans_b", [(0, 1), (1, 0)])
def test_gemm_attributes(trans_a, trans_b):
    m, k, n = 24, 40, 32
    node = helper.make_node("Gemm", ["x", "w", "c"], ["h"], transA=trans_a, transB=trans_b, alpha=0.5, beta=2.0)
    model = _model([node, helper.make_node("Relu", ["h"], ["y"])], {"x": [k, m] if trans_a else [m, k]}, ["y"],
                   {"w": (n, k) if trans_b else (k, n), "c": (1, n)})
    lc = _matmul_layer(model, {"x": (k, m) if trans_a else (m, k)})
    _check_all(lc)


def test_gemm_with_activation_c_and_transposed_activation_b():
    node = helper.make_node("Gemm", ["x", "z", "c"], ["y"], transB=1)
    model = _model([node], {"x": [16, 32], "z": [48, 32], "c": [16, 48]}, ["y"], {})
    lc = _matmul_layer(model, {"x": (16, 32), "z": (48, 32), "c": (16, 48)}, "fp16")
    _check_all(lc)


def test_prologue_on_the_activation():
    nodes = [helper.make_node("Sigmoid", ["x"], ["xs"]), helper.make_node("MatMul", ["xs", "w"], ["y"])]
    lc = _matmul_layer(_model(nodes, {"x": [16, 40]}, ["y"], {"w": (40, 16)}), {"x": (16, 40)})
    assert lc.nodes[0].op_type == "Sigmoid"
    _check_all(lc)  # K = 40 is not a multiple of BLOCK_K: masked K must stay 0 after the prologue


def test_configs_follow_the_problem_size():
    lc = _matmul_layer(mlp(), {"x": (32, 48)})
    for c in GEMM.configs(lc):
        assert c["BLOCK_M"] <= 32 and c["BLOCK_N"] <= 64 and c["BLOCK_K"] <= 64 and c["BLOCK_K"] >= 16


# -- where it must not apply -------------------------------------------------------------


def test_not_for_a_vector_operand():
    model = _model([helper.make_node("MatMul", ["x", "w"], ["y"])], {"x": [4, 16]}, ["y"], {"w": (16,)})
    assert not GEMM.applies(_matmul_layer(model, {"x": (4, 16)}))


def test_not_for_partially_broadcast_batch():
    model = _model([helper.make_node("MatMul", ["x", "z"], ["y"])], {"x": [2, 3, 16, 16], "z": [1, 3, 16, 16]},
                   ["y"], {})
    assert not GEMM.applies(_matmul_layer(model, {"x": (2, 3, 16, 16), "z": (1, 3, 16, 16)}))


def test_not_for_integer_matmul():
    g = helper.make_graph([helper.make_node("MatMul", ["x", "z"], ["y"])], "m",
                          [helper.make_tensor_value_info("x", TensorProto.INT32, [4, 16]),
                           helper.make_tensor_value_info("z", TensorProto.INT32, [16, 4])],
                          [helper.make_tensor_value_info("y", TensorProto.INT32, None)])
    model = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
    assert not GEMM.applies(_matmul_layer(model, {"x": (4, 16), "z": (16, 4)}))


def test_not_for_an_epilogue_codegen_cannot_express():
    nodes = [helper.make_node("MatMul", ["x", "w"], ["h"]), helper.make_node("Acos", ["h"], ["y"])]
    lc = _matmul_layer(_model(nodes, {"x": [16, 16]}, ["y"], {"w": (16, 16)}), {"x": (16, 16)})
    assert lc.nodes[-1].op_type == "Acos"  # (codegen has no arc-cosine)
    assert not GEMM.applies(lc)


def test_not_for_other_anchors_or_without_a_triton_device(monkeypatch):
    conv = _model([helper.make_node("Conv", ["x", "w"], ["y"])], {"x": [1, 4, 8, 8]}, ["y"], {"w": (4, 4, 3, 3)})
    lc = layer_contexts(conv, input_shapes={"x": (1, 4, 8, 8)})[0]
    assert not GEMM.applies(lc)
    lc = _matmul_layer(mlp(), {"x": (32, 48)})
    monkeypatch.setenv("TRITON_INTERPRET", "0")
    assert not GEMM.applies(lc)


# -- on the GPU, at realistic shapes ------------------------------------------------------


@pytest.fixture(autouse=True)
def _float32_is_float32():
    """As a float32 build does: no TF32 in the cuBLAS/cuDNN reference nor in the kernels' configs."""
    saved = torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32
    torch.backends.cuda.matmul.allow_tf32 = torch.backends.cudnn.allow_tf32 = False
    yield
    torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32 = saved


def _gpu_check(model, shapes, precision, n_configs=8):
    lc = _matmul_layer(model, shapes, precision, device="cuda")
    assert GEMM.applies(lc)
    for config in GEMM.configs(lc)[:n_configs]:
        assert check_tactic(GEMM, lc, config) <= 0, config


@pytest.mark.gpu
@pytest.mark.parametrize("precision", ["fp16", "fp32", "bf16"])
def test_gpu_ffn_gelu(precision):
    _gpu_check(mlp("Gelu", 2048, 768, 3072), {"x": (2048, 768)}, precision)


@pytest.mark.gpu
@pytest.mark.parametrize("precision", ["fp16", "fp32"])
def test_gpu_ffn_down_projection_with_residual(precision):
    nodes = [helper.make_node("MatMul", ["x", "w"], ["h"]), helper.make_node("Add", ["h", "b"], ["h2"]),
             helper.make_node("Add", ["h2", "r"], ["y"])]
    model = _model(nodes, {"x": [8, 256, 3072], "r": [8, 256, 768]}, ["y"], {"w": (3072, 768), "b": (768,)})
    _gpu_check(model, {"x": (8, 256, 3072), "r": (8, 256, 768)}, precision)


@pytest.mark.gpu
@pytest.mark.parametrize("precision", ["fp16", "fp32"])
def test_gpu_batched_attention_like_product(precision):
    model = _model([helper.make_node("MatMul", ["q", "k"], ["y"])], {"q": [12, 128, 64], "k": [12, 64, 128]},
                   ["y"], {})
    _gpu_check(model, {"q": (12, 128, 64), "k": (12, 64, 128)}, precision)


@pytest.mark.gpu
def test_gpu_small_m_gemm_trans_b():
    node = helper.make_node("Gemm", ["x", "w", "c"], ["y"], transB=1)
    model = _model([node], {"x": [8, 1024]}, ["y"], {"w": (4096, 1024), "c": (4096,)})
    _gpu_check(model, {"x": (8, 1024)}, "fp16")


@pytest.mark.gpu
def test_gpu_runner_survives_cuda_graph_capture():
    lc = _matmul_layer(mlp("Relu", 512, 256, 512), {"x": (512, 256)}, "fp16", device="cuda")
    runner = GEMM.compile(lc, GEMM.configs(lc)[0])
    x = torch.randn(512, 256, device="cuda")
    assert_replay_matches_direct_call(runner, [x])
