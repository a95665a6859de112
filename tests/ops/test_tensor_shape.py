"""Data-movement ops (Reshape, Transpose, Slice, Pad, Split, ...): old- and new-opset forms,
integer and float16 dtypes, compared with onnxruntime or numpy; and the shape inference of shape
subgraphs on a graph with a symbolic batch dim 'N'."""

from __future__ import annotations

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

import tensorsmith
from tensorsmith.ir import DType

from ..conftest import ort_run
from .models import one_node_model

RNG = np.random.default_rng(0)
X = RNG.standard_normal((2, 3, 4, 5)).astype(np.float32)


def run_ours(model, feeds) -> list[np.ndarray]:
    return list(tensorsmith.build(model).run(feeds).values())


def assert_same(ours, expected):
    assert len(ours) == len(expected)
    for a, e in zip(ours, expected):
        e = np.asarray(e)
        assert a.dtype == e.dtype and a.shape == e.shape, (a.dtype, a.shape, e.dtype, e.shape)
        if np.issubdtype(e.dtype, np.floating):
            np.testing.assert_allclose(a, e, rtol=1e-5, atol=1e-6)
        else:
            np.testing.assert_array_equal(a, e)


def check_against_ort(model, feeds):
    """Run tensorsmith and onnxruntime; same dtypes, shapes and values (exact for integers)."""
    ours = run_ours(model, feeds)
    assert_same(ours, ort_run(model, feeds))
    return ours


def i64(*v):
    return np.array(v, dtype=np.int64)


def out_types(model):
    return [str(v.type) for v in tensorsmith.import_onnx(model).outputs]


# -- Reshape, Flatten, Transpose, Squeeze, Unsqueeze ----------------------------------


@pytest.mark.parametrize("opset", [7, 13, 14])
@pytest.mark.parametrize("shape", [(0, -1), (4, 0, -1), (-1,), (2, 3, 20)])
def test_reshape_zero_copies_and_minus_one(opset, shape):
    check_against_ort(*one_node_model("Reshape", [("x", X), ("c_s", i64(*shape))], opset=opset))


def test_reshape_allowzero_keeps_zero_dims():
    x = np.zeros((0, 3), np.float32)
    (y,) = check_against_ort(*one_node_model("Reshape", [("x", x), ("c_s", i64(3, 0))], opset=14, allowzero=1))
    assert y.shape == (3, 0)


def test_reshape_two_minus_ones_is_an_error():
    model, feeds = one_node_model("Reshape", [("x", X), ("s", i64(-1, -1))])
    with pytest.raises(tensorsmith.errors.TensorsmithError, match="more than one -1"):
        run_ours(model, feeds)


@pytest.mark.parametrize("opset", [9, 13])
@pytest.mark.parametrize("axis", [0, 2, 4, -1, -3])
def test_flatten(opset, axis):
    if opset < 11 and axis < 0:
        pytest.skip("negative axes came with opset 11")
    check_against_ort(*one_node_model("Flatten", [("x", X)], opset=opset, axis=axis))


@pytest.mark.parametrize("dtype", [np.float16, np.int8, np.uint16, np.int64, np.bool_])
def test_transpose_dtypes(dtype):
    x = (X * 10).astype(dtype)
    (y,) = run_ours(*one_node_model("Transpose", [("x", x)], perm=[2, 0, 3, 1]))
    assert_same([y], [x.transpose(2, 0, 3, 1)])
    (y,) = run_ours(*one_node_model("Transpose", [("x", x)]))
    assert_same([y], [x.transpose()])


@pytest.mark.parametrize("opset", [11, 13])
def test_squeeze_unsqueeze_attribute_and_input_forms(opset):
    x = RNG.standard_normal((3, 1, 4, 1)).astype(np.float32)
    axes = dict(axes=[1, -1]) if opset < 13 else {}
    ins = [("x", x)] if opset < 13 else [("x", x), ("c_a", i64(1, -1))]
    (y,) = check_against_ort(*one_node_model("Squeeze", ins, opset=opset, **axes))
    assert y.shape == (3, 4)
    axes = dict(axes=[3, 0, -1]) if opset < 13 else {}
    ins = [("x", X)] if opset < 13 else [("x", X), ("c_a", i64(3, 0, -1))]
    (y,) = check_against_ort(*one_node_model("Unsqueeze", ins, opset=opset, **axes))
    assert y.shape == (1, 2, 3, 1, 4, 5, 1)


def test_squeeze_without_axes_drops_all_ones():
    x = np.ones((1, 3, 1), np.int32)
    (y,) = check_against_ort(*one_node_model("Squeeze", [("x", x)], opset=13))
    assert y.shape == (3,)


