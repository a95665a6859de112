"""SoftmaxCrossEntropyLoss and NegativeLogLikelihoodLoss against onnxruntime: reductions, weights,
ignore_index, the log_prob output, N-D inputs, float16/float64, and the output types."""

from __future__ import annotations

import numpy as np
import pytest

import tensorsmith

from .test_reduce import check_against_ort, one_node_model

RNG = np.random.default_rng(0)


def _case(shape=(3, 5, 2, 2), dtype=np.float32, ignore=None):
    x = RNG.standard_normal(shape).astype(dtype)
    t = RNG.integers(0, shape[1], (shape[0], *shape[2:])).astype(np.int64)
    if ignore is not None:
        t.reshape(-1)[::3] = ignore
    w = RNG.uniform(0.2, 1.0, shape[1]).astype(dtype)
    return x, t, w


@pytest.mark.parametrize("reduction", ["none", "sum", "mean"])
@pytest.mark.parametrize("weighted", [False, True])
@pytest.mark.parametrize("ignore", [None, 2, -1])
def test_sce(reduction, weighted, ignore):
    x, t, w = _case(ignore=ignore)
    attrs = {"reduction": reduction}
    if ignore is not None:
        attrs["ignore_index"] = ignore
    ins = [("x", x), ("t", t)] + ([("w", w)] if weighted else [])
    model, feeds = one_node_model("SoftmaxCrossEntropyLoss", ins, n_out=2, opset=13, **attrs)
    loss, log_prob = check_against_ort(model, feeds)
    assert loss.shape == (t.shape if reduction == "none" else ())
    assert log_prob.shape == x.shape


@pytest.mark.parametrize("reduction", ["none", "sum", "mean"])
@pytest.mark.parametrize("opset", [12, 13])
def test_nll(reduction, opset):
    x, t, w = _case(shape=(4, 3), ignore=1)
    model, feeds = one_node_model("NegativeLogLikelihoodLoss", [("x", x), ("t", t.astype(np.int32)), ("w", w)],
                                  opset=opset, reduction=reduction, ignore_index=1)
    check_against_ort(model, feeds)


def test_sce_2d_one_output_float64():
    x, t, _ = _case(shape=(6, 4), dtype=np.float64)
    model, feeds = one_node_model("SoftmaxCrossEntropyLoss", [("x", x), ("t", t)], opset=12)
    (loss,) = check_against_ort(model, feeds)
    assert loss.dtype == np.float64


def test_sce_float16_matches_numpy():
    x, t, _ = _case(shape=(3, 4), dtype=np.float16)
    model, feeds = one_node_model("SoftmaxCrossEntropyLoss", [("x", x), ("t", t)], opset=13, reduction="sum")
    (loss,) = tensorsmith.build(model).run(feeds).values()
    xf = x.astype(np.float64)
    lp = xf - xf.max(1, keepdims=True)
    lp = lp - np.log(np.exp(lp).sum(1, keepdims=True))
    want = -lp[np.arange(3), t].sum()
    assert loss.dtype == np.float16
    np.testing.assert_allclose(loss, want, rtol=2e-3)


def test_all_ignored_mean_is_nan():
    x, t, _ = _case(shape=(2, 3))
    t[:] = 7
    model, feeds = one_node_model("NegativeLogLikelihoodLoss", [("x", x), ("t", t)], opset=13, ignore_index=7)
    (loss,) = tensorsmith.build(model).run(feeds).values()
    assert np.isnan(loss)


def test_infer_types():
    x, t, _ = _case(shape=(2, 3, 4))
    model, _ = one_node_model("SoftmaxCrossEntropyLoss", [("x", x), ("t", t)], n_out=2, opset=13,
                              shapes={"x": ["N", 3, "D"], "t": ["N", "D"]}, reduction="none")
    g = tensorsmith.import_onnx(model)
    assert g.outputs[0].type.shape == ("N", "D") and str(g.outputs[0].type.dtype) == "float32"
    assert g.outputs[1].type.shape == ("N", 3, "D")
    model, _ = one_node_model("NegativeLogLikelihoodLoss", [("x", x), ("t", t)], opset=13,
                              shapes={"x": ["N", 3, "D"], "t": ["N", "D"]})
    assert tensorsmith.import_onnx(model).outputs[0].type.shape == ()


def test_bad_target_shape():
    x, t, _ = _case(shape=(2, 3, 4))
    model, feeds = one_node_model("NegativeLogLikelihoodLoss", [("x", x), ("t", t[:, :2])], opset=13)
    with pytest.raises(tensorsmith.errors.TensorsmithError, match="target shape"):
        tensorsmith.build(model).run(feeds)
