"""Quantization ops against onnxruntime (exact integer results): per-tensor, per-axis and blocked
(De)QuantizeLinear across opsets, float8 with and without saturation, DynamicQuantizeLinear,
QLinearMatMul, QLinearConv, MatMulInteger, ConvInteger, and their inferred output types."""

from __future__ import annotations

import ml_dtypes
import numpy as np
import pytest
from onnx import TensorProto

import tensorsmith

from .test_reduce import check_against_ort, one_node_model

RNG = np.random.default_rng(0)


def _x(shape=(2, 3, 4), lo=-40.0, hi=40.0):
    x = RNG.uniform(lo, hi, shape).astype(np.float32)
    x.reshape(-1)[:4] = [0.5, 1.5, 2.5, -2.5]  # ties, which round to even
    return x


@pytest.mark.parametrize("opset", [10, 13, 19, 21])
@pytest.mark.parametrize("zp_dtype", [np.uint8, np.int8])
def test_quantize_per_tensor(opset, zp_dtype):
    zp = np.array(3 if zp_dtype == np.uint8 else -3, zp_dtype)
    model, feeds = one_node_model("QuantizeLinear", [("x", _x()), ("c_s", np.array(0.25, np.float32)), ("c_zp", zp)],
                                  opset=opset)
    (y,) = check_against_ort(model, feeds)
    assert y.dtype == zp_dtype


def test_quantize_rounds_half_to_even():
    x = np.array([0.5, 1.5, 2.5, -0.5, -1.5, 300.0, -300.0], np.float32)
    model, feeds = one_node_model("QuantizeLinear", [("x", x), ("c_s", np.array(1.0, np.float32)),
                                                     ("c_zp", np.array(0, np.int8))], opset=13)
    (y,) = tensorsmith.build(model).run(feeds).values()
    np.testing.assert_array_equal(y, np.array([0, 2, 2, 0, -2, 127, -128], np.int8))


@pytest.mark.parametrize("zp_dtype", [np.uint16, np.int16])
def test_quantize_16bit(zp_dtype):
    model, feeds = one_node_model("QuantizeLinear", [("x", _x(hi=2000)), ("c_s", np.array(0.01, np.float32)),
                                                     ("c_zp", np.array(7, zp_dtype))], opset=21)
    (y,) = check_against_ort(model, feeds)
    assert y.dtype == zp_dtype


def test_quantize_default_uint8_and_float16():
    x = _x(lo=0, hi=20).astype(np.float16)
    model, feeds = one_node_model("QuantizeLinear", [("x", x), ("c_s", np.array(0.1, np.float16))], opset=19)
    (y,) = check_against_ort(model, feeds)
    assert y.dtype == np.uint8


@pytest.mark.parametrize("axis", [1, -1])
def test_per_axis_round_trip(axis):
    x = _x()
    n = x.shape[axis]
    s = RNG.uniform(0.1, 0.5, n).astype(np.float32)
    zp = RNG.integers(0, 20, n).astype(np.uint8)
    q, feeds = one_node_model("QuantizeLinear", [("x", x), ("c_s", s), ("c_zp", zp)], opset=13, axis=axis)
    (y,) = check_against_ort(q, feeds)
    d, feeds = one_node_model("DequantizeLinear", [("q", y), ("c_s", s), ("c_zp", zp)], opset=13, axis=axis)
    (back,) = check_against_ort(d, feeds)
    assert back.dtype == np.float32


def test_blocked():
    x = _x((3, 5))
    s = RNG.uniform(0.1, 0.5, (3, 3)).astype(np.float32)  # blocks of 2 along axis 1; the last one short
    zp = RNG.integers(-5, 5, (3, 3)).astype(np.int8)
    q, feeds = one_node_model("QuantizeLinear", [("x", x), ("c_s", s), ("c_zp", zp)], opset=21, axis=1, block_size=2)
    (y,) = check_against_ort(q, feeds)
    d, feeds = one_node_model("DequantizeLinear", [("q", y), ("c_s", s), ("c_zp", zp)], opset=21, axis=1, block_size=2)
    check_against_ort(d, feeds)


def test_blocked_bad_scale_shape():
    model, feeds = one_node_model("QuantizeLinear", [("x", _x((3, 5))), ("c_s", np.ones((3, 2), np.float32))],
                                  opset=21, axis=1, block_size=2)
    with pytest.raises(tensorsmith.errors.TensorsmithError, match="block"):
        tensorsmith.build(model).run(feeds)