def test_squeeze_of_a_non_one_dim_is_an_error():
    model, feeds = one_node_model("Squeeze", [("x", X), ("a", i64(1))], opset=13)
    with pytest.raises(tensorsmith.errors.TensorsmithError, match="not 1"):
        run_ours(model, feeds)


# -- Concat, Split ---------------------------------------------------------------------


@pytest.mark.parametrize("dtype", [np.float16, np.int8, np.uint8, np.int64])
def test_concat(dtype):
    a, b = (X * 5).astype(dtype), (X[:, :2] * 3).astype(dtype)
    check_against_ort(*one_node_model("Concat", [("a", a), ("b", b)], axis=-3))


@pytest.mark.parametrize("opset", [11, 13, 18])
def test_split_sizes_attribute_and_input_forms(opset):
    x = np.arange(24, dtype=np.int32).reshape(6, 4)
    ins = [("x", x)] if opset < 13 else [("x", x), ("c_s", i64(1, 0, 5))]
    attrs = dict(split=[1, 0, 5]) if opset < 13 else {}
    ys = check_against_ort(*one_node_model("Split", ins, n_out=3, opset=opset, axis=0, **attrs))
    assert [y.shape for y in ys] == [(1, 4), (0, 4), (5, 4)]


def test_split_equal_parts_and_num_outputs_uneven():
    ys = check_against_ort(*one_node_model("Split", [("x", X)], n_out=2, opset=13, axis=-2))
    assert [y.shape for y in ys] == [(2, 3, 2, 5)] * 2
    x = np.arange(7, dtype=np.float32)
    ys = check_against_ort(*one_node_model("Split", [("x", x)], n_out=3, opset=18, num_outputs=3))
    assert [y.tolist() for y in ys] == [[0, 1, 2], [3, 4, 5], [6]]


# -- Slice -------------------------------------------------------------------------------


def test_slice_opset1_attributes():
    check_against_ort(*one_node_model("Slice", [("x", X)], opset=9, starts=[1, -3], ends=[100, -1], axes=[1, 3]))


@pytest.mark.parametrize("starts,ends,axes,steps", [
    ([-1], [-(2**63)], [2], [-1]),          # reverse a whole axis
    ([10], [0], [3], [-2]),                 # negative step with a clamped start
    ([0, 1], [2**31 - 1, 2**63 - 1], [0, 2], [1, 2]),  # INT_MAX / INT64_MAX ends
    ([5], [1], [1], [1]),                   # empty
    ([-100], [100], [-1], [3]),
])
def test_slice_steps_and_clamping(starts, ends, axes, steps):
    ins = [("x", X), ("c_s", i64(*starts)), ("c_e", i64(*ends)), ("c_a", i64(*axes)), ("c_t", i64(*steps))]
    check_against_ort(*one_node_model("Slice", ins, opset=13))


def test_slice_without_axes_and_steps_inputs():
    check_against_ort(*one_node_model("Slice", [("x", X), ("c_s", i64(1, 1)), ("c_e", i64(2, 3))], opset=13))


# -- Expand, Tile, Pad -------------------------------------------------------------------


def test_expand_both_ways_and_rank_growth():
    x = RNG.standard_normal((3, 1)).astype(np.float16)
    (y,) = check_against_ort(*one_node_model("Expand", [("x", x), ("c_s", i64(2, 1, 6))], opset=13))
    assert y.shape == (2, 3, 6)


def test_tile():
    x = np.arange(6, dtype=np.int64).reshape(2, 3)
    (y,) = check_against_ort(*one_node_model("Tile", [("x", x), ("c_r", i64(2, 3))], opset=13))
    assert y.shape == (4, 9)


@pytest.mark.parametrize("mode", ["constant", "reflect", "edge"])
def test_pad_opset2_attributes(mode):
    x = RNG.standard_normal((3, 4)).astype(np.float32)
    check_against_ort(*one_node_model("Pad", [("x", x)], opset=2, mode=mode, pads=[1, 2, 2, 1], value=1.5))


@pytest.mark.parametrize("mode", ["constant", "reflect", "edge", "wrap"])
def test_pad_axes_and_negative_pads(mode):
    ins = [("x", X), ("c_p", i64(2, -1, 1, 1)), ("", None), ("c_a", i64(-1, 1))]
    (y,) = check_against_ort(*one_node_model("Pad", ins, opset=19, mode=mode))
    assert y.shape == (2, 3, 4, 8)


def test_pad_int_constant_value():
    x = np.arange(6, dtype=np.int32).reshape(2, 3)
    ins = [("x", x), ("c_p", i64(0, 1, 1, 0)), ("v", np.array(7, np.int32))]
    (y,) = check_against_ort(*one_node_model("Pad", ins, opset=13))
    assert y[2, 0] == 7 and y[0, 0] == 7


