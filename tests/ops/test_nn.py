"""Conv, pooling, matrix products, dropout and softmax against onnxruntime: old and new opsets,
asymmetric/auto padding, ceil mode, MaxPool indices, integer and half dtypes, and the output
types that shape inference gives with symbolic batch dims."""

from __future__ import annotations

import numpy as np
import onnx
import pytest
import torch

import tensorsmith
from tensorsmith.ir import DType
from tensorsmith.ops.interpreter import run_graph

from ..conftest import ort_run
from .models import assert_matches_ort, one_node, out_type

RNG = np.random.default_rng(0)


def run(model: onnx.ModelProto, inputs: dict) -> list[np.ndarray]:
    """Run through import + the reference interpreter (the semantics every target must match)."""
    graph = tensorsmith.import_onnx(model)
    feeds = {k: torch.from_numpy(np.ascontiguousarray(v).reshape(v.shape)) for k, v in inputs.items()}
    return [t.numpy() for t in run_graph(graph, feeds)]


def check_vs_ort(op, inputs, attrs=None, opset=18, rtol=1e-5, atol=1e-5, n_outputs=1, consts=None):
    model = one_node(op, inputs, attrs, opset, n_outputs=n_outputs, consts=consts)
    got, want = run(model, inputs), ort_run(model, inputs)
    assert len(got) == len(want) == n_outputs
    assert_matches_ort(got, want, op, rtol, atol)
    return got


def randn(*shape, dtype=np.float32):
    return RNG.standard_normal(shape).astype(dtype)


# -- Conv / ConvTranspose -------------------------------------------------------------------


