"""Elementwise ops against onnxruntime, numpy and the ONNX reference: old and new opsets,
integer/unsigned/half dtypes, float8 casts, and the output types that inference gives."""

from __future__ import annotations

import ml_dtypes
import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper

import tensorsmith
from tensorsmith.errors import ExecutionError
from tensorsmith.ir import DType

from ..conftest import ort_run
from .models import assert_matches_ort, one_node, out_type

RNG = np.random.default_rng(0)


def run(model: onnx.ModelProto, inputs: dict) -> list[np.ndarray]:
    return list(tensorsmith.build(model).run(inputs).values())


def check_vs_ort(op, inputs, attrs=None, opset=18, rtol=1e-5, atol=1e-6):
    model = one_node(op, inputs, attrs, opset)
    got = run(model, inputs)
    assert_matches_ort(got, ort_run(model, inputs), op, rtol, atol)
    return got


def randn(*shape, dtype=np.float32):
    return RNG.standard_normal(shape).astype(dtype)


# -- unary math and activations -------------------------------------------------------------

UNIT = RNG.uniform(-0.9, 0.9, (3, 4)).astype(np.float32)
POS = RNG.uniform(1.1, 4.0, (3, 4)).astype(np.float32)
WIDE = (RNG.standard_normal((3, 4)) * 3).astype(np.float32)

UNARY = {
    "Acos": UNIT, "Asin": UNIT, "Atan": WIDE, "Atanh": UNIT, "Acosh": POS, "Asinh": WIDE,
    "Cos": WIDE, "Sin": WIDE, "Tan": UNIT, "Cosh": WIDE, "Sinh": WIDE, "Tanh": WIDE,
    "Exp": WIDE, "Log": POS, "Sqrt": POS, "Reciprocal": POS, "Sigmoid": WIDE, "Erf": WIDE,
    "Abs": WIDE, "Neg": WIDE, "Sign": WIDE, "Relu": WIDE, "Softsign": WIDE, "Softplus": WIDE,
    "Ceil": WIDE, "Floor": WIDE, "Mish": WIDE, "HardSwish": WIDE,
    "Round": np.array([0.5, 1.5, 2.5, -0.5, -1.5, 2.4, -2.6, 0.0], np.float32),
}


