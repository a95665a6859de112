"""Engine.run: numpy in/out, torch in/out, and typed errors for bad feeds."""

import numpy as np
import pytest
import torch

import tensorsmith
from tensorsmith.errors import InputError


@pytest.fixture
def engine(mlp_model):
    return tensorsmith.build(mlp_model)


def test_numpy_in_numpy_out(engine):
    out = engine.run({"x": np.zeros((3, 4), np.float32)})
    assert isinstance(out["y"], np.ndarray) and out["y"].shape == (3, 3)


def test_torch_in_torch_out(engine):
    x = torch.randn(2, 4)
    out = engine.run({"x": x})["y"]
    assert isinstance(out, torch.Tensor) and out.shape == (2, 3)
    np.testing.assert_allclose(out.numpy(), engine.run({"x": x.numpy()})["y"], rtol=1e-6)


def test_call_with_positional_input(engine):
    x = torch.randn(2, 4)
    torch.testing.assert_close(engine(x), engine.run({"x": x})["y"])


def test_wrong_name(engine):
    with pytest.raises(InputError, match="unknown input 'X'.*\\['x'\\]"):
        engine.run({"X": np.zeros((1, 4), np.float32)})


def test_missing_input(engine):
    with pytest.raises(InputError, match="missing input 'x'"):
        engine.run({})


def test_wrong_dtype(engine):
    with pytest.raises(InputError, match="'x' has dtype float64.*expects float32"):
        engine.run({"x": np.zeros((1, 4), np.float64)})


def test_wrong_rank(engine):
    with pytest.raises(InputError, match="'x' has shape \\[4\\].*rank 2"):
        engine.run({"x": np.zeros((4,), np.float32)})


def test_wrong_static_dim(engine):
    with pytest.raises(InputError, match="'x'.*dim 1 must be 4"):
        engine.run({"x": np.zeros((2, 5), np.float32)})


def test_not_a_tensor(engine):
    with pytest.raises(InputError, match="'x'.*list"):
        engine.run({"x": [[1.0, 2.0, 3.0, 4.0]]})


def test_symbols_must_agree_across_inputs():
    from onnx import TensorProto, helper

    g = helper.make_graph(
        [helper.make_node("Add", ["a", "b"], ["c"])], "g",
        [helper.make_tensor_value_info("a", TensorProto.FLOAT, ["N", 2]),
         helper.make_tensor_value_info("b", TensorProto.FLOAT, ["N", 2])],
        [helper.make_tensor_value_info("c", TensorProto.FLOAT, ["N", 2])],
    )
    e = tensorsmith.build(helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)]))
    with pytest.raises(InputError, match="'N'"):
        e.run({"a": np.zeros((2, 2), np.float32), "b": np.zeros((3, 2), np.float32)})


def test_runtime_failure_names_the_node():
    from onnx import TensorProto, helper

    from tensorsmith.errors import ExecutionError

    g = helper.make_graph(
        [helper.make_node("Reshape", ["x", "s"], ["y"], name="bad_reshape")], "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N"]),
         helper.make_tensor_value_info("s", TensorProto.INT64, [1])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)],
    )
    e = tensorsmith.build(helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)]))
    with pytest.raises(ExecutionError, match="bad_reshape"):
        e.run({"x": np.zeros(6, np.float32), "s": np.array([4], np.int64)})