@pytest.mark.parametrize("attrs", [
    {},
    {"pads": [1, 0, 2, 1], "strides": [2, 1]},
    {"auto_pad": "SAME_UPPER", "strides": [2, 2]},
    {"auto_pad": "SAME_LOWER", "strides": [2, 2]},
    {"auto_pad": "VALID", "dilations": [2, 2]},
    {"group": 2, "pads": [1, 1, 1, 1]},
])
def test_conv_2d_vs_ort(attrs):
    w = randn(4, 4 // attrs.get("group", 1), 3, 3)
    check_vs_ort("Conv", {"x": randn(2, 4, 7, 8)}, attrs, opset=11, consts={"w": w, "b": randn(4)}, rtol=1e-4)


def test_conv_1d_3d_and_no_kernel_shape_attr():
    check_vs_ort("Conv", {"x": randn(1, 2, 9)}, {"pads": [0, 2], "strides": [2]}, consts={"w": randn(3, 2, 3)},
                 rtol=1e-4)
    check_vs_ort("Conv", {"x": randn(1, 2, 5, 4, 6)}, {"kernel_shape": [3, 2, 3], "pads": [1, 0, 1, 1, 1, 0]},
                 consts={"w": randn(2, 2, 3, 2, 3)}, rtol=1e-4)


def test_conv_infer_keeps_symbolic_batch_and_same_dims():
    model = one_node("Conv", {"x": randn(1, 3, 8, 8)}, {"pads": [1, 1, 1, 1]}, consts={"w": randn(5, 3, 3, 3)},
                     shapes={"x": ["N", 3, "H", "W"]})
    assert out_type(model) == tensorsmith.ir.TensorType(DType.FLOAT32, ("N", 5, "H", "W"))
    model = one_node("Conv", {"x": randn(1, 3, 8, 8)}, {"strides": [2, 2]}, consts={"w": randn(5, 3, 3, 3)},
                     shapes={"x": ["N", 3, 9, 8]})
    assert out_type(model).shape == ("N", 5, 4, 3)


@pytest.mark.parametrize("attrs", [
    {"strides": [2, 2]},
    {"strides": [3, 2], "output_padding": [1, 1], "pads": [1, 0, 2, 1]},
    {"strides": [2, 2], "output_shape": [10, 9]},
    {"strides": [2, 2], "auto_pad": "SAME_UPPER"},
    {"strides": [2, 2], "auto_pad": "SAME_LOWER"},
    {"group": 2, "dilations": [2, 1]},
])
def test_conv_transpose_vs_ort(attrs):
    g = attrs.get("group", 1)
    check_vs_ort("ConvTranspose", {"x": randn(1, 4, 4, 4)}, attrs, opset=11,
                 consts={"w": randn(4, 3, 3, 3), "b": randn(3 * g)}, rtol=1e-4)


def test_conv_transpose_infer():
    model = one_node("ConvTranspose", {"x": randn(1, 2, 5, 5)}, {"strides": [2, 2], "pads": [1, 1, 1, 1]},
                     consts={"w": randn(2, 6, 3, 3)}, shapes={"x": ["N", 2, 5, 5]})
    assert out_type(model).shape == ("N", 6, 9, 9)


# -- pooling ----------------------------------------------------------------------------------


@pytest.mark.parametrize("attrs", [
    {"kernel_shape": [3, 3], "strides": [2, 2], "ceil_mode": 1},
    {"kernel_shape": [3, 2], "pads": [1, 0, 2, 1], "strides": [2, 1]},
    {"kernel_shape": [2, 2], "auto_pad": "SAME_UPPER", "strides": [2, 2]},
    {"kernel_shape": [3, 3], "auto_pad": "SAME_LOWER"},
    {"kernel_shape": [2, 2], "dilations": [2, 2], "pads": [1, 1, 1, 1]},
    {"kernel_shape": [3, 3], "pads": [1, 1, 1, 1], "storage_order": 1},
])
def test_max_pool_values_and_indices_vs_ort(attrs):
    x = randn(2, 3, 7, 6)
    check_vs_ort("MaxPool", {"x": x}, attrs, opset=12, n_outputs=2)


def test_max_pool_3d_indices_and_int8():
    check_vs_ort("MaxPool", {"x": randn(1, 2, 5, 4, 6)}, {"kernel_shape": [2, 3, 2], "pads": [0, 1, 1, 1, 0, 0]},
                 opset=12, n_outputs=2)
    xi = RNG.integers(-128, 127, (1, 2, 6, 5)).astype(np.int8)
    y, idx = check_vs_ort("MaxPool", {"x": xi}, {"kernel_shape": [2, 2], "strides": [2, 1], "dilations": [1, 2]},
                          opset=12, n_outputs=2)
    assert y.dtype == np.int8 and idx.dtype == np.int64


def test_max_pool_opset7_float16():
    x = randn(1, 2, 5, 5, dtype=np.float16)
    (y,) = check_vs_ort("MaxPool", {"x": x}, {"kernel_shape": [2, 2], "pads": [1, 1, 0, 0]}, opset=7)
    assert y.dtype == np.float16


@pytest.mark.parametrize("attrs", [
    {"kernel_shape": [3, 3], "strides": [2, 2], "ceil_mode": 1},
    {"kernel_shape": [3, 3], "strides": [2, 2], "ceil_mode": 1, "pads": [1, 1, 1, 1], "count_include_pad": 1},
    {"kernel_shape": [3, 2], "pads": [1, 0, 2, 1], "count_include_pad": 1},
    {"kernel_shape": [3, 2], "pads": [1, 0, 2, 1]},
    {"kernel_shape": [2, 2], "auto_pad": "SAME_LOWER"},
    {"kernel_shape": [2, 2], "dilations": [2, 1], "pads": [1, 1, 1, 1], "count_include_pad": 1},
])
def test_average_pool_vs_ort(attrs):
    check_vs_ort("AveragePool", {"x": randn(2, 3, 7, 6)}, attrs, opset=19, rtol=1e-5)


def test_average_pool_old_opset_and_lp_pool():
    check_vs_ort("AveragePool", {"x": randn(1, 2, 6)}, {"kernel_shape": [3], "pads": [1, 2]}, opset=7)
    check_vs_ort("LpPool", {"x": randn(1, 2, 6, 5)}, {"kernel_shape": [2, 3], "p": 3, "pads": [1, 0, 0, 1]},
                 opset=11, rtol=1e-4)


def test_global_pools_vs_ort():
    x = randn(2, 3, 4, 5)
    for op in ("GlobalAveragePool", "GlobalMaxPool"):
        check_vs_ort(op, {"x": x}, opset=11)
    check_vs_ort("GlobalLpPool", {"x": x}, {"p": 3}, opset=11, rtol=1e-4)
    model = one_node("GlobalAveragePool", {"x": x}, shapes={"x": ["N", 3, "H", "W"]})
    assert out_type(model).shape == ("N", 3, 1, 1)


def test_pool_infer_symbolic_and_indices_dtype():
    model = one_node("MaxPool", {"x": randn(1, 3, 8, 8)}, {"kernel_shape": [2, 2], "strides": [2, 2]},
                     n_outputs=2, shapes={"x": ["N", 3, 8, 8]})
    assert out_type(model, 0) == tensorsmith.ir.TensorType(DType.FLOAT32, ("N", 3, 4, 4))
    assert out_type(model, 1) == tensorsmith.ir.TensorType(DType.INT64, ("N", 3, 4, 4))


def test_max_unpool_round_trip():
    x = randn(1, 1, 4, 4)
    model = one_node("MaxPool", {"x": x}, {"kernel_shape": [2, 2], "strides": [2, 2]}, opset=12, n_outputs=2)
    y, idx = run(model, {"x": x})
    check_vs_ort("MaxUnpool", {"y": y, "i": idx}, {"kernel_shape": [2, 2], "strides": [2, 2]}, opset=11)


def test_max_roi_pool_vs_ort():
    x = randn(2, 3, 8, 9)
    rois = np.array([[0, 1, 1, 6, 5], [1, 0, 2, 8, 7], [0, 2.6, 0.4, 4.5, 3]], dtype=np.float32)
    check_vs_ort("MaxRoiPool", {"x": x, "rois": rois}, {"pooled_shape": [2, 3], "spatial_scale": 1.0}, opset=11)


# -- matrix products --------------------------------------------------------------------------


@pytest.mark.parametrize("sa,sb", [((3,), (3,)), ((2, 3), (3,)), ((3,), (2, 3, 4)), ((2, 1, 3, 4), (5, 4, 2))])
def test_matmul_shapes_vs_ort(sa, sb):
    check_vs_ort("MatMul", {"a": randn(*sa), "b": randn(*sb)}, opset=13, rtol=1e-5)


@pytest.mark.parametrize("dtype", [np.int32, np.int64, np.uint32, np.uint64])
def test_matmul_integer_is_exact(dtype):
    big = 2**20 if dtype in (np.int64, np.uint64) else 2**8
    a = RNG.integers(0, big, (2, 3, 4)).astype(dtype)
    b = RNG.integers(0, big, (4, 5)).astype(dtype)
    (y,) = run(one_node("MatMul", {"a": a, "b": b}, opset=13), {"a": a, "b": b})
    assert y.dtype == dtype
    np.testing.assert_array_equal(y, np.matmul(a, b))


def test_matmul_infer_symbolic_batch():
    model = one_node("MatMul", {"a": randn(2, 3, 4), "b": randn(4, 5)}, shapes={"a": ["B", "S", 4]})
    assert out_type(model) == tensorsmith.ir.TensorType(DType.FLOAT32, ("B", "S", 5))
    model = one_node("MatMul", {"a": randn(4), "b": randn(2, 4, 5)}, shapes={"b": ["B", 4, 5]})
    assert out_type(model).shape == ("B", 5)


@pytest.mark.parametrize("attrs,c_shape", [
    ({}, None), ({"transA": 1, "alpha": 0.5}, (5,)), ({"transB": 1, "beta": 2.0}, (3, 1)), ({"beta": 0.0}, ()),
])
def test_gemm_vs_ort(attrs, c_shape):
    a = randn(4, 3) if attrs.get("transA") else randn(3, 4)
    b = randn(5, 4) if attrs.get("transB") else randn(4, 5)
    inputs = {"a": a, "b": b}
    if c_shape is not None:
        inputs["c"] = randn(*c_shape)
    check_vs_ort("Gemm", inputs, attrs, opset=11, rtol=1e-5)


def test_gemm_int_and_infer():
    a = RNG.integers(-50, 50, (3, 4)).astype(np.int32)
    b = RNG.integers(-50, 50, (5, 4)).astype(np.int32)
    c = RNG.integers(-50, 50, (5,)).astype(np.int32)
    (y,) = run(one_node("Gemm", {"a": a, "b": b, "c": c}, {"transB": 1}, opset=13), {"a": a, "b": b, "c": c})
    np.testing.assert_array_equal(y, a @ b.T + c)
    model = one_node("Gemm", {"a": a, "b": b}, {"transB": 1}, shapes={"a": ["N", 4]})
    assert out_type(model) == tensorsmith.ir.TensorType(DType.INT32, ("N", 5))


@pytest.mark.parametrize("eq,shapes", [
    ("bij,bjk->bik", [(2, 3, 4), (2, 4, 5)]), ("ii->i", [(3, 3)]), ("...ij->...ji", [(2, 3, 4)]),
    ("ij,ij", [(3, 4), (3, 4)]), ("i j -> j i", [(2, 3)]),
])
def test_einsum_vs_ort(eq, shapes):
    inputs = {f"x{i}": randn(*s) for i, s in enumerate(shapes)}
    check_vs_ort("Einsum", inputs, {"equation": eq}, opset=12, rtol=1e-5)


def test_einsum_int64_exact():
    a = RNG.integers(-1000, 1000, (3, 4)).astype(np.int64)
    b = RNG.integers(-1000, 1000, (4,)).astype(np.int64)
    (y,) = run(one_node("Einsum", {"a": a, "b": b}, {"equation": "ij,j->i"}), {"a": a, "b": b})
    np.testing.assert_array_equal(y, a @ b)


# -- dropout ----------------------------------------------------------------------------------


def test_dropout_inference_is_identity_with_true_mask():
    x = randn(3, 4)
    y, mask = run(one_node("Dropout", {"x": x}, opset=13, n_outputs=2), {"x": x})
    np.testing.assert_array_equal(y, x)
    assert mask.dtype == np.bool_ and mask.all()
    # Opset 7-11 keep the ratio as an attribute; the importer turns it into an input.
    (y,) = check_vs_ort("Dropout", {"x": x}, {"ratio": 0.3}, opset=10)
    np.testing.assert_array_equal(y, x)


def test_dropout_training_seeded_matches_onnx_reference():
    from onnx.reference import ReferenceEvaluator

    x = randn(3, 4, 5)
    consts = {"r": np.array(0.25, dtype=np.float32), "t": np.array(True)}
    model = one_node("Dropout", {"x": x}, {"seed": 3}, opset=13, n_outputs=2, consts=consts)
    y, mask = run(model, {"x": x})
    want_y, want_mask = ReferenceEvaluator(model).run(None, {"x": x})
    np.testing.assert_array_equal(mask, want_mask)
    np.testing.assert_allclose(y, want_y, rtol=1e-6)


# -- softmax family ---------------------------------------------------------------------------


@pytest.mark.parametrize("op", ["Softmax", "LogSoftmax", "Hardmax"])
@pytest.mark.parametrize("opset,axis", [(11, 1), (11, 0), (11, -1), (13, 1), (13, 0)])
def test_softmax_family_opsets_vs_ort(op, opset, axis):
    x = randn(2, 3, 4)
    x[0, 0, :2] = 5.0  # a tie for Hardmax: the first maximum wins
    check_vs_ort(op, {"x": x}, {"axis": axis}, opset=opset, rtol=1e-5, atol=1e-6)


def test_softmax_default_axis_differs_before_13():
    x = randn(2, 3, 4)
    y11 = run(one_node("Softmax", {"x": x}, opset=11), {"x": x})[0]
    y13 = run(one_node("Softmax", {"x": x}, opset=13), {"x": x})[0]
    np.testing.assert_allclose(y11.reshape(2, 12).sum(1), 1.0, rtol=1e-5)
    np.testing.assert_allclose(y13.sum(-1), 1.0, rtol=1e-5)


def test_softmax_float16_dtype():
    x = randn(2, 5, dtype=np.float16)
    (y,) = check_vs_ort("Softmax", {"x": x}, opset=13, rtol=1e-3, atol=1e-3)
    assert y.dtype == np.float16
    model = one_node("Softmax", {"x": x}, opset=13, shapes={"x": ["N", 5]})
    assert out_type(model) == tensorsmith.ir.TensorType(DType.FLOAT16, ("N", 5))


def test_conv_bad_weight_rank_raises():
    model = one_node("Conv", {"x": randn(1, 2, 5, 5)}, {"kernel_shape": [2, 2]}, consts={"w": randn(3, 2, 3, 3)})
    with pytest.raises(tensorsmith.errors.TensorsmithError):
        run(model, {"x": randn(1, 2, 5, 5)})



