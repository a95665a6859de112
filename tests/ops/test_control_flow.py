"""If, Loop and Scan against onnxruntime, and the types inferred from their bodies."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from onnx import TensorProto as TP
from onnx import helper

import tensorsmith
from tensorsmith.ir import DType

F32, I64, BOOL = TP.FLOAT, TP.INT64, TP.BOOL


def vi(name, elem, shape=None):
    return helper.make_tensor_value_info(name, elem, shape)


def model_of(nodes, inputs, outputs, opset):
    return helper.make_model(helper.make_graph(nodes, "main", inputs, outputs),
                             opset_imports=[helper.make_opsetid("", opset)])


def run_both(model, feeds):
    """(ours, onnxruntime). Feeds go in as torch tensors, so rank-0 inputs keep their rank."""
    import onnxruntime as ort

    expected = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"]).run(None, feeds)
    got = tensorsmith.build(model).run({k: torch.from_numpy(np.asarray(v)) for k, v in feeds.items()})
    return [t.numpy() for t in got.values()], expected


def assert_same(got, expected):
    assert len(got) == len(expected)
    for g, e in zip(got, expected):
        assert g.dtype == e.dtype and g.shape == e.shape
        np.testing.assert_allclose(g, e, rtol=1e-6, atol=1e-6)


def if_model(opset=11):
    # then: x + 1 (reads x from the enclosing scope); else: a constant int64 -> float cast of another shape
    then_g = helper.make_graph([helper.make_node("Add", ["x", "one"], ["t"])], "then", [], [vi("t", F32, [2, 3])],
                               initializer=[helper.make_tensor("one", F32, [], [1.0])])
    else_g = helper.make_graph([helper.make_node("Neg", ["x"], ["e"])], "else", [], [vi("e", F32, [2, 3])])
    node = helper.make_node("If", ["c"], ["y"], then_branch=then_g, else_branch=else_g)
    return model_of([node], [vi("c", BOOL, []), vi("x", F32, [2, 3])], [vi("y", F32, None)], opset)


@pytest.mark.parametrize("cond", [True, False])
def test_if_reads_outer_scope(cond):
    x = np.arange(6, dtype=np.float32).reshape(2, 3)
    assert_same(*run_both(if_model(), {"c": np.array(cond), "x": x}))


def test_if_inferred_type_from_branches():
    t = tensorsmith.import_onnx(if_model()).outputs[0].type
    assert t.dtype == DType.FLOAT32 and t.shape == (2, 3)


def loop_model(with_cond: bool, opset=11):
    # body(i, cond, acc): acc' = acc + i; keep going while acc' < 10; scan output acc' * 2
    body = helper.make_graph(
        [
            helper.make_node("Cast", ["i"], ["fi"], to=F32),
            helper.make_node("Add", ["acc", "fi"], ["acc2"]),
            helper.make_node("Less", ["acc2", "ten"], ["c2"]),
            helper.make_node("Squeeze", ["c2"], ["cout"], axes=[0]) if opset < 13 else
            helper.make_node("ReduceMin", ["c2"], ["cout"], keepdims=0),
            helper.make_node("Mul", ["acc2", "two"], ["scan"]),
        ],
        "body",
        [vi("i", I64, []), vi("cin", BOOL, []), vi("acc", F32, [1])],
        [vi("cout", BOOL, []), vi("acc2", F32, [1]), vi("scan", F32, [1])],
        initializer=[helper.make_tensor("ten", F32, [1], [10.0]), helper.make_tensor("two", F32, [1], [2.0])],
    )
    if opset >= 13:
        body.node[3].CopyFrom(helper.make_node("Squeeze", ["c2", "zero"], ["cout"]))
        body.initializer.append(helper.make_tensor("zero", I64, [1], [0]))
    node = helper.make_node("Loop", ["m", "c" if with_cond else "", "a0"], ["acc_final", "scans"], body=body)
    inputs = [vi("m", I64, []), vi("a0", F32, [1])]
    if with_cond:
        inputs.insert(1, vi("c", BOOL, []))
    return model_of([node], inputs, [vi("acc_final", F32, None), vi("scans", F32, None)], opset)


@pytest.mark.parametrize("with_cond", [True, False])
@pytest.mark.parametrize("opset", [11, 13])
def test_loop_trip_count_condition_and_scan_outputs(with_cond, opset):
    feeds = {"m": np.array(8, np.int64), "a0": np.array([0.5], np.float32)}
    if with_cond:
        feeds["c"] = np.array(True)
    got, expected = run_both(loop_model(with_cond, opset), feeds)
    if with_cond:
        assert_same(got, expected)
        assert got[1].shape == (5, 1)  # stops when acc reaches 10
    else:
        # The spec makes this a for loop that ignores the body's condition; onnxruntime does not
        # ignore it, so the expectation is computed here.
        acc = 0.5 + np.cumsum(np.arange(8, dtype=np.float32))
        assert_same(got, [acc[-1:], (acc * 2).reshape(8, 1)])


def test_loop_zero_trips_gives_empty_scan_output():
    feeds = {"m": np.array(0, np.int64), "c": np.array(True), "a0": np.array([0.5], np.float32)}
    got, expected = run_both(loop_model(True), feeds)
    assert_same(got, expected)


def test_loop_inferred_types():
    g = tensorsmith.import_onnx(loop_model(True))
    acc, scans = (v.type for v in g.outputs)
    assert acc.dtype == DType.FLOAT32 and acc.shape == (1,)
    assert scans.dtype == DType.FLOAT32 and len(scans.shape) == 2 and scans.shape[1] == 1


def scan_body():
    # state s (2,), scan input x_t (2,): s' = s + x_t; outputs s' and x_t * s'
    return helper.make_graph(
        [helper.make_node("Add", ["s", "xt"], ["s2"]), helper.make_node("Mul", ["xt", "s2"], ["o"])],
        "body", [vi("s", F32, [2]), vi("xt", F32, [2])], [vi("s2", F32, [2]), vi("o", F32, [2])])


@pytest.mark.parametrize("in_axis,in_dir,out_axis,out_dir", [(0, 0, 0, 0), (1, 1, 1, 0), (-1, 0, -1, 1)])
def test_scan9_axes_and_directions(in_axis, in_dir, out_axis, out_dir):
    x = np.arange(10, dtype=np.float32).reshape((5, 2) if in_axis == 0 else (2, 5))
    node = helper.make_node("Scan", ["s0", "x"], ["s", "ys"], body=scan_body(), num_scan_inputs=1,
                            scan_input_axes=[in_axis], scan_input_directions=[in_dir],
                            scan_output_axes=[out_axis], scan_output_directions=[out_dir])
    model = model_of([node], [vi("s0", F32, [2]), vi("x", F32, list(x.shape))],
                     [vi("s", F32, None), vi("ys", F32, None)], 11)
    got, expected = run_both(model, {"s0": np.zeros(2, np.float32), "x": x})
    assert_same(got, expected)
    types = [v.type for v in tensorsmith.import_onnx(model).outputs]
    assert types[0].shape == (2,)
    assert types[1].shape == got[1].shape


def test_scan8_batched():
    x = np.arange(24, dtype=np.float32).reshape(3, 4, 2)  # (batch, seq, 2)
    node = helper.make_node("Scan", ["", "s0", "x"], ["s", "ys"], body=scan_body(), num_scan_inputs=1,
                            directions=[1])
    model = model_of([node], [vi("s0", F32, [3, 2]), vi("x", F32, [3, 4, 2])],
                     [vi("s", F32, None), vi("ys", F32, None)], 8)
    got, expected = run_both(model, {"s0": np.ones((3, 2), np.float32), "x": x})
    assert_same(got, expected)
    types = [v.type for v in tensorsmith.import_onnx(model).outputs]
    assert types[0].shape == (3, 2) and types[1].shape == (3, 4, 2)