@pytest.mark.parametrize("op", sorted(UNARY))
def test_unary_float32_matches_ort(op):
    check_vs_ort(op, {"x": UNARY[op]}, rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("op", ["Relu", "Sigmoid", "Tanh", "Exp", "Sqrt", "Abs", "Neg", "Floor", "Round", "Erf"])
def test_unary_float16_matches_ort(op):
    x = np.abs(WIDE) if op == "Sqrt" else WIDE
    check_vs_ort(op, {"x": x.astype(np.float16)}, opset=13, rtol=1e-3, atol=1e-3)


@pytest.mark.parametrize("dtype", [np.int8, np.int32, np.int64])
@pytest.mark.parametrize("op", ["Abs", "Neg", "Sign", "Relu"])
def test_unary_signed_ints(op, dtype):
    x = np.array([-7, -1, 0, 1, 5], dtype)
    (y,) = run(one_node(op, {"x": x}, opset=14), {"x": x})
    fn = {"Abs": np.abs, "Neg": np.negative, "Sign": np.sign, "Relu": lambda v: np.maximum(v, 0)}[op]
    assert y.dtype == dtype
    np.testing.assert_array_equal(y, fn(x))


@pytest.mark.parametrize("dtype", [np.uint8, np.uint16, np.uint32, np.uint64])
def test_abs_sign_unsigned_keep_large_values(dtype):
    x = np.array([0, 1, np.iinfo(dtype).max], dtype)
    (a,) = run(one_node("Abs", {"x": x}), {"x": x})
    (s,) = run(one_node("Sign", {"x": x}), {"x": x})
    np.testing.assert_array_equal(a, x)
    np.testing.assert_array_equal(s, np.array([0, 1, 1], dtype))
    assert s.dtype == dtype


@pytest.mark.parametrize("op,attrs,opset", [
    ("LeakyRelu", {"alpha": 0.2}, 7), ("LeakyRelu", {}, 16),
    ("Elu", {"alpha": 0.7}, 7), ("Selu", {"alpha": 1.5, "gamma": 2.0}, 7), ("Selu", {}, 7),
    ("HardSigmoid", {"alpha": 0.3, "beta": 0.4}, 7), ("ThresholdedRelu", {"alpha": 0.5}, 10),
    ("Celu", {"alpha": 2.0}, 12), ("Shrink", {"lambd": 0.8, "bias": 0.3}, 9),
    ("Gelu", {}, 20), ("Gelu", {"approximate": "tanh"}, 20),
])
def test_activation_attributes_match_ort(op, attrs, opset):
    check_vs_ort(op, {"x": WIDE}, attrs, opset)


def test_shrink_on_integers():
    x = np.array([-5, -2, -1, 0, 1, 2, 5], np.int8)
    check_vs_ort("Shrink", {"x": x}, {"lambd": 1.5, "bias": 1.0}, opset=9)


def test_swish_and_swiglu_follow_their_formulas():
    x = WIDE
    (y,) = run(one_node("Swish", {"x": x}, {"alpha": 1.7}, opset=24), {"x": x})
    np.testing.assert_allclose(y, x / (1 + np.exp(-1.7 * x)), rtol=1e-5, atol=1e-6)
    b = randn(3, 4)
    (y,) = run(one_node("SwiGLU", {"a": x, "b": b}, {"alpha": 0.5}, opset=28), {"a": x, "b": b})
    np.testing.assert_allclose(y, x / (1 + np.exp(-0.5 * x)) * b, rtol=1e-5, atol=1e-6)
    h = x.astype(np.float16)
    (y,) = run(one_node("SwiGLU", {"a": h, "b": h}, opset=28), {"a": h, "b": h})
    assert y.dtype == np.float16
    np.testing.assert_allclose(y, x / (1 + np.exp(-x)) * x, rtol=1e-2, atol=1e-2)


def test_new_ops_are_rejected_at_old_opsets():
    x = WIDE
    with pytest.raises(tensorsmith.errors.UnsupportedOperatorError):
        tensorsmith.build(one_node("Gelu", {"x": x}, opset=18))


def test_bad_attribute_is_reported_with_the_node():
    model = one_node("Gelu", {"x": WIDE}, {"approximate": "erf"}, opset=20)
    with pytest.raises(ExecutionError, match="approximate"):
        run(model, {"x": WIDE})


@pytest.mark.parametrize("slope", [np.array([0.1, 0.2, 0.3, 0.4], np.float32), randn(3, 1), np.array([0.25], np.float32)])
def test_prelu_broadcasts_slope(slope):
    check_vs_ort("PRelu", {"x": WIDE, "slope": slope}, opset=9)


def test_prelu_int32():
    check_vs_ort("PRelu", {"x": np.array([-4, -1, 0, 3], np.int32), "slope": np.array([2], np.int32)}, opset=16)


# -- Clip, Pow, Mod, shifts and bitwise ------------------------------------------------------


def test_clip_opset6_attributes_and_opset13_inputs_agree():
    x = WIDE
    (old,) = run(one_node("Clip", {"x": x}, {"min": -0.5, "max": 0.7}, opset=6), {"x": x})
    np.testing.assert_allclose(old, np.clip(x, -0.5, 0.7))
    (only_max,) = run(one_node("Clip", {"x": x}, {"max": 0.0}, opset=6), {"x": x})
    np.testing.assert_allclose(only_max, np.minimum(x, 0.0))
    lo, hi = np.array([-0.5], np.float32), np.array([0.7], np.float32)
    model = one_node("Clip", {"x": x, "lo": lo, "hi": hi}, opset=13, shapes={"lo": [], "hi": []})
    import torch

    (new,) = tensorsmith.build(model).run({"x": torch.from_numpy(x), "lo": torch.tensor(-0.5), "hi": torch.tensor(0.7)}).values()
    np.testing.assert_allclose(new.numpy(), old)


@pytest.mark.parametrize("dtype", [np.int8, np.uint8, np.int64, np.uint64, np.float16])
def test_clip_integer_and_half_dtypes(dtype):
    x = np.array([0, 3, 7, 100, 120], dtype)
    model = helper.make_model(helper.make_graph(
        [helper.make_node("Clip", ["x", "lo", "hi"], ["y"])], "clip",
        [helper.make_tensor_value_info("x", helper.np_dtype_to_tensor_dtype(np.dtype(dtype)), [5])],
        [helper.make_tensor_value_info("y", helper.np_dtype_to_tensor_dtype(np.dtype(dtype)), [5])],
        initializer=[onnx.numpy_helper.from_array(np.array(v, dtype), n) for n, v in (("lo", 3), ("hi", 100))]),
        opset_imports=[helper.make_opsetid("", 13)])
    (y,) = run(model, {"x": x})
    assert y.dtype == dtype
    np.testing.assert_array_equal(y, np.clip(x, 3, 100))
    assert out_type(model).dtype == DType.from_numpy(dtype)


def test_clip_min_greater_than_max_gives_max():
    x = WIDE
    model = helper.make_model(helper.make_graph(
        [helper.make_node("Clip", ["x", "lo", "hi"], ["y"])], "clip",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [3, 4])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [3, 4])],
        initializer=[onnx.numpy_helper.from_array(np.array(v, np.float32), n) for n, v in (("lo", 2.0), ("hi", 1.0))]),
        opset_imports=[helper.make_opsetid("", 13)])
    (y,) = run(model, {"x": x})
    np.testing.assert_array_equal(y, np.full_like(x, 1.0))


