"""Importing ONNX models: types, shapes, external data, and the errors for bad models."""

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

import tensorsmith
from tensorsmith.errors import (
    InvalidGraphError,
    ModelLoadError,
    UnsupportedDTypeError,
    UnsupportedOpsetError,
    UnsupportedOperatorError,
)
from tensorsmith.ir import DType

from ..conftest import make_mlp_model, ort_run


def test_import_types_and_symbolic_batch(mlp_model):
    g = tensorsmith.import_onnx(mlp_model)
    assert [n.op_type for n in g.nodes] == ["MatMul", "Add", "Relu", "MatMul"]
    assert str(g.inputs[0].type) == "float32[N,4]"
    assert g.outputs[0].type.dtype is DType.FLOAT32
    assert set(g.initializers) == {"w1", "b1", "w2"}


def test_cpu_engine_matches_onnxruntime(mlp_model):
    x = np.random.default_rng(1).standard_normal((5, 4)).astype(np.float32)
    (expected,) = ort_run(mlp_model, {"x": x})
    got = tensorsmith.build(mlp_model).run({"x": x})["y"]
    np.testing.assert_allclose(got, expected, rtol=1e-5, atol=1e-6)


def test_load_from_path_and_bytes(tmp_path, mlp_model):
    path = tmp_path / "mlp.onnx"
    onnx.save(mlp_model, path)
    x = np.ones((2, 4), np.float32)
    a = tensorsmith.build(str(path)).run({"x": x})["y"]
    b = tensorsmith.build(path.read_bytes()).run({"x": x})["y"]
    np.testing.assert_array_equal(a, b)


def test_external_data_loads(tmp_path, mlp_model):
    path = tmp_path / "ext.onnx"
    onnx.save(mlp_model, path, save_as_external_data=True, all_tensors_to_one_file=True,
              location="ext.weights", size_threshold=0)
    assert (tmp_path / "ext.weights").exists()
    x = np.ones((3, 4), np.float32)
    (expected,) = ort_run(make_mlp_model(), {"x": x})
    np.testing.assert_allclose(tensorsmith.build(str(path)).run({"x": x})["y"], expected, rtol=1e-5)


def test_missing_external_data_names_the_file(tmp_path, mlp_model):
    path = tmp_path / "ext.onnx"
    onnx.save(mlp_model, path, save_as_external_data=True, all_tensors_to_one_file=True,
              location="ext.weights", size_threshold=0)
    (tmp_path / "ext.weights").unlink()
    with pytest.raises(ModelLoadError, match="ext.onnx.*ext.weights|ext.weights"):
        tensorsmith.build(str(path))


def test_missing_file():
    with pytest.raises(ModelLoadError, match="nope.onnx.*no such file"):
        tensorsmith.build("nope.onnx")


def test_garbage_file(tmp_path):
    path = tmp_path / "garbage.onnx"
    path.write_bytes(b"\x00\xffthis is not a protobuf" * 10)
    with pytest.raises(ModelLoadError, match="garbage.onnx"):
        tensorsmith.build(str(path))


def test_truncated_file(tmp_path, mlp_model):
    data = mlp_model.SerializeToString()
    path = tmp_path / "cut.onnx"
    path.write_bytes(data[: len(data) // 2])
    with pytest.raises(ModelLoadError, match="cut.onnx"):
        tensorsmith.build(str(path))


def test_empty_file(tmp_path):
    path = tmp_path / "empty.onnx"
    path.write_bytes(b"")
    with pytest.raises(ModelLoadError, match="empty.onnx.*no graph"):
        tensorsmith.build(str(path))


def test_undefined_input_names_node_and_value():
    g = helper.make_graph(
        [helper.make_node("Relu", ["ghost"], ["y"], name="act")], "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2])],
    )
    with pytest.raises(InvalidGraphError, match="'act'.*'ghost' is not defined"):
        tensorsmith.build(helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)]))