def test_pad_wide_uint_reflect():
    x = np.arange(12, dtype=np.uint16).reshape(3, 4) + 60000
    (y,) = run_ours(*one_node_model("Pad", [("x", x), ("c_p", i64(1, 2, 2, 1))], opset=18, mode="reflect"))
    assert_same([y], [np.pad(x, ((1, 2), (2, 1)), mode="reflect")])


# -- Shape, Size, ConstantOfShape, Range, EyeLike, Trilu ----------------------------------


@pytest.mark.parametrize("attrs", [{}, {"start": 1}, {"end": -1}, {"start": -3, "end": 3}, {"start": 3, "end": 1}])
def test_shape_start_end(attrs):
    (y,) = check_against_ort(*one_node_model("Shape", [("x", X)], opset=15, **attrs))
    assert y.dtype == np.int64


def test_size():
    (y,) = check_against_ort(*one_node_model("Size", [("x", X)], opset=13))
    assert y == 120 and y.shape == ()


def test_constant_of_shape_int_value():
    value = numpy_helper.from_array(np.array([3], np.int32), "value")
    (y,) = check_against_ort(*one_node_model("ConstantOfShape", [("s", i64(2, 0, 3))], opset=20, value=value))
    assert y.dtype == np.int32 and y.shape == (2, 0, 3)
    (y,) = check_against_ort(*one_node_model("ConstantOfShape", [("s", i64(2, 2))], opset=9))
    assert y.dtype == np.float32 and not y.any()


@pytest.mark.parametrize("start,limit,delta", [(1, 10, 3), (10, 1, -4), (5, 5, 1), (3, 1, 1)])
@pytest.mark.parametrize("dtype", [np.int32, np.int64, np.float32, np.float64])
def test_range(start, limit, delta, dtype):
    ins = [(n, np.array(v, dtype)) for n, v in (("s", start), ("l", limit), ("d", delta))]
    check_against_ort(*one_node_model("Range", ins, opset=11))


def test_range_float16_computes_in_float32():
    ins = [(n, np.array(v, np.float16)) for n, v in (("s", 0.1), ("l", 3.0), ("d", 0.3))]
    (y,) = run_ours(*one_node_model("Range", ins, opset=11))
    assert y.dtype == np.float16
    np.testing.assert_array_equal(y, (np.float32(np.float16(0.1)) + np.arange(10, dtype=np.float32)
                                      * np.float32(np.float16(0.3))).astype(np.float16))


@pytest.mark.parametrize("k", [0, 2, -1])
def test_eyelike(k):
    x = np.zeros((3, 5), np.int32)
    (y,) = check_against_ort(*one_node_model("EyeLike", [("x", x)], opset=9, k=k, dtype=TensorProto.FLOAT))
    assert y.dtype == np.float32
    check_against_ort(*one_node_model("EyeLike", [("x", x)], opset=9, k=k))


@pytest.mark.parametrize("upper", [0, 1])
@pytest.mark.parametrize("k", [None, -1, 2])
def test_trilu(upper, k):
    x = RNG.integers(-9, 9, (2, 3, 4)).astype(np.int64)
    ins = [("x", x)] + ([] if k is None else [("k", np.array(k, np.int64))])
    check_against_ort(*one_node_model("Trilu", ins, opset=14, upper=upper))


# -- DepthToSpace, SpaceToDepth, CenterCropPad ---------------------------------------------


@pytest.mark.parametrize("mode", ["DCR", "CRD"])
def test_depth_to_space_and_back(mode):
    x = RNG.standard_normal((2, 8, 3, 2)).astype(np.float32)
    (y,) = check_against_ort(*one_node_model("DepthToSpace", [("x", x)], opset=13, blocksize=2, mode=mode))
    assert y.shape == (2, 2, 6, 4)
    (z,) = run_ours(*one_node_model("SpaceToDepth", [("x", y)], opset=13, blocksize=2))
    if mode == "DCR":
        np.testing.assert_array_equal(z, x)
    check_against_ort(*one_node_model("SpaceToDepth", [("x", y)], opset=13, blocksize=2))


def test_center_crop_pad():
    x = RNG.standard_normal((5, 4, 3)).astype(np.float32)
    (y,) = check_against_ort(*one_node_model("CenterCropPad", [("x", x), ("c_s", i64(3, 7))], opset=18, axes=[0, -2]))
    assert y.shape == (3, 7, 3)
    np.testing.assert_array_equal(y[:, 1:5], x[1:4])
    assert not y[:, 0].any() and not y[:, 5:].any()


# -- shape inference on a graph with a symbolic batch dim -----------------------------------