@pytest.mark.parametrize("xd,yd,opset", [
    (np.float32, np.float32, 7), (np.float32, np.int64, 15), (np.int64, np.float32, 15),
    (np.int32, np.int32, 15), (np.float16, np.float32, 15), (np.float64, np.int32, 15),
])
def test_pow_output_has_the_base_dtype(xd, yd, opset):
    x = np.array([[1, 2, 3], [4, 5, 2]], xd)
    y = np.array([2, 3, 1], yd) if np.issubdtype(yd, np.integer) else np.array([2.0, 0.5, 1.5], yd)
    check_vs_ort("Pow", {"x": x, "y": y}, opset=opset, rtol=1e-3)
    assert out_type(one_node("Pow", {"x": x, "y": y}, opset=opset)).dtype == DType.from_numpy(xd)


@pytest.mark.parametrize("dtype", [np.int8, np.int32, np.int64, np.uint16, np.uint64])
@pytest.mark.parametrize("fmod", [0, 1])
def test_mod_integers_sign_rules(dtype, fmod):
    signed = np.issubdtype(dtype, np.signedinteger)
    a = np.array([-7, 7, -7, 7, 5, -4] if signed else [7, 9, 10, 3, 5, 4], dtype)
    b = np.array([3, -3, -3, 3, 5, 3] if signed else [3, 4, 3, 3, 5, 3], dtype)
    (y,) = run(one_node("Mod", {"a": a, "b": b}, {"fmod": fmod}, opset=13), {"a": a, "b": b})
    want = np.fmod(a, b) if fmod else np.mod(a, b)
    assert y.dtype == dtype
    np.testing.assert_array_equal(y, want)


def test_mod_floats():
    a = np.array([-4.3, 7.2, 5.0, -0.0, 0.0], np.float32)
    b = np.array([2.1, -3.4, 5.0, 2.0, -2.0], np.float32)
    check_vs_ort("Mod", {"a": a, "b": b}, {"fmod": 1}, opset=13)
    (y,) = run(one_node("Mod", {"a": a, "b": b}, {"fmod": 0}, opset=28), {"a": a, "b": b})
    want = np.mod(a, b)
    np.testing.assert_allclose(y, want, rtol=1e-6)
    np.testing.assert_array_equal(np.signbit(y), np.signbit(want))


@pytest.mark.parametrize("dtype", [np.uint8, np.uint16, np.uint32, np.uint64])
@pytest.mark.parametrize("direction", ["LEFT", "RIGHT"])
def test_bitshift_unsigned(dtype, direction):
    top = np.iinfo(dtype).max
    x = np.array([1, 16, top, top - 5], dtype)
    s = np.array([1, 3, 1, 2], dtype)
    (y,) = run(one_node("BitShift", {"x": x, "s": s}, {"direction": direction}, opset=11), {"x": x, "s": s})
    want = np.left_shift(x, s) if direction == "LEFT" else np.right_shift(x, s)
    assert y.dtype == dtype
    np.testing.assert_array_equal(y, want)


@pytest.mark.parametrize("direction", ["LEFT", "RIGHT"])
def test_bitshift_signed_out_of_range_shifts(direction):
    x = np.array([-128, -3, 5, 100, -1, 64], np.int8)
    s = np.array([1, 9, -1, 2, 7, 1], np.int8)
    (y,) = run(one_node("BitShift", {"x": x, "s": s}, {"direction": direction}, opset=28), {"x": x, "s": s})
    if direction == "LEFT":
        want = np.array([0, 0, 0, -112, -128, -128], np.int8)
    else:
        want = np.array([-64, -1, 0, 25, -1, 32], np.int8)
    np.testing.assert_array_equal(y, want)


