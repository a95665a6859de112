"""Index ops (Gather/Scatter families, TopK, ArgMax, Unique, OneHot, NonZero, CumSum, ...):
negative indices, reductions, tie order, old-opset forms and integer dtypes, compared with
onnxruntime or numpy; and their output types on a graph with a symbolic batch dim 'N'."""

from __future__ import annotations

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper

import tensorsmith

from .test_tensor_shape import assert_same, check_against_ort, i64, one_node_model, run_ours

RNG = np.random.default_rng(1)
X = RNG.standard_normal((3, 4, 5)).astype(np.float32)


# -- Gather, GatherElements, GatherND --------------------------------------------------


@pytest.mark.parametrize("axis", [0, 1, -1])
@pytest.mark.parametrize("idx_dtype", [np.int32, np.int64])
def test_gather_negative_indices(axis, idx_dtype):
    idx = np.array([[0, -1], [2, -3]], idx_dtype)
    (y,) = check_against_ort(*one_node_model("Gather", [("x", X), ("i", idx)], opset=13, axis=axis))
    assert y.shape == X.shape[:axis % 3] + (2, 2) + X.shape[axis % 3 + 1:]


def test_gather_scalar_index_and_wide_uint():
    x = np.arange(12, dtype=np.uint32).reshape(3, 4) * 1000000
    (y,) = run_ours(*one_node_model("Gather", [("x", x), ("i", np.array(-1, np.int64))], axis=1))
    assert_same([y], [x[:, -1]])


def test_gather_elements_negative_indices():
    idx = RNG.integers(-4, 4, (3, 2, 5))
    check_against_ort(*one_node_model("GatherElements", [("x", X), ("i", idx)], opset=13, axis=1))


@pytest.mark.parametrize("batch_dims,idx", [
    (0, [[0, 1], [2, -1]]),
    (0, [[[1]], [[0]]]),
    (1, [[1, 2], [0, -1], [3, 3]]),
])
def test_gather_nd(batch_dims, idx):
    idx = np.array(idx, np.int64)
    if (idx < 0).any():  # onnxruntime rejects negative indices; numpy says what they mean
        (y,) = run_ours(*one_node_model("GatherND", [("x", X), ("i", idx)], opset=13, batch_dims=batch_dims))
        pos = np.where(idx < 0, idx + np.array(X.shape[batch_dims:batch_dims + idx.shape[-1]]), idx)
        expected = (X[tuple(pos.T)] if batch_dims == 0 else
                    np.stack([X[b][tuple(pos[b].T)] for b in range(X.shape[0])]))
        assert_same([y], [expected])
    else:
        check_against_ort(*one_node_model("GatherND", [("x", X), ("i", idx)], opset=13, batch_dims=batch_dims))


# -- Scatter, ScatterElements, ScatterND, TensorScatter -------------------------------


@pytest.mark.parametrize("reduction", ["none", "add", "mul", "max", "min"])
@pytest.mark.parametrize("dtype", [np.float32, np.int32])
def test_scatter_elements_reductions_with_duplicates(reduction, dtype):
    data = (RNG.standard_normal((3, 4)) * 5).astype(dtype)
    idx = np.array([[1, 1, -1], [0, 0, 2]], np.int64)
    upd = (RNG.standard_normal((2, 3)) * 5).astype(dtype)
    if reduction == "none":
        idx = np.array([[1, 0, -1], [0, 2, 3]], np.int64)  # no duplicates: the result is defined
    ins = [("d", data), ("i", idx), ("u", upd)]
    check_against_ort(*one_node_model("ScatterElements", ins, opset=18, axis=1, reduction=reduction))


def test_scatter_opset9_and_scatter_elements_opset11():
    data = np.zeros((3, 3), np.float32)
    idx = np.array([[1, 0, 2], [0, 2, 1]], np.int64)
    upd = np.arange(6, dtype=np.float32).reshape(2, 3)
    ins = [("d", data), ("i", idx), ("u", upd)]
    (a,) = check_against_ort(*one_node_model("Scatter", ins, opset=9))
    (b,) = check_against_ort(*one_node_model("ScatterElements", ins, opset=11))
    np.testing.assert_array_equal(a, b)
    assert a[0, 0] == 3 and a[2, 1] == 4


