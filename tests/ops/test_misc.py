"""NonMaxSuppression, Det and the random ops against onnxruntime, numpy and statistics."""

from __future__ import annotations

import numpy as np
import pytest
from onnx import TensorProto, helper

import tensorsmith
from tensorsmith.errors import ExecutionError
from tensorsmith.ir import DType, TensorType

from ..conftest import ort_run
from . import models
from .models import engine_output

RNG = np.random.default_rng(0)


def one_node(op, inputs, attrs=None, opset=22, consts=None, out_dtype=TensorProto.FLOAT, input_names=None):
    """models.one_node with a float output at opset 22 unless told."""
    return models.one_node(op, inputs, attrs, opset, consts=consts, out_dtype=out_dtype, input_names=input_names)


# -- NonMaxSuppression ---------------------------------------------------------------------


def _random_boxes(batch, n, center):
    """Clustered boxes, so that many pairs overlap; some corners flipped in the corner format."""
    xy = RNG.uniform(0, 10, (batch, n, 2))
    wh = RNG.uniform(0.5, 4, (batch, n, 2))
    if center:
        return np.concatenate([xy, wh], -1).astype(np.float32)
    boxes = np.concatenate([xy[..., ::-1], (xy + wh)[..., ::-1]], -1)  # [y1, x1, y2, x2]
    flip = RNG.random((batch, n)) < 0.3
    boxes[flip] = boxes[flip][:, [2, 3, 0, 1]]
    return boxes.astype(np.float32)


@pytest.mark.parametrize("center", [0, 1])
@pytest.mark.parametrize("limit,iou,score", [(5, 0.3, 0.2), (100, 0.5, None), (2, 0.0, 0.5)])
def test_nms_matches_onnxruntime(center, limit, iou, score):
    boxes = _random_boxes(2, 40, center)
    scores = RNG.random((2, 3, 40)).astype(np.float32)
    consts = {"max_output_boxes_per_class": np.array([limit], np.int64), "iou_threshold": np.array([iou], np.float32)}
    if score is not None:
        consts["score_threshold"] = np.array([score], np.float32)
    model = one_node("NonMaxSuppression", {"boxes": boxes, "scores": scores}, {"center_point_box": center},
                     opset=11, consts=consts, out_dtype=TensorProto.INT64)
    feeds = {"boxes": boxes, "scores": scores}
    got = engine_output(model, feeds)
    assert got.dtype == np.int64 and got.ndim == 2 and got.shape[1] == 3 and len(got) > 0
    np.testing.assert_array_equal(got, ort_run(model, feeds)[0])


def test_nms_ties_keep_the_lower_index_and_limit_is_per_class():
    boxes = np.array([[[0, 0, 1, 1], [0, 0, 1, 1], [5, 5, 6, 6], [9, 9, 10, 10]]], np.float32)
    scores = np.array([[[0.5, 0.5, 0.5, 0.4], [0.1, 0.2, 0.3, 0.9]]], np.float32)
    feeds = {"boxes": boxes, "scores": scores, "max_output_boxes_per_class": np.array([2], np.int64),
             "iou_threshold": np.array([0.5], np.float32)}
    got = engine_output(one_node("NonMaxSuppression", feeds, out_dtype=TensorProto.INT64), feeds)
    np.testing.assert_array_equal(got, [[0, 0, 0], [0, 0, 2], [0, 1, 3], [0, 1, 2]])


def test_nms_without_max_output_selects_nothing():
    boxes, scores = _random_boxes(1, 5, 0), RNG.random((1, 1, 5)).astype(np.float32)
    model = one_node("NonMaxSuppression", {"boxes": boxes, "scores": scores}, out_dtype=TensorProto.INT64)
    got = engine_output(model, {"boxes": boxes, "scores": scores})
    assert got.shape == (0, 3) and got.dtype == np.int64


def test_nms_output_type_and_bad_shapes():
    boxes, scores = _random_boxes(1, 5, 0), RNG.random((1, 1, 5)).astype(np.float32)
    model = one_node("NonMaxSuppression", {"boxes": boxes, "scores": scores}, out_dtype=TensorProto.INT64)
    t = tensorsmith.import_onnx(model).outputs[0].type
    assert t.dtype == DType.INT64 and len(t.shape) == 2 and t.shape[1] == 3 and isinstance(t.shape[0], str)
    bad = RNG.random((1, 1, 4)).astype(np.float32)
    model = one_node("NonMaxSuppression", {"boxes": boxes, "scores": bad}, out_dtype=TensorProto.INT64)
    with pytest.raises(ExecutionError, match="scores \\[batch, classes, boxes\\]"):
        engine_output(model, {"boxes": boxes, "scores": bad})


# -- Det -----------------------------------------------------------------------------------


@pytest.mark.parametrize("shape", [(3, 3), (2, 4, 5, 5)])
@pytest.mark.parametrize("dtype", [np.float32, np.float64, np.float16])
def test_det(shape, dtype):
    x = RNG.standard_normal(shape).astype(dtype)
    model = one_node("Det", {"x": x}, out_dtype=helper.np_dtype_to_tensor_dtype(np.dtype(dtype)))
    got = engine_output(model, {"x": x})
    assert got.dtype == dtype and got.shape == shape[:-2]
    tol = 2e-2 if dtype == np.float16 else 1e-5
    np.testing.assert_allclose(got, np.linalg.det(x.astype(np.float64)), rtol=tol, atol=tol)
    assert tensorsmith.import_onnx(model).outputs[0].type == TensorType(DType.from_numpy(dtype), shape[:-2])


def test_det_rejects_non_square():
    x = np.zeros((3, 4), np.float32)
    with pytest.raises(ExecutionError, match="square"):
        engine_output(one_node("Det", {"x": x}), {"x": x})


