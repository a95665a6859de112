"""Refit: new weights by their original names change the outputs to those of the new model."""

import numpy as np
import onnx
import pytest
import torch
from onnx import TensorProto, helper

import tensorsmith
from tensorsmith.errors import RefitError
from tests.conftest import make_mlp_model
from tests.runtime.layered import build_layered


def _conv_bn_model(w: np.ndarray, gamma: np.ndarray) -> onnx.ModelProto:
    c = w.shape[0]
    inits = [onnx.numpy_helper.from_array(a.astype(np.float32), n) for n, a in [
        ("w", w), ("b", np.zeros(c)), ("gamma", gamma), ("beta", np.full(c, 0.1)), ("mean", np.full(c, 0.2)),
        ("var", np.full(c, 2.0))]]
    nodes = [helper.make_node("Conv", ["x", "w", "b"], ["c"], pads=[1, 1, 1, 1], name="conv"),
             helper.make_node("BatchNormalization", ["c", "gamma", "beta", "mean", "var"], ["n"], name="bn"),
             helper.make_node("Relu", ["n"], ["y"], name="relu")]
    g = helper.make_graph(nodes, "convbn", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 2, 5, 5])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, c, 5, 5])], initializer=inits)
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])


def _new_mlp_weights():
    rng = np.random.default_rng(7)
    return {"w1": rng.standard_normal((4, 8)).astype(np.float32), "w2": rng.standard_normal((8, 3)).astype(np.float32)}


def _mlp_with(weights) -> onnx.ModelProto:
    m = make_mlp_model()
    for t in m.graph.initializer:
        if t.name in weights:
            t.CopyFrom(onnx.numpy_helper.from_array(weights[t.name], t.name))
    return m


@pytest.mark.parametrize("kind", ["op_by_op", "layers"])
def test_refit_changes_outputs_to_the_new_weights(kind):
    engine = tensorsmith.build(make_mlp_model()) if kind == "op_by_op" else build_layered(make_mlp_model(), input_shapes={"x": (3, 4)})
    x = np.random.default_rng(0).standard_normal((3, 4)).astype(np.float32)
    ctx = engine.create_execution_context()
    before = ctx.run_numpy({"x": x})["y"]
    new = _new_mlp_weights()
    refitter = tensorsmith.Refitter(engine)
    assert refitter.refittable == ["b1", "w1", "w2"]
    refitter.set_weights(new)
    assert refitter.refit()
    want = tensorsmith.build(_mlp_with(new)).run({"x": x})["y"]
    np.testing.assert_allclose(ctx.run_numpy({"x": x})["y"], want, rtol=1e-5, atol=1e-6)
    assert not np.allclose(before, want)
    engine.refit({"w1": torch.zeros(4, 8)})  # torch tensors too; the one-call form
    b1 = onnx.numpy_helper.to_array(make_mlp_model().graph.initializer[1])
    np.testing.assert_allclose(engine.run({"x": x})["y"], np.tile(np.maximum(b1, 0) @ new["w2"], (3, 1)),
                               rtol=1e-5, atol=1e-6)


def test_refit_survives_save_and_load(tmp_path):
    engine = tensorsmith.build(make_mlp_model())
    engine.save(tmp_path / "m.tsmith")
    loaded = tensorsmith.load(tmp_path / "m.tsmith")
    new = _new_mlp_weights()
    loaded.refit(new)
    x = np.ones((2, 4), np.float32)
    np.testing.assert_allclose(loaded.run({"x": x})["y"], tensorsmith.build(_mlp_with(new)).run({"x": x})["y"], rtol=1e-5)


def test_wrong_shape_dtype_or_name_is_typed():
    engine = tensorsmith.build(make_mlp_model())
    with pytest.raises(RefitError, match=r"'w1' is float32\[8, 4\], the engine's is float32\[4, 8\]"):
        engine.refit({"w1": np.zeros((8, 4), np.float32)})
    with pytest.raises(RefitError, match=r"'w1' is float64\[4, 8\]"):
        engine.refit({"w1": np.zeros((4, 8), np.float64)})
    with pytest.raises(RefitError, match="no weight named 'w9'.*'w1'"):
        engine.refit({"w9": np.zeros(1, np.float32)})


def test_folded_weights_are_refittable_only_when_built_refittable():
    rng = np.random.default_rng(3)
    w, gamma = rng.standard_normal((3, 2, 3, 3)), rng.uniform(0.5, 1.5, 3)
    x = rng.standard_normal((1, 2, 5, 5)).astype(np.float32)
    folded = tensorsmith.build(_conv_bn_model(w, gamma))
    with pytest.raises(RefitError, match="'gamma' cannot be refit: the build folded it.*refittable=True"):
        folded.refit({"gamma": np.ones(3, np.float32)})
    engine = tensorsmith.build(_conv_bn_model(w, gamma), refittable=True)
    assert {"w", "gamma", "beta", "mean", "var"} <= set(engine.refittable_weights)
    w2, gamma2 = rng.standard_normal((3, 2, 3, 3)), rng.uniform(0.5, 1.5, 3)
    engine.refit({"w": w2.astype(np.float32), "gamma": gamma2.astype(np.float32)})
    want = tensorsmith.build(_conv_bn_model(w2, gamma2)).run({"x": x})["y"]
    np.testing.assert_allclose(engine.run({"x": x})["y"], want, rtol=1e-4, atol=1e-5)


@pytest.mark.gpu
def test_refit_on_gpu_drops_captured_graphs():
    engine = tensorsmith.build(make_mlp_model(), target="cuda", input_shapes={"x": (3, 4)})
    ctx = engine.create_execution_context()
    x = np.random.default_rng(0).standard_normal((3, 4)).astype(np.float32)
    ctx.run_numpy({"x": x})
    new = _new_mlp_weights()
    engine.refit(new)
    want = tensorsmith.build(_mlp_with(new)).run({"x": x})["y"]
    np.testing.assert_allclose(ctx.run_numpy({"x": x})["y"], want, rtol=1e-3, atol=1e-3)