@pytest.mark.parametrize("reduction", ["none", "add", "mul", "max", "min"])
def test_scatter_nd_reductions(reduction):
    data = RNG.standard_normal((4, 3, 2)).astype(np.float32)
    idx = np.array([[1], [3], [1]] if reduction != "none" else [[1], [3], [0]], np.int64)
    upd = RNG.standard_normal((3, 3, 2)).astype(np.float32)
    ins = [("d", data), ("i", idx), ("u", upd)]
    check_against_ort(*one_node_model("ScatterND", ins, opset=18, reduction=reduction))


def test_scatter_nd_element_indices_int64():
    data = np.arange(12, dtype=np.int64).reshape(3, 4)
    idx = np.array([[0, 1], [2, 3]], np.int64)
    upd = np.array([100, 200], np.int64)
    (y,) = check_against_ort(*one_node_model("ScatterND", [("d", data), ("i", idx), ("u", upd)], opset=13))
    assert y[0, 1] == 100 and y[2, 3] == 200


def _tensor_scatter_numpy(past, update, write_indices, axis, mode):
    out = past.copy()
    for prefix in np.ndindex(past.shape[:axis]):
        for s in range(update.shape[axis]):
            c = write_indices[prefix[0]] + s
            if mode == "circular":
                c %= past.shape[axis]
            out[prefix + (c,)] = update[prefix + (s,)]
    return out


@pytest.mark.parametrize("mode,writes", [("linear", [0, 3]), ("circular", [3, 4])])
@pytest.mark.parametrize("axis,past_shape", [(1, (2, 5, 3)), (-2, (2, 3, 5, 4))])
def test_tensor_scatter(mode, writes, axis, past_shape):
    ax = axis % len(past_shape)  # the sequence axis, 5 slots
    past = RNG.standard_normal(past_shape).astype(np.float32)
    update = RNG.standard_normal(past_shape[:ax] + (2,) + past_shape[ax + 1:]).astype(np.float32)
    wi = np.array(writes, np.int64)
    ins = [("p", past), ("u", update), ("w", wi)]
    (y,) = run_ours(*one_node_model("TensorScatter", ins, opset=24, axis=axis, mode=mode))
    assert_same([y], [_tensor_scatter_numpy(past, update, wi, ax, mode)])


def test_tensor_scatter_without_write_indices():
    past = np.zeros((2, 4, 3), np.float16)
    update = np.ones((2, 2, 3), np.float16)
    (y,) = run_ours(*one_node_model("TensorScatter", [("p", past), ("u", update)], opset=24, axis=1))
    assert y.dtype == np.float16 and y[:, :2].all() and not y[:, 2:].any()


# -- OneHot, NonZero, Compress ------------------------------------------------------


@pytest.mark.parametrize("axis", [-1, 0, 1])
def test_onehot_negative_and_out_of_range_indices(axis):
    idx = np.array([[0, -1, 7], [2, -3, -9]], np.int64)
    ins = [("i", idx), ("d", np.array([4], np.int64)), ("v", np.array([-2, 5], np.int64))]
    (y,) = check_against_ort(*one_node_model("OneHot", ins, opset=11, axis=axis))
    assert y.dtype == np.int64 and (y == 5).sum() == 4


def test_onehot_float_indices_and_depth():
    idx = np.array([1.7, 0.2, -1.0], np.float32)
    ins = [("i", idx), ("d", np.array(3.0, np.float32)), ("v", np.array([0, 1], np.float32))]
    (y,) = run_ours(*one_node_model("OneHot", ins, opset=11))
    assert_same([y], [np.array([[0, 1, 0], [1, 0, 0], [0, 0, 1]], np.float32)])


@pytest.mark.parametrize("dtype", [np.float32, np.int8, np.bool_, np.uint16])
def test_nonzero(dtype):
    x = (RNG.integers(0, 3, (3, 4)) > 1).astype(dtype)
    (y,) = run_ours(*one_node_model("NonZero", [("x", x)], opset=13))
    assert_same([y], [np.array(np.nonzero(x), np.int64)])