@pytest.mark.parametrize("dtype", [np.int8, np.int32, np.uint16, np.uint64])
def test_bitwise_ops(dtype):
    info = np.iinfo(dtype)
    a = np.array([info.min, info.max, 5, 12], dtype)
    b = np.array([info.max, 3, 6, 10], dtype)
    for op, fn in (("BitwiseAnd", np.bitwise_and), ("BitwiseOr", np.bitwise_or), ("BitwiseXor", np.bitwise_xor)):
        (y,) = run(one_node(op, {"a": a, "b": b}), {"a": a, "b": b})
        assert y.dtype == dtype
        np.testing.assert_array_equal(y, fn(a, b), err_msg=op)
    (y,) = run(one_node("BitwiseNot", {"a": a}), {"a": a})
    np.testing.assert_array_equal(y, np.invert(a))


# -- logic and comparisons -----------------------------------------------------------------


@pytest.mark.parametrize("op", ["And", "Or", "Xor"])
def test_logic_broadcasts(op):
    a = RNG.random((2, 3, 1)) > 0.5
    b = RNG.random((4,)) > 0.5
    check_vs_ort(op, {"a": a, "b": b}, opset=7)


def test_not():
    a = np.array([True, False])
    check_vs_ort("Not", {"a": a}, opset=7)


@pytest.mark.parametrize("dtype", [np.float32, np.float16, np.int8, np.int64, np.uint32, np.uint64])
@pytest.mark.parametrize("op", ["Equal", "Greater", "GreaterOrEqual", "Less", "LessOrEqual"])
def test_comparisons_are_bool_and_order_unsigned_correctly(op, dtype):
    if np.issubdtype(dtype, np.integer):
        info = np.iinfo(dtype)
        a = np.array([info.min, info.max, 5, 12, info.max - 1], dtype)
        b = np.array([info.max, 3, 5, 10, info.max], dtype)
    else:
        a = np.array([1.0, -2.0, 3.5, np.nan, np.inf], dtype)
        b = np.array([1.0, 2.0, 3.0, 1.0, np.inf], dtype)
    fn = {"Equal": np.equal, "Greater": np.greater, "GreaterOrEqual": np.greater_equal,
          "Less": np.less, "LessOrEqual": np.less_equal}[op]
    (y,) = run(one_node(op, {"a": a, "b": b}, opset=16), {"a": a, "b": b})
    assert y.dtype == np.bool_
    np.testing.assert_array_equal(y, fn(a, b))


def test_isnan_isinf_flags():
    x = np.array([1.0, np.nan, np.inf, -np.inf, -2.0], np.float32)
    check_vs_ort("IsNaN", {"x": x}, opset=13)
    for pos, neg in ((1, 1), (1, 0), (0, 1), (0, 0)):
        check_vs_ort("IsInf", {"x": x}, {"detect_positive": pos, "detect_negative": neg}, opset=10)


def test_isnan_on_float8():
    x = np.array([1.0, np.nan, -2.0], np.float32).astype(ml_dtypes.float8_e4m3fn)
    (y,) = run(one_node("IsNaN", {"x": x}, opset=20), {"x": x})
    np.testing.assert_array_equal(y, [False, True, False])


@pytest.mark.parametrize("dtype", [np.float32, np.int64, np.uint32, np.bool_])
def test_where_broadcasts(dtype):
    c = RNG.random((2, 1, 4)) > 0.5
    x = (RNG.random((3, 1)) * 10).astype(dtype)
    y = (RNG.random((4,)) * 10).astype(dtype)
    (got,) = run(one_node("Where", {"c": c, "x": x, "y": y}, opset=16), {"c": c, "x": x, "y": y})
    assert got.dtype == dtype
    np.testing.assert_array_equal(got, np.where(c, x, y))


# -- variadic --------------------------------------------------------------------------------


@pytest.mark.parametrize("op", ["Max", "Min", "Sum", "Mean"])
@pytest.mark.parametrize("opset", [8, 13])
def test_variadic_broadcasting(op, opset):
    ins = {"a": randn(2, 3, 4), "b": randn(3, 1), "c": randn(4)}
    check_vs_ort(op, ins, opset=opset)
    check_vs_ort(op, {"a": randn(3, 4)}, opset=opset)