@pytest.mark.parametrize("fp8", [TensorProto.FLOAT8E4M3FN, TensorProto.FLOAT8E5M2])
@pytest.mark.parametrize("saturate", [0, 1])
def test_quantize_float8(fp8, saturate):
    x = np.array([0.0, 1.3, -3.7, 100.0, 460.0, 470.0, 1e5, -1e6, np.inf, np.nan], np.float32)
    model, feeds = one_node_model("QuantizeLinear", [("x", x), ("c_s", np.array(1.0, np.float32))], opset=21,
                                  output_dtype=fp8, saturate=saturate)
    (y,) = tensorsmith.build(model).run(feeds).values()
    np_type = ml_dtypes.float8_e4m3fn if fp8 == TensorProto.FLOAT8E4M3FN else ml_dtypes.float8_e5m2
    if saturate:
        fmax = float(ml_dtypes.finfo(np_type).max)
        want = np.clip(x, -fmax, fmax).astype(np_type)
    else:
        want = x.astype(np_type)
    assert y.dtype == np_type
    np.testing.assert_array_equal(y.astype(np.float32), want.astype(np.float32))


def test_dequantize_float8_to_float16():
    x = np.array([0.0, 1.5, -448.0, 3.25], np.float32).astype(ml_dtypes.float8_e4m3fn)
    model, feeds = one_node_model("DequantizeLinear", [("c_x", x), ("c_s", np.array(2.0, np.float16))], opset=19)
    (y,) = tensorsmith.build(model).run({}).values()
    assert y.dtype == np.float16
    np.testing.assert_array_equal(y, np.array([0.0, 3.0, -896.0, 6.5], np.float16))


def test_dequantize_int32_and_output_dtype():
    x = RNG.integers(-1000, 1000, (4, 3)).astype(np.int32)
    model, feeds = one_node_model("DequantizeLinear", [("x", x), ("c_s", np.array(0.5, np.float32))], opset=10)
    check_against_ort(model, feeds)
    model, feeds = one_node_model("DequantizeLinear", [("x", x.astype(np.int8)), ("c_s", np.array(0.5, np.float32))],
                                  opset=23, output_dtype=TensorProto.FLOAT16)
    (y,) = tensorsmith.build(model).run(feeds).values()
    assert y.dtype == np.float16
    np.testing.assert_array_equal(y, (x.astype(np.int8) * 0.5).astype(np.float16))


@pytest.mark.parametrize("x", [_x(), np.zeros((3,), np.float32), np.array([-1.0, -2.0], np.float32),
                               np.array([3.0, 10.0], np.float32)])
def test_dynamic_quantize(x):
    model, feeds = one_node_model("DynamicQuantizeLinear", [("x", x)], n_out=3, opset=11)
    y, s, zp = check_against_ort(model, feeds)
    assert y.dtype == np.uint8 and s.shape == () and zp.dtype == np.uint8


@pytest.mark.parametrize("dtype", [np.uint8, np.int8])
def test_matmul_integer(dtype):
    lo, hi = np.iinfo(dtype).min, np.iinfo(dtype).max
    a = RNG.integers(lo, hi + 1, (2, 4, 7)).astype(dtype)
    b = RNG.integers(lo, hi + 1, (7, 3)).astype(dtype)
    a_zp = np.array(RNG.integers(lo, hi + 1), dtype)
    b_zp = RNG.integers(lo, hi + 1, (3,)).astype(dtype)  # per column
    model, feeds = one_node_model("MatMulInteger", [("a", a), ("b", b), ("c_azp", a_zp), ("c_bzp", b_zp)], opset=10)
    (y,) = check_against_ort(model, feeds)
    assert y.dtype == np.int32 and y.shape == (2, 4, 3)


def test_matmul_integer_per_row_a_zero_point():
    # onnxruntime takes only a scalar a_zero_point; the spec's 1-D form is per row of A.
    a = RNG.integers(0, 256, (4, 7)).astype(np.uint8)
    b = RNG.integers(0, 256, (7, 3)).astype(np.uint8)
    a_zp = RNG.integers(0, 256, (4,)).astype(np.uint8)
    model, feeds = one_node_model("MatMulInteger", [("a", a), ("b", b), ("c_azp", a_zp)], opset=10)
    (y,) = tensorsmith.build(model).run(feeds).values()
    want = (a.astype(np.int64) - a_zp[:, None]) @ b.astype(np.int64)
    np.testing.assert_array_equal(y, want.astype(np.int32))


@pytest.mark.parametrize("dtype", [np.uint8, np.int8])
@pytest.mark.parametrize("opset", [10, 21])
def test_qlinear_matmul(dtype, opset):
    lo, hi = np.iinfo(dtype).min, np.iinfo(dtype).max
    a = RNG.integers(lo, hi + 1, (2, 3, 5)).astype(dtype)
    b = RNG.integers(lo, hi + 1, (5, 4)).astype(dtype)
    ins = [("a", a), ("c_as", np.array(0.02, np.float32)), ("c_azp", np.array(3, dtype)),
           ("b", b), ("c_bs", np.array(0.03, np.float32)), ("c_bzp", np.array(-1 if dtype == np.int8 else 9, dtype)),
           ("c_ys", np.array(0.5, np.float32)), ("c_yzp", np.array(5, dtype))]
    model, feeds = one_node_model("QLinearMatMul", ins, opset=opset)
    (y,) = check_against_ort(model, feeds)
    assert y.dtype == dtype and y.shape == (2, 3, 4)