# -- random ops ----------------------------------------------------------------------------


def test_random_normal_shape_dtype_and_statistics():
    model = one_node("RandomNormal", {}, {"shape": [200, 100], "mean": 3.0, "scale": 2.0, "dtype": TensorProto.DOUBLE},
                     input_names=[], out_dtype=TensorProto.DOUBLE)
    assert tensorsmith.import_onnx(model).outputs[0].type == TensorType(DType.FLOAT64, (200, 100))
    y = engine_output(model, {})
    assert y.dtype == np.float64 and y.shape == (200, 100)
    assert abs(y.mean() - 3.0) < 0.05 and abs(y.std() - 2.0) < 0.05


def test_random_uniform_bounds_and_default_float32():
    model = one_node("RandomUniform", {}, {"shape": [1000], "low": -2.0, "high": 5.0}, input_names=[])
    y = engine_output(model, {})
    assert y.dtype == np.float32 and y.shape == (1000,)
    assert y.min() >= -2.0 and y.max() < 5.0 and abs(y.mean() - 1.5) < 0.3


def test_unseeded_random_ops_are_not_folded_at_build_time():
    engine = tensorsmith.build(one_node("RandomUniform", {}, {"shape": [16]}, input_names=[]))
    a, b = engine.run({})["y0"], engine.run({})["y0"]
    assert not np.array_equal(a, b)


def test_seed_makes_a_node_reproducible():
    attrs = {"shape": [16], "seed": 7.0}
    a = engine_output(one_node("RandomNormal", {}, attrs, input_names=[]), {})
    b = engine_output(one_node("RandomNormal", {}, attrs, input_names=[]), {})
    c = engine_output(one_node("RandomNormal", {}, {"shape": [16], "seed": 8.0}, input_names=[]), {})
    np.testing.assert_array_equal(a, b)
    assert not np.array_equal(a, c)


@pytest.mark.parametrize("op", ["RandomNormalLike", "RandomUniformLike"])
def test_like_ops_follow_the_input(op):
    x = np.zeros((3, 5), np.float16)
    model = one_node(op, {"x": x}, out_dtype=TensorProto.FLOAT16)
    y = engine_output(model, {"x": x})
    assert y.dtype == np.float16 and y.shape == (3, 5) and np.unique(y).size > 1
    model = one_node(op, {"x": x}, {"dtype": TensorProto.DOUBLE}, out_dtype=TensorProto.DOUBLE)
    assert tensorsmith.import_onnx(model).outputs[0].type == TensorType(DType.FLOAT64, (3, 5))
    assert engine_output(model, {"x": x}).dtype == np.float64


def test_bernoulli_extremes_and_dtype():
    p = np.array([0.0, 1.0, 0.0, 1.0], np.float32)
    np.testing.assert_array_equal(engine_output(one_node("Bernoulli", {"p": p}), {"p": p}), p)
    model = one_node("Bernoulli", {"p": p}, {"dtype": TensorProto.INT32}, out_dtype=TensorProto.INT32)
    y = engine_output(model, {"p": p})
    assert y.dtype == np.int32
    np.testing.assert_array_equal(y, [0, 1, 0, 1])


def test_bernoulli_frequency():
    p = np.full((20000,), 0.3, np.float64)
    y = engine_output(one_node("Bernoulli", {"p": p}, {"seed": 1.0}, out_dtype=TensorProto.DOUBLE), {"p": p})
    assert y.dtype == np.float64 and set(np.unique(y)) <= {0.0, 1.0}
    assert abs(y.mean() - 0.3) < 0.02


def test_multinomial_samples_follow_the_log_probabilities():
    logits = np.log(np.array([[0.7, 0.2, 0.1], [0.0001, 0.0001, 0.9998]], np.float32))
    model = one_node("Multinomial", {"x": logits}, {"sample_size": 4000, "seed": 3.0}, out_dtype=TensorProto.INT32)
    assert tensorsmith.import_onnx(model).outputs[0].type == TensorType(DType.INT32, (2, 4000))
    y = engine_output(model, {"x": logits})
    assert y.dtype == np.int32 and y.shape == (2, 4000)
    np.testing.assert_allclose(np.bincount(y[0], minlength=3) / 4000, [0.7, 0.2, 0.1], atol=0.03)
    assert (y[1] == 2).mean() > 0.99
    model = one_node("Multinomial", {"x": logits}, {"dtype": TensorProto.INT64}, out_dtype=TensorProto.INT64)
    assert engine_output(model, {"x": logits}).shape == (2, 1)


@pytest.mark.parametrize("op,attrs,expected", [
    ("ScaledTanh", {"alpha": 2.0, "beta": 0.5}, lambda x: 2.0 * np.tanh(0.5 * x)),
    ("ParametricSoftplus", {"alpha": 1.5, "beta": 2.0}, lambda x: 1.5 * np.log1p(np.exp(2.0 * x))),
    ("ImageScaler", {"scale": 2.0, "bias": [1.0, -1.0, 0.5]}, lambda x: 2.0 * x + np.array([1.0, -1.0, 0.5]).reshape(1, 3, 1, 1)),
])
def test_experimental_ops_of_early_opsets(op, attrs, expected):
    x = RNG.standard_normal((2, 3, 4, 4)).astype(np.float32)
    g = helper.make_graph([helper.make_node(op, ["x"], ["y"], **attrs)], "g",
                          [helper.make_tensor_value_info("x", TensorProto.FLOAT, x.shape)],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, x.shape)])
    model = helper.make_model(g, opset_imports=[helper.make_opsetid("", 7)])
    got = tensorsmith.build(model).run({"x": x})["y"]
    np.testing.assert_allclose(got, expected(x.astype(np.float64)), rtol=1e-5, atol=1e-5)