def _symbolic_model(nodes, outputs, inits, opset=18):
    g = helper.make_graph(
        nodes, "sym",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", 3, 4, 5]),
         helper.make_tensor_value_info("b", TensorProto.FLOAT, [1, 1, 1, 5])],
        [onnx.ValueInfoProto(name=o) for o in outputs],
        initializer=[numpy_helper.from_array(v, n) for n, v in inits.items()],
    )
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", opset)])


def test_shape_subgraph_keeps_the_batch_symbol():
    nodes = [
        helper.make_node("Shape", ["x"], ["s"]),
        helper.make_node("Gather", ["s", "i0"], ["n"], axis=0),      # N, a scalar
        helper.make_node("Unsqueeze", ["n", "zero"], ["n1"]),        # [N]
        helper.make_node("Concat", ["n1", "m1"], ["tgt"], axis=0),   # [N, -1]
        helper.make_node("Reshape", ["x", "tgt"], ["r"]),
        helper.make_node("Slice", ["s", "one", "big"], ["tail"]),    # [3, 4, 5]
        helper.make_node("Concat", ["m1", "tail"], ["tgt2"], axis=0),
        helper.make_node("Reshape", ["r", "tgt2"], ["r2"]),
        helper.make_node("ConstantOfShape", ["s"], ["z"]),
        helper.make_node("Expand", ["b", "s"], ["e"]),
    ]
    inits = {"i0": np.array(0, np.int64), "zero": i64(0), "m1": i64(-1), "one": i64(1), "big": i64(2**62)}
    model = _symbolic_model(nodes, ["r", "r2", "z", "e", "n"], inits)
    assert out_types(model) == ["float32[N,60]", "float32[N,3,4,5]", "float32[N,3,4,5]", "float32[N,3,4,5]", "int64[]"]
    ours = run_ours(model, {"x": X, "b": X[:1, :1, :1]})
    assert ours[0].shape == (2, 60) and ours[1].shape == X.shape


def test_hot_ops_pass_the_symbol_through():
    nodes = [
        helper.make_node("Transpose", ["x"], ["t"], perm=[0, 2, 3, 1]),
        helper.make_node("Unsqueeze", ["x", "a1"], ["u"]),
        helper.make_node("Squeeze", ["u", "a1"], ["sq"]),
        helper.make_node("Concat", ["x", "x"], ["c"], axis=1),
        helper.make_node("Flatten", ["x"], ["f"], axis=1),
        helper.make_node("Split", ["x", "sp"], ["p0", "p1"], axis=2),
        helper.make_node("Slice", ["x", "one", "three", "ax3"], ["sl"]),
        helper.make_node("Pad", ["x", "pads"], ["pd"]),
        helper.make_node("Tile", ["x", "reps"], ["tl"]),
        helper.make_node("Shape", ["x"], ["sh"], start=1),
        helper.make_node("Size", ["x"], ["sz"]),
    ]
    inits = {"a1": i64(1), "sp": i64(1, 3), "one": i64(1), "three": i64(3), "ax3": i64(3),
             "pads": i64(0, 0, 1, 0, 0, 0, 1, 2), "reps": i64(1, 2, 1, 1)}
    outs = ["t", "sq", "c", "f", "p0", "p1", "sl", "pd", "tl", "sh", "sz"]
    model = _symbolic_model(nodes, outs, inits)
    assert out_types(model) == [
        "float32[N,4,5,3]", "float32[N,3,4,5]", "float32[N,6,4,5]", "float32[N,60]", "float32[N,3,1,5]",
        "float32[N,3,3,5]", "float32[N,3,4,2]", "float32[N,3,6,7]", "float32[N,6,4,5]", "int64[3]", "int64[]",
    ]


def test_range_of_constants_has_a_static_length():
    nodes = [helper.make_node("Range", ["r0", "r9", "r2"], ["rg"])]
    inits = {"r0": np.array(1, np.int32), "r9": np.array(9, np.int32), "r2": np.array(3, np.int32)}
    assert out_types(_symbolic_model(nodes, ["rg"], inits)) == ["int32[3]"]


def test_unknown_shape_input_gives_fresh_dims_of_the_right_rank():
    nodes = [helper.make_node("Reshape", ["x", "s"], ["r"])]
    g = helper.make_graph(
        nodes, "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", 4]),
         helper.make_tensor_value_info("s", TensorProto.INT64, [3])],
        [onnx.ValueInfoProto(name="r")])
    (t,) = tensorsmith.import_onnx(helper.make_model(g, opset_imports=[helper.make_opsetid("", 18)])).outputs
    assert t.type.dtype == DType.FLOAT32 and len(t.type.shape) == 3
    assert all(isinstance(d, str) for d in t.type.shape)