def _conv_inputs(dtype=np.uint8, channels=4):
    lo, hi = (0, 255) if dtype == np.uint8 else (-128, 127)
    x = RNG.integers(lo, hi + 1, (1, 2, 6, 5)).astype(dtype)
    w = RNG.integers(-128, 128, (channels, 2, 3, 3)).astype(np.int8 if dtype == np.int8 else np.uint8)
    if dtype == np.uint8:
        w = RNG.integers(0, 256, (channels, 2, 3, 3)).astype(np.uint8)
    return x, w


@pytest.mark.parametrize("attrs", [{}, {"pads": [1, 0, 1, 2]}, {"auto_pad": "SAME_UPPER", "strides": [2, 2]},
                                   {"auto_pad": "SAME_LOWER", "strides": [2, 1]}, {"dilations": [2, 1]}])
def test_conv_integer(attrs):
    x, w = _conv_inputs()
    model, feeds = one_node_model("ConvInteger", [("x", x), ("w", w), ("c_xzp", np.array(12, np.uint8)),
                                                  ("c_wzp", np.array(100, np.uint8))], opset=10, **attrs)
    (y,) = check_against_ort(model, feeds)
    assert y.dtype == np.int32
    assert tensorsmith.import_onnx(model).outputs[0].type.shape == y.shape


def test_conv_integer_grouped_no_zero_points():
    x, w = _conv_inputs()
    w = w[:, :1]
    model, feeds = one_node_model("ConvInteger", [("x", x), ("w", w)], opset=10, group=2)
    check_against_ort(model, feeds)


@pytest.mark.parametrize("dtype", [np.uint8, np.int8])
@pytest.mark.parametrize("per_channel", [False, True])
def test_qlinear_conv(dtype, per_channel):
    x, w = _conv_inputs(dtype)
    w = RNG.integers(-128, 128, w.shape).astype(np.int8) if dtype == np.int8 else w
    c = w.shape[0]
    w_scale = RNG.uniform(0.01, 0.05, c).astype(np.float32) if per_channel else np.array(0.02, np.float32)
    w_zp = np.zeros(c, w.dtype) if per_channel else np.array(0 if dtype == np.int8 else 120, w.dtype)
    bias = RNG.integers(-500, 500, c).astype(np.int32)
    ins = [("x", x), ("c_xs", np.array(0.05, np.float32)), ("c_xzp", np.array(2, dtype)),
           ("w", w), ("c_ws", w_scale), ("c_wzp", w_zp), ("c_ys", np.array(0.7, np.float32)),
           ("c_yzp", np.array(10, dtype)), ("c_b", bias)]
    model, feeds = one_node_model("QLinearConv", ins, opset=10, pads=[1, 1, 1, 1])
    (y,) = check_against_ort(model, feeds)
    assert y.dtype == dtype and y.shape == (1, c, 6, 5)


def test_infer_types_with_symbols():
    x = _x()
    model, _ = one_node_model("QuantizeLinear", [("x", x), ("c_s", np.array(1.0, np.float32)),
                                                 ("c_zp", np.array(0, np.int8))], opset=13, shapes={"x": ["N", 3, 4]})
    t = tensorsmith.import_onnx(model).outputs[0].type
    assert t.shape == ("N", 3, 4) and str(t.dtype) == "int8"
    a = np.zeros((2, 3), np.uint8)
    b = np.zeros((3, 5), np.uint8)
    model, _ = one_node_model("MatMulInteger", [("a", a), ("b", b)], opset=10, shapes={"a": ["B", "M", 3]})
    t = tensorsmith.import_onnx(model).outputs[0].type
    assert t.shape == ("B", "M", 5) and str(t.dtype) == "int32"
    x, w = _conv_inputs()
    model, _ = one_node_model("ConvInteger", [("x", x), ("w", w)], opset=10, shapes={"x": ["N", 2, 6, 5]}, strides=[2, 2])
    t = tensorsmith.import_onnx(model).outputs[0].type
    assert t.shape == ("N", 4, 2, 2) and str(t.dtype) == "int32"


def test_output_dtype_must_match_zero_point():
    model, feeds = one_node_model("QuantizeLinear", [("x", _x()), ("c_s", np.array(1.0, np.float32)),
                                                     ("c_zp", np.array(0, np.int8))], opset=21,
                                  output_dtype=TensorProto.UINT8)
    with pytest.raises(tensorsmith.errors.TensorsmithError, match="output_dtype"):
        tensorsmith.build(model)