@pytest.mark.parametrize("dtype", [np.int8, np.uint8, np.uint16, np.uint64])
def test_max_min_integers(dtype):
    info = np.iinfo(dtype)
    a = np.array([info.min, info.max, 5, 1], dtype)
    b = np.array([info.max, 3, 5, info.max - 1], dtype)
    for op, fn in (("Max", np.maximum), ("Min", np.minimum)):
        (y,) = run(one_node(op, {"a": a, "b": b}, opset=13), {"a": a, "b": b})
        assert y.dtype == dtype
        np.testing.assert_array_equal(y, fn(a, b), err_msg=op)


def test_mean_float16():
    ins = {"a": randn(3, 4, dtype=np.float16), "b": randn(3, 4, dtype=np.float16)}
    (y,) = run(one_node("Mean", ins, opset=13), ins)
    assert y.dtype == np.float16
    np.testing.assert_allclose(y, (ins["a"].astype(np.float32) + ins["b"]) / 2, rtol=1e-3, atol=1e-3)


# -- casts -----------------------------------------------------------------------------------

CAST_TYPES = [np.float32, np.float64, np.float16, np.int8, np.int16, np.int32, np.int64,
              np.uint8, np.uint16, np.uint32, np.uint64, np.bool_]


@pytest.mark.parametrize("src", CAST_TYPES)
def test_cast_numeric_pairs_match_ort(src):
    x = np.array([0, 1, 3, 7, 100, 0, 2], np.float64)
    if np.issubdtype(src, np.floating):
        x = x + np.array([0.25, 0.5, 0.0, 0.75, 0.0, 0.0, 0.0])
    x = x.astype(src)
    for dst in CAST_TYPES:
        model = one_node("Cast", {"x": x}, {"to": helper.np_dtype_to_tensor_dtype(np.dtype(dst))}, opset=13)
        (got,), (want,) = run(model, {"x": x}), ort_run(model, {"x": x})
        assert got.dtype == want.dtype == dst
        np.testing.assert_array_equal(got, want, err_msg=f"{np.dtype(src)} -> {np.dtype(dst)}")


def test_cast_bfloat16_round_trip():
    x = np.array([1.0, 3.14159, -2.5e10, 1e-3], np.float32)
    model = one_node("Cast", {"x": x}, {"to": TensorProto.BFLOAT16}, opset=13)
    (y,) = run(model, {"x": x})
    assert y.dtype == ml_dtypes.bfloat16
    np.testing.assert_array_equal(y, x.astype(ml_dtypes.bfloat16))
    (back,) = run(one_node("Cast", {"x": y}, {"to": TensorProto.FLOAT}, opset=13), {"x": y})
    np.testing.assert_array_equal(back, y.astype(np.float32))


F8 = {TensorProto.FLOAT8E4M3FN: ml_dtypes.float8_e4m3fn, TensorProto.FLOAT8E4M3FNUZ: ml_dtypes.float8_e4m3fnuz,
      TensorProto.FLOAT8E5M2: ml_dtypes.float8_e5m2, TensorProto.FLOAT8E5M2FNUZ: ml_dtypes.float8_e5m2fnuz}


@pytest.mark.parametrize("to", sorted(F8))
@pytest.mark.parametrize("saturate", [0, 1])
@pytest.mark.parametrize("src", [np.float32, np.float16])
def test_cast_to_float8_matches_the_onnx_reference(to, saturate, src):
    from onnx.reference import ReferenceEvaluator

    x = np.array([0.0, -0.0, 0.4, 1.3, -7.7, 100.0, 240.0, 247.9, 248.0, 448.0, 460.0, 464.0, 470.0, 1000.0,
                  57344.0, 61439.0, 61440.0, np.inf, -np.inf, np.nan, -1000.0, 1e-5], np.float32)
    x = x.astype(src)
    model = one_node("Cast", {"x": x}, {"to": to, "saturate": saturate}, opset=21)
    (got,) = run(model, {"x": x})
    (want,) = ReferenceEvaluator(model).run(None, {"x": x})
    assert got.dtype == F8[to]
    np.testing.assert_array_equal(got.astype(np.float32), np.asarray(want).astype(np.float32))


@pytest.mark.parametrize("to", sorted(F8))
def test_cast_from_float8(to):
    vals = np.array([0.5, -3.0, 12.0, 0.0], np.float32)
    x = vals.astype(F8[to])
    for dst in (np.float32, np.float16, np.int32, np.bool_):
        model = one_node("Cast", {"x": x}, {"to": helper.np_dtype_to_tensor_dtype(np.dtype(dst))}, opset=19)
        (y,) = run(model, {"x": x})
        assert y.dtype == dst
        np.testing.assert_array_equal(y, vals.astype(dst))