@pytest.mark.parametrize("axis", [None, 0, -1])
def test_compress(axis):
    cond = np.array([True, False, True], bool)
    attrs = {} if axis is None else {"axis": axis}
    check_against_ort(*one_node_model("Compress", [("x", X), ("c", cond)], opset=11, **attrs))


# -- TopK, ArgMax, ArgMin, Unique ----------------------------------------------------------


@pytest.mark.parametrize("largest", [0, 1])
@pytest.mark.parametrize("axis", [-1, 0])
def test_topk_ties_keep_index_order(largest, axis):
    x = np.array([[3, 1, 3, 2, 1], [2, 2, 2, 0, 2], [1, 3, 3, 3, 0]], np.float32)
    ins = [("x", x), ("c_k", i64(3 if axis == 0 else 4))]
    vals, idx = check_against_ort(*one_node_model("TopK", ins, n_out=2, opset=11, axis=axis, largest=largest))
    assert idx.dtype == np.int64


def test_topk_opset1_attribute_and_uint64():
    x = np.array([[1, 2**63 + 5, 7, 2**63 + 5]], np.uint64)
    vals, idx = run_ours(*one_node_model("TopK", [("x", x)], n_out=2, opset=1, k=3))
    assert_same([vals, idx], [np.array([[2**63 + 5, 2**63 + 5, 7]], np.uint64), np.array([[1, 3, 2]], np.int64)])
    x = RNG.standard_normal((3, 6)).astype(np.float16)
    check_against_ort(*one_node_model("TopK", [("x", x), ("c_k", i64(2))], n_out=2, opset=10))


@pytest.mark.parametrize("op", ["ArgMax", "ArgMin"])
@pytest.mark.parametrize("keepdims", [0, 1])
@pytest.mark.parametrize("last", [0, 1])
@pytest.mark.parametrize("dtype", [np.float32, np.int32, np.float16])
def test_argmax_argmin(op, keepdims, last, dtype):
    x = RNG.integers(0, 3, (3, 4, 5)).astype(dtype)  # many ties
    (y,) = check_against_ort(*one_node_model(op, [("x", x)], opset=12, axis=-2, keepdims=keepdims,
                                             select_last_index=last))
    assert y.dtype == np.int64


def test_argmax_opset7_default_axis_and_uint16():
    x = np.array([[1, 60000, 3], [60000, 2, 60000]], np.uint16)
    (y,) = run_ours(*one_node_model("ArgMax", [("x", x)], opset=7))
    assert_same([y], [np.array([[1, 0, 1]], np.int64)])


@pytest.mark.parametrize("sorted_", [0, 1])
@pytest.mark.parametrize("axis", [None, 0, -1])
def test_unique_four_outputs(sorted_, axis):
    x = np.array([[1, 3, 1], [2, 0, 2], [1, 3, 1]], np.int64)
    attrs = {"sorted": sorted_} if axis is None else {"sorted": sorted_, "axis": axis}
    ys = check_against_ort(*one_node_model("Unique", [("x", x)], n_out=4, opset=11, **attrs))
    assert [y.dtype for y in ys[1:]] == [np.int64] * 3


def test_unique_float_first_occurrence_order():
    x = np.array([2.0, 1.5, 2.0, -1.0, 1.5], np.float32)
    ys = run_ours(*one_node_model("Unique", [("x", x)], n_out=4, opset=11, sorted=0))
    assert_same(ys, [np.array([2.0, 1.5, -1.0], np.float32), i64(0, 1, 3), i64(0, 1, 0, 2, 1), i64(2, 2, 1)])


# -- CumSum, CumProd, ReverseSequence ------------------------------------------------------


def _cum_numpy(x, axis, exclusive, reverse, op):
    fn = np.cumsum if op == "CumSum" else np.cumprod
    x = np.flip(x, axis) if reverse else x
    y = fn(x, axis=axis, dtype=x.dtype)
    if exclusive:
        first = np.full_like(np.take(y, [0], axis=axis), 0 if op == "CumSum" else 1)
        y = np.concatenate([first, np.take(y, range(x.shape[axis] - 1), axis=axis)], axis=axis)
    return np.flip(y, axis) if reverse else y


