"""Reduce* ops: old (axes attribute) and new (axes input) forms, keepdims, empty axes, empty sets,
integer and float16 dtypes, and shape inference with symbolic dims. Compared with onnxruntime."""

from __future__ import annotations

import numpy as np
import pytest

import tensorsmith

from ..conftest import ort_run
from .models import one_node_model


def check_against_ort(model, feeds, rtol=1e-5, atol=1e-6):
    """Run tensorsmith and onnxruntime; same dtypes and values (exact for integers)."""
    ours = list(tensorsmith.build(model).run(feeds).values())
    ref = ort_run(model, feeds)
    assert len(ours) == len(ref)
    for a, e in zip(ours, ref):
        assert a.dtype == e.dtype and a.shape == e.shape, (a.dtype, a.shape, e.dtype, e.shape)
        if np.issubdtype(e.dtype, np.floating):
            np.testing.assert_allclose(a, e, rtol=rtol, atol=atol)
        else:
            np.testing.assert_array_equal(a, e)
    return ours


X = np.random.default_rng(0).uniform(0.5, 2.0, (3, 4, 5)).astype(np.float32)
ALL_OPS = ["ReduceSum", "ReduceMean", "ReduceMax", "ReduceMin", "ReduceProd", "ReduceL1", "ReduceL2",
           "ReduceLogSum", "ReduceLogSumExp", "ReduceSumSquare"]


@pytest.mark.parametrize("op", ALL_OPS)
@pytest.mark.parametrize("opset", [11, 18])
def test_axes_attribute_and_input_forms(op, opset):
    # ReduceSum took axes as an input from 13, the others from 18: 11 has the attribute form.
    keep = 0
    if opset < 13:
        model, feeds = one_node_model(op, [("x", X)], opset=opset, axes=[0, -1], keepdims=keep)
    else:
        model, feeds = one_node_model(op, [("x", X), ("c_axes", np.array([0, -1], np.int64))], opset=opset, keepdims=keep)
    (y,) = check_against_ort(model, feeds)
    assert y.shape == (4,)


@pytest.mark.parametrize("op", ALL_OPS)
def test_default_axes_keepdims(op):
    model, feeds = one_node_model(op, [("x", X)], opset=13 if op == "ReduceSum" else 18)
    (y,) = check_against_ort(model, feeds)
    assert y.shape == (1, 1, 1)


def test_noop_with_empty_axes_is_identity():
    model, feeds = one_node_model("ReduceSum", [("x", X), ("c_axes", np.array([], np.int64))], opset=13,
                                  noop_with_empty_axes=1)
    (y,) = check_against_ort(model, feeds)
    np.testing.assert_array_equal(y, X)


def test_axes_fed_at_run_time():
    model, feeds = one_node_model("ReduceMax", [("x", X), ("axes", np.array([1], np.int64))], keepdims=1)
    (y,) = check_against_ort(model, feeds)
    assert y.shape == (3, 1, 5)


@pytest.mark.parametrize("op,dtype", [
    ("ReduceSum", np.int32), ("ReduceSum", np.int64), ("ReduceMax", np.int8), ("ReduceMin", np.uint8),
    ("ReduceProd", np.int32), ("ReduceSumSquare", np.int64), ("ReduceL1", np.int32), ("ReduceMean", np.int32),
    ("ReduceMax", np.float16), ("ReduceSum", np.float16), ("ReduceLogSumExp", np.float64),
])
def test_dtypes(op, dtype):
    x = np.random.default_rng(1).integers(-3, 4, (2, 3, 4))
    if dtype == np.uint8:
        x = np.abs(x)
    x = x.astype(dtype)
    opset = 13 if op == "ReduceSum" else 18
    model, feeds = one_node_model(op, [("x", x), ("c_axes", np.array([1], np.int64))], opset=opset, keepdims=0)
    (y,) = check_against_ort(model, feeds, rtol=1e-3, atol=1e-3)
    assert y.dtype == dtype


def test_bool_max_min_are_any_all():
    x = np.array([[True, False], [False, False]])
    for op, want in (("ReduceMax", [True, False]), ("ReduceMin", [False, False])):
        model, feeds = one_node_model(op, [("x", x), ("c_axes", np.array([1], np.int64))], opset=20, keepdims=0)
        (y,) = tensorsmith.build(model).run(feeds).values()
        assert y.dtype == np.bool_
        np.testing.assert_array_equal(y, want)


@pytest.mark.parametrize("op,value", [
    ("ReduceSum", 0.0), ("ReduceProd", 1.0), ("ReduceMax", -np.inf), ("ReduceMin", np.inf),
    ("ReduceLogSumExp", -np.inf), ("ReduceL2", 0.0),
])
def test_empty_set(op, value):
    x = np.zeros((2, 0, 4), np.float32)
    model, feeds = one_node_model(op, [("x", x), ("c_axes", np.array([1], np.int64))],
                                  opset=13 if op == "ReduceSum" else 18, keepdims=1)
    (y,) = tensorsmith.build(model).run(feeds).values()
    assert y.shape == (2, 1, 4)
    np.testing.assert_array_equal(y, np.full((2, 1, 4), value, np.float32))


def test_empty_set_int_max_is_lowest_int():
    x = np.zeros((0, 3), np.int32)
    model, feeds = one_node_model("ReduceMax", [("x", x), ("c_axes", np.array([0], np.int64))], opset=18, keepdims=0)
    (y,) = tensorsmith.build(model).run(feeds).values()
    np.testing.assert_array_equal(y, np.full((3,), np.iinfo(np.int32).min, np.int32))


def test_uint64_max_keeps_order_of_large_values():
    x = np.array([[1, 2**63 + 5], [2**64 - 1, 3]], np.uint64)
    model, feeds = one_node_model("ReduceMax", [("x", x), ("c_axes", np.array([1], np.int64))], opset=18, keepdims=0)
    (y,) = tensorsmith.build(model).run(feeds).values()
    np.testing.assert_array_equal(y, np.array([2**63 + 5, 2**64 - 1], np.uint64))


def test_scalar_input():
    model, feeds = one_node_model("ReduceSum", [("x", np.array([2.5], np.float32))], opset=13, keepdims=0)
    (y,) = check_against_ort(model, feeds)
    assert y.shape == ()


def _out_type(model):
    return tensorsmith.import_onnx(model).outputs[0].type


def test_infer_symbolic_dims():
    x = np.zeros((2, 3, 4), np.float32)
    model, _ = one_node_model("ReduceMean", [("x", x), ("c_axes", np.array([-1], np.int64))],
                              shapes={"x": ["N", "S", 4]}, keepdims=0)
    t = _out_type(model)
    assert t.shape == ("N", "S") and str(t.dtype) == "float32"
    model, _ = one_node_model("ReduceSum", [("x", x)], opset=11, shapes={"x": ["N", "S", 4]}, axes=[1])
    assert _out_type(model).shape == ("N", 1, 4)


def test_infer_unknown_axes_keeps_rank():
    x = np.zeros((2, 3, 4), np.int64)
    model, _ = one_node_model("ReduceMax", [("x", x), ("axes", np.array([1], np.int64))], keepdims=1)
    t = _out_type(model)
    assert t.rank == 3 and str(t.dtype) == "int64"


def test_repeated_axis_is_an_error():
    model, _ = one_node_model("ReduceSum", [("x", X), ("c_axes", np.array([1, 1], np.int64))], opset=13)
    with pytest.raises(tensorsmith.errors.TensorsmithError, match="repeat"):
        tensorsmith.build(model)