def test_castlike_takes_the_dtype_of_its_second_input():
    x = np.array([1.7, -2.2, 300.0], np.float32)
    like = np.zeros(1, np.int16)
    model = one_node("CastLike", {"x": x, "like": like}, opset=15)
    (y,) = run(model, {"x": x, "like": like})
    assert y.dtype == np.int16
    np.testing.assert_array_equal(y, x.astype(np.int16))
    assert out_type(model).dtype == DType.INT16
    like8 = np.zeros(1, ml_dtypes.float8_e4m3fn)
    model = one_node("CastLike", {"x": x, "like": like8}, {"saturate": 0}, opset=19)
    (y,) = run(model, {"x": x, "like": like8})
    assert y.dtype == ml_dtypes.float8_e4m3fn
    np.testing.assert_array_equal(y.astype(np.float32), [1.75, -2.25, 288.0])
    # Without saturation, a value beyond the float8 range becomes NaN instead of 448.
    x2 = np.array([500.0], np.float32)
    (y2,) = run(one_node("CastLike", {"x": x2, "like": like8}, {"saturate": 0}, opset=19), {"x": x2, "like": like8})
    assert np.isnan(y2.astype(np.float32)[0])


@pytest.mark.parametrize("src,dst", [(np.float32, np.int32), (np.int64, np.float64), (np.uint16, np.int16),
                                     (np.int8, np.uint8), (np.bool_, np.uint8), (np.uint32, np.float32)])
def test_bitcast_reinterprets_bits(src, dst):
    x = np.array([1, 0, 3, 100], src) if src != np.float32 else np.array([1.5, -0.0, 3.0, 1e30], src)
    model = one_node("BitCast", {"x": x}, {"to": helper.np_dtype_to_tensor_dtype(np.dtype(dst))}, opset=26)
    (y,) = run(model, {"x": x})
    assert y.dtype == dst
    np.testing.assert_array_equal(y, x.view(dst))


def test_bitcast_rejects_different_widths():
    x = np.array([1.0], np.float32)
    model = one_node("BitCast", {"x": x}, {"to": TensorProto.INT64}, opset=26)
    with pytest.raises(ExecutionError, match="same width"):
        run(model, {"x": x})


# -- output types from inference -------------------------------------------------------------


def test_inferred_types_with_symbolic_dims():
    x = np.zeros((1, 4), np.float32)
    c = np.zeros((1, 4), np.bool_)
    sym = {"c": ["N", 1], "x": [1, 4], "y": ["N", 4], "a": ["N", 4], "b": [4]}
    t = out_type(one_node("Where", {"c": c, "x": x, "y": x}, opset=16, shapes=sym))
    assert t.dtype == DType.FLOAT32 and t.shape == ("N", 4)
    t = out_type(one_node("Less", {"a": x, "b": x[0]}, opset=13, shapes=sym))
    assert t.dtype == DType.BOOL and t.shape == ("N", 4)
    t = out_type(one_node("Cast", {"a": x}, {"to": TensorProto.FLOAT16}, opset=13, shapes=sym))
    assert t.dtype == DType.FLOAT16 and t.shape == ("N", 4)
    t = out_type(one_node("Max", {"a": x, "b": x[0], "x": x}, opset=13, shapes=sym))
    assert t.dtype == DType.FLOAT32 and t.shape == ("N", 4)
    t = out_type(one_node("IsInf", {"a": x}, opset=10, shapes=sym))
    assert t.dtype == DType.BOOL and t.shape == ("N", 4)
    t = out_type(one_node("Gelu", {"a": x}, opset=20, shapes=sym))
    assert t.dtype == DType.FLOAT32 and t.shape == ("N", 4)
    t = out_type(one_node("BitCast", {"a": x}, {"to": TensorProto.INT32}, opset=26, shapes=sym))
    assert t.dtype == DType.INT32 and t.shape == ("N", 4)


def test_incompatible_broadcast_fails_at_build():
    a, b = np.zeros((3, 4), np.float32), np.zeros((5,), np.float32)
    with pytest.raises(tensorsmith.errors.ShapeInferenceError):
        tensorsmith.build(one_node("Max", {"a": a, "b": b}, opset=13))
