"""torch.cublas_linear with tail="triton": addmm (bias inside), then the rest of the Layer as
one Triton kernel; run on the CPU under the interpreter (the runner does not need CUDA)."""

from __future__ import annotations

import os

import torch

if not torch.cuda.is_available():
    os.environ["TRITON_INTERPRET"] = "1"

import numpy as np
import pytest

pytest.importorskip("triton")

from onnx import TensorProto, helper, numpy_helper

from tensorsmith.tactics.torch_ops import CublasLinearTactic
from tensorsmith.testing.layers import check_tactic, layer_contexts

T = CublasLinearTactic()
rng = np.random.default_rng(0)
K, N = 16, 24


@pytest.fixture(autouse=True)
def _triton_mode(request, monkeypatch):
    monkeypatch.setenv("TRITON_INTERPRET", "0" if request.node.get_closest_marker("gpu") else "1")


def _model(tail: str, shape=(2, 5, K)):
    # x goes through a Softmax first, so that in fp16 the input's Cast joins the Softmax's Layer
    nodes = [helper.make_node("Softmax", ["x"], ["sx"]),
             helper.make_node("MatMul", ["sx", "w"], ["m"]), helper.make_node("Add", ["m", "b"], ["h"])]
    inputs = [helper.make_tensor_value_info("x", TensorProto.FLOAT, list(shape))]
    if tail == "gelu_erf":
        nodes.append(helper.make_node("Gelu", ["h"], ["y"]))
    elif tail == "residual":
        inputs.append(helper.make_tensor_value_info("r", TensorProto.FLOAT, [*shape[:-1], N]))
        nodes.append(helper.make_node("Add", ["h", "r"], ["y"]))
    elif tail == "sigmoid_scale":
        nodes += [helper.make_node("Sigmoid", ["h"], ["s"]), helper.make_node("Mul", ["s", "c"], ["y"])]
    inits = [numpy_helper.from_array(rng.standard_normal((K, N)).astype(np.float32) * 0.3, "w"),
             numpy_helper.from_array(rng.standard_normal(N).astype(np.float32), "b"),
             numpy_helper.from_array(rng.standard_normal(N).astype(np.float32), "c")]
    g = helper.make_graph(nodes, "g", inputs, [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)],
                          initializer=inits)
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 20)])


def _layer(model, precision="fp32", device="cpu"):
    (lc,) = [lc for lc in layer_contexts(model, precision=precision, device=device) if lc.layer.kind == "matmul"]
    return lc


@pytest.mark.parametrize("tail", ["gelu_erf", "residual", "sigmoid_scale"])
@pytest.mark.parametrize("precision", ["fp32", "fp16"])
def test_matmul_tail_matches_the_reference(tail, precision):
    lc = _layer(_model(tail), precision)
    configs = [c for c in T.configs(lc) if c.get("tail") == "triton"]
    assert len(configs) == 1 and len(lc.nodes) >= 3
    assert check_tactic(T, lc, configs[0]) <= 0


def test_bias_only_layer_has_no_tail_config():
    g = helper.make_graph([helper.make_node("MatMul", ["x", "w"], ["m"]), helper.make_node("Add", ["m", "b"], ["y"])],
                          "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [3, K])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)],
                          initializer=[numpy_helper.from_array(np.ones((K, N), np.float32), "w"),
                                       numpy_helper.from_array(np.ones(N, np.float32), "b")])
    lc = _layer(helper.make_model(g, opset_imports=[helper.make_opsetid("", 20)]))
    assert T.configs(lc) == [{}]


@pytest.mark.gpu
@pytest.mark.parametrize("tail", ["gelu_erf", "residual"])
def test_gpu_matmul_tail_matches_the_reference(tail):
    lc = _layer(_model(tail, shape=(4, 197, K)), "fp16", device="cuda")
    assert T.applies(lc)
    config = next(c for c in T.configs(lc) if c.get("tail") == "triton")
    assert check_tactic(T, lc, config) <= 0


def _gelu_configs(lc):
    return [c for c in T.configs(lc) if c.get("gelu") == "tanh_approx"]


def test_erf_gelu_runs_in_the_cublaslt_epilogue_only_at_half_precision_outside_strict_builds():
    assert _gelu_configs(_layer(_model("gelu_erf"), "fp16")) == [{"gelu": "tanh_approx"}]
    assert _gelu_configs(_layer(_model("gelu_erf"), "fp32")) == []
    strict = _layer(_model("gelu_erf"), "fp16")
    strict.strict = True
    assert _gelu_configs(strict) == []
    assert _gelu_configs(_layer(_model("residual"), "fp16")) == []  # no GELU after the bias


def test_erf_gelu_in_the_epilogue_matches_the_reference():
    lc = _layer(_model("gelu_erf"), "fp16")
    assert check_tactic(T, lc, {"gelu": "tanh_approx"}) <= 0


@pytest.mark.gpu
def test_gpu_erf_gelu_in_the_epilogue_matches_erf_gelu_at_float16():
    lc = _layer(_model("gelu_erf", shape=(4, 197, K)), "fp16", device="cuda")
    assert T.applies(lc) and {"gelu": "tanh_approx"} in T.configs(lc)
    assert check_tactic(T, lc, {"gelu": "tanh_approx"}) <= 0
    x = torch.randn(4, 197, K, device="cuda").half()
    mm, w, bias, act, consumed = T._parts(lc, erf_as_tanh=True)
    assert act is not None and consumed == 3
    b = lc.weight(bias)
    (got,) = T.build(lc, {"gelu": "tanh_approx"})([torch.softmax(x.float(), -1).half()])
    h = torch.softmax(x.float(), -1).half().float() @ w.float() + b.float()
    want = torch.nn.functional.gelu(h)
    # 4.7e-4 between the forms, plus float16 rounding of h and of the output
    assert (got.float() - want).abs().max() <= 4.7e-4 + 2e-3 * (1 + want.abs().max())
