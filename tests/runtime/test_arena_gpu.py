"""The arena on the GPU: a half-precision conv + MLP engine, replayed as CUDA graphs, gives the
same results with activations bound to the arena as with every runner allocating."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from onnx import TensorProto, helper, numpy_helper

import tensorsmith
from tensorsmith.runtime import DeviceMemory

from ..conftest import ort_run

pytestmark = pytest.mark.gpu
SHAPE = (4, 8, 16, 16)


def conv_mlp_model():
    """Conv+Relu -> Conv + residual + Relu -> MaxPool -> Conv+Swish -> GlobalAveragePool -> Flatten
    -> MatMul+bias+Gelu -> LayerNorm -> MatMul+bias."""
    rng = np.random.default_rng(0)

    def w(name, *shape, scale=0.2):
        return numpy_helper.from_array((rng.standard_normal(shape) * scale).astype(np.float32), name)

    c = SHAPE[1]
    nodes = [("Conv", ["x", "w1", "b1"], "c1", {"pads": [1, 1, 1, 1]}), ("Relu", ["c1"], "r1", {}),
             ("Conv", ["r1", "w2", "b2"], "c2", {"pads": [1, 1, 1, 1]}), ("Add", ["c2", "x"], "a2", {}),
             ("Relu", ["a2"], "r2", {}),
             ("MaxPool", ["r2"], "p", {"kernel_shape": [3, 3], "strides": [2, 2], "pads": [1, 1, 1, 1]}),
             ("Conv", ["p", "w3", "b3"], "c3", {"pads": [1, 1, 1, 1]}), ("Sigmoid", ["c3"], "s3", {}),
             ("Mul", ["c3", "s3"], "m3", {}), ("GlobalAveragePool", ["m3"], "g", {}), ("Flatten", ["g"], "f", {}),
             ("MatMul", ["f", "fw1"], "h", {}), ("Add", ["h", "fb1"], "hb", {}), ("Gelu", ["hb"], "hg", {}),
             ("LayerNormalization", ["hg", "ln_g", "ln_b"], "ln", {"axis": -1}),
             ("MatMul", ["ln", "fw2"], "o", {}), ("Add", ["o", "fb2"], "y", {})]
    inits = [w("w1", c, c, 3, 3), w("b1", c), w("w2", c, c, 3, 3), w("b2", c), w("w3", 32, c, 3, 3), w("b3", 32),
             w("fw1", 32, 64), w("fb1", 64), w("ln_g", 64, scale=1.0), w("ln_b", 64), w("fw2", 64, 10), w("fb2", 10)]
    g = helper.make_graph([helper.make_node(op, ins, [out], name=out, **attrs) for op, ins, out, attrs in nodes],
                          "conv_mlp", [helper.make_tensor_value_info("x", TensorProto.FLOAT, list(SHAPE))],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, [SHAPE[0], 10])], initializer=inits)
    model = helper.make_model(g, opset_imports=[helper.make_opsetid("", 20)])
    model.ir_version = min(model.ir_version, 10)  # what the installed onnxruntime reads
    return model


@pytest.fixture(scope="module")
def model():
    return conv_mlp_model()


@pytest.fixture(scope="module")
def engine(model):
    return tensorsmith.build(model, target="cuda", precision="fp16", input_shapes={"x": SHAPE})


def _x(seed):
    return torch.from_numpy(np.random.default_rng(seed).standard_normal(SHAPE).astype(np.float32)).cuda()


def test_fp16_cuda_graphs_agree_with_the_arena_on_and_off(engine, model):
    assert engine.cuda_graphs
    on, off = engine.create_execution_context(), engine.create_execution_context(arena=False)
    for seed in range(3):  # replays rewrite the arena with new data
        x = _x(seed)
        a, b = on.execute({"x": x})["y"].clone(), off.execute({"x": x})["y"].clone()
        torch.testing.assert_close(a, b, rtol=1e-3, atol=1e-3)
        want = ort_run(model, {"x": x.cpu().numpy()})[0]
        np.testing.assert_allclose(a.float().cpu().numpy(), want, rtol=5e-2, atol=5e-2)
    assert on._arena.tensor is not None and on._arena.tensor.is_cuda and off._arena is None


def test_the_arena_is_used(engine):
    assert engine.plan.memory["arena_bound_bytes"] > 0
    engine.run({"x": _x(0)})
    plan = engine.executor_for(None, {"x": SHAPE}).arena_plan
    assert plan.memory.bound.naive_bytes > 0 and plan.arena_bytes > 0
    assert plan.memory.summary()["arena_bound_bytes"] == engine.plan.memory["arena_bound_bytes"]


def test_without_cuda_graphs_too(model):
    engine = tensorsmith.build(model, target="cuda", precision="fp16", input_shapes={"x": SHAPE}, cuda_graphs=False)
    on, off = engine.create_execution_context(), engine.create_execution_context(arena=False)
    for seed in range(3):
        x = _x(seed)
        torch.testing.assert_close(on.execute({"x": x})["y"], off.execute({"x": x})["y"], rtol=1e-3, atol=1e-3)
    assert engine.executor_for(None, {"x": SHAPE}).arena_plan.arena_bytes > 0


def test_contexts_share_an_arena_only_through_device_memory(engine):
    memory = DeviceMemory()
    a, b = engine.create_execution_context(memory), engine.create_execution_context(memory)
    c = engine.create_execution_context()
    assert a._arena is b._arena is memory.arena and c._arena is not a._arena
    x = _x(1)
    ya = a.execute({"x": x})["y"].clone()
    torch.testing.assert_close(b.execute({"x": x})["y"], ya)
    torch.testing.assert_close(c.execute({"x": x})["y"], ya)