@pytest.mark.parametrize("op,opset", [("CumSum", 14), ("CumProd", 26)])
@pytest.mark.parametrize("exclusive", [0, 1])
@pytest.mark.parametrize("reverse", [0, 1])
@pytest.mark.parametrize("dtype", [np.float32, np.int32, np.uint32])
def test_cumulative(op, opset, exclusive, reverse, dtype):
    x = RNG.integers(1, 4, (3, 4)).astype(dtype)
    ins = [("x", x), ("a", np.array(-1, np.int32))]
    (y,) = run_ours(*one_node_model(op, ins, opset=opset, exclusive=exclusive, reverse=reverse))
    assert_same([y], [_cum_numpy(x, -1, exclusive, reverse, op)])


def test_cumsum_against_ort():
    ins = [("x", X), ("a", np.array(1, np.int64))]
    check_against_ort(*one_node_model("CumSum", ins, opset=14, exclusive=1, reverse=1))


@pytest.mark.parametrize("time_axis,batch_axis", [(0, 1), (1, 0)])
def test_reverse_sequence(time_axis, batch_axis):
    x = np.arange(4 * 4 * 2, dtype=np.float32).reshape(4, 4, 2)
    lens = np.array([4, 3, 1, 2], np.int64)
    ins = [("x", x), ("l", lens)]
    check_against_ort(*one_node_model("ReverseSequence", ins, opset=10, time_axis=time_axis, batch_axis=batch_axis))


# -- output types with a symbolic batch dim ------------------------------------------------


def test_output_types_with_symbolic_batch():
    nodes = [
        helper.make_node("ArgMax", ["x"], ["am"], axis=1, keepdims=0),
        helper.make_node("NonZero", ["x"], ["nz"]),
        helper.make_node("TopK", ["x", "k"], ["tv", "ti"], axis=-1),
        helper.make_node("Unique", ["x"], ["u0", "u1", "u2", "u3"]),
        helper.make_node("Gather", ["x", "gi"], ["g"], axis=1),
        helper.make_node("GatherElements", ["x", "ge"], ["gel"], axis=0),
        helper.make_node("OneHot", ["ids", "depth", "vals"], ["oh"]),
        helper.make_node("CumSum", ["x", "ax"], ["cs"]),
        helper.make_node("ScatterElements", ["x", "ge", "x"], ["se"]),
    ]
    g = helper.make_graph(
        nodes, "sym",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", 4, 5]),
         helper.make_tensor_value_info("ge", TensorProto.INT64, ["N", 4, 5]),
         helper.make_tensor_value_info("ids", TensorProto.INT32, ["N", 7]),
         helper.make_tensor_value_info("ax", TensorProto.INT32, [])],
        [onnx.ValueInfoProto(name=n)
         for n in ["am", "nz", "tv", "ti", "u0", "u1", "u2", "u3", "g", "gel", "oh", "cs", "se"]],
        initializer=[helper.make_tensor("k", TensorProto.INT64, [1], [2]),
                     helper.make_tensor("gi", TensorProto.INT64, [2, 3], [0, 1, 2, 3, -1, -2]),
                     helper.make_tensor("depth", TensorProto.INT64, [1], [10]),
                     helper.make_tensor("vals", TensorProto.FLOAT16, [2], [0, 1])],
    )
    outs = tensorsmith.import_onnx(helper.make_model(g, opset_imports=[helper.make_opsetid("", 18)])).outputs
    t = {v.name: v.type for v in outs}
    assert str(t["am"]) == "int64[N,5]"
    assert str(t["nz"]).startswith("int64[3,")
    assert str(t["tv"]) == "float32[N,4,2]" and str(t["ti"]) == "int64[N,4,2]"
    assert str(t["u0"]).startswith("float32[") and t["u0"].rank == 1
    assert all(str(t[n]).startswith("int64[") and t[n].rank == 1 for n in ["u1", "u2", "u3"])
    assert str(t["g"]) == "float32[N,2,3,5]"
    assert str(t["gel"]) == "float32[N,4,5]"
    assert str(t["oh"]) == "float16[N,7,10]"
    assert str(t["cs"]) == "float32[N,4,5]" and str(t["se"]) == "float32[N,4,5]"