def test_missing_initializer_names_it(mlp_model):
    del mlp_model.graph.initializer[0]  # w1
    with pytest.raises(InvalidGraphError, match="'fc1'.*'w1'"):
        tensorsmith.build(mlp_model)


def test_output_not_produced():
    g = helper.make_graph(
        [helper.make_node("Relu", ["x"], ["y"])], "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2])],
        [helper.make_tensor_value_info("z", TensorProto.FLOAT, [2])],
    )
    with pytest.raises(InvalidGraphError, match="'z'"):
        tensorsmith.build(helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)]))


def test_double_assignment_rejected():
    g = helper.make_graph(
        [helper.make_node("Relu", ["x"], ["y"], name="a"), helper.make_node("Neg", ["x"], ["y"], name="b")], "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2])],
    )
    with pytest.raises(InvalidGraphError, match="'b'.*'y'"):
        tensorsmith.build(helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)]))


@pytest.mark.parametrize("version", [0, 999])
def test_unknown_opset(mlp_model, version):
    mlp_model.opset_import[0].version = version
    with pytest.raises(UnsupportedOpsetError, match=f"version {version}.*supported"):
        tensorsmith.build(mlp_model)


def test_unsupported_operator_names_op_domain_opset_node():
    g = helper.make_graph(
        [helper.make_node("FancyOp", ["x"], ["y"], name="fancy1", domain="com.example")], "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2])],
    )
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17), helper.make_opsetid("com.example", 3)])
    with pytest.raises(UnsupportedOperatorError) as e:
        tensorsmith.build(m)
    assert (e.value.op_type, e.value.domain, e.value.opset, e.value.node) == ("FancyOp", "com.example", 3, "fancy1")
    assert "com.example::FancyOp (opset 3)" in str(e.value)


def test_string_input_is_a_typed_error():
    g = helper.make_graph(
        [helper.make_node("Identity", ["s"], ["t"])], "g",
        [helper.make_tensor_value_info("s", TensorProto.STRING, [2])],
        [helper.make_tensor_value_info("t", TensorProto.STRING, [2])],
    )
    with pytest.raises(UnsupportedDTypeError, match="STRING.*'s'"):
        tensorsmith.build(helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)]))


def test_initializer_listed_as_input_is_a_weight():
    w = numpy_helper.from_array(np.full((2,), 3.0, np.float32), "w")
    g = helper.make_graph(
        [helper.make_node("Mul", ["x", "w"], ["y"])], "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2]),
         helper.make_tensor_value_info("w", TensorProto.FLOAT, [2])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2])],
        initializer=[w],
    )
    e = tensorsmith.build(helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)]))
    assert [s.name for s in e.inputs] == ["x"]
    np.testing.assert_array_equal(e.run({"x": np.ones(2, np.float32)})["y"], [3.0, 3.0])


def test_shape_subgraph_is_inferred_statically():
    """Shape -> Gather -> Unsqueeze -> Concat -> Reshape gives a static reshape target."""
    nodes = [
        helper.make_node("Shape", ["x"], ["s"]),
        helper.make_node("Gather", ["s", "i0"], ["d0"], axis=0),
        helper.make_node("Unsqueeze", ["d0", "ax"], ["d0u"]),
        helper.make_node("Concat", ["d0u", "minus1"], ["shape"], axis=0),
        helper.make_node("Reshape", ["x", "shape"], ["y"]),
    ]
    inits = [
        numpy_helper.from_array(np.array(0, np.int64), "i0"),
        numpy_helper.from_array(np.array([0], np.int64), "ax"),
        numpy_helper.from_array(np.array([-1], np.int64), "minus1"),
    ]
    g = helper.make_graph(
        nodes, "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 3, 4])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)], initializer=inits,
    )
    graph = tensorsmith.import_onnx(helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)]))
    assert graph.outputs[0].type.shape == (2, 12)
