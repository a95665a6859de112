"""Shared test helpers: small ONNX models built in code, and the GPU marker."""

from __future__ import annotations

import os

import torch

# Without a GPU, generated Triton kernels run under Triton's interpreter. It must be chosen
# before any kernel module is imported, so it is set here, for the whole session.
if not torch.cuda.is_available():
    os.environ.setdefault("TRITON_INTERPRET", "1")

import numpy as np  # noqa: E402
import onnx  # noqa: E402
import pytest  # noqa: E402
from onnx import TensorProto, helper  # noqa: E402


def pytest_collection_modifyitems(config, items):
    if torch.cuda.is_available():
        return
    skip = pytest.mark.skip(reason="needs a CUDA GPU")
    for item in items:
        if "gpu" in item.keywords:
            item.add_marker(skip)


def make_mlp_model(opset: int = 17, batch="N") -> onnx.ModelProto:
    """x[N,4] -> MatMul(W) + b -> Relu -> MatMul(W2) -> Softmax-free logits y[N,3]."""
    rng = np.random.default_rng(0)
    w1 = onnx.numpy_helper.from_array(rng.standard_normal((4, 8)).astype(np.float32), "w1")
    b1 = onnx.numpy_helper.from_array(rng.standard_normal((8,)).astype(np.float32), "b1")
    w2 = onnx.numpy_helper.from_array(rng.standard_normal((8, 3)).astype(np.float32), "w2")
    nodes = [
        helper.make_node("MatMul", ["x", "w1"], ["h0"], name="fc1"),
        helper.make_node("Add", ["h0", "b1"], ["h1"], name="bias1"),
        helper.make_node("Relu", ["h1"], ["h2"], name="relu1"),
        helper.make_node("MatMul", ["h2", "w2"], ["y"], name="fc2"),
    ]
    g = helper.make_graph(
        nodes, "mlp",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [batch, 4])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [batch, 3])],
        initializer=[w1, b1, w2],
    )
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", opset)])


@pytest.fixture
def mlp_model() -> onnx.ModelProto:
    return make_mlp_model()


def ort_run(model: onnx.ModelProto, feeds: dict) -> list[np.ndarray]:
    import onnxruntime as ort

    sess = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    return sess.run(None, feeds)


def assert_replay_matches_direct_call(runner, inputs: list) -> list:
    """Capture one call of a tactic's `runner` in a CUDA graph (after a warm-up call that does
    the lazy work capture forbids), replay it, and check it equals a direct call. Returns the
    graph's outputs."""
    runner(inputs)
    torch.cuda.synchronize()
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        out = runner(inputs)
    graph.replay()
    torch.cuda.synchronize()
    torch.testing.assert_close(out[0], runner(inputs)[0])
    return out
