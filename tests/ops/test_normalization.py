"""Normalization ops against onnxruntime and ONNX's reference: opset variants (BatchNormalization
7/9/15, GroupNormalization 18 vs 21), optional statistic outputs, half inputs, and inferred types."""

from __future__ import annotations

import numpy as np
import pytest
from onnx.reference import ReferenceEvaluator

from tensorsmith.ir import DType, TensorType

from .test_nn import check_vs_ort, one_node, out_type, randn, run


def _bn_params(c):
    return {"s": randn(c), "b": randn(c), "m": randn(c), "v": np.abs(randn(c)) + 0.5}


@pytest.mark.parametrize("opset", [7, 9, 15])
def test_batch_norm_inference_vs_ort(opset):
    check_vs_ort("BatchNormalization", {"x": randn(2, 3, 4, 5)}, {"epsilon": 1e-3}, opset=opset,
                 consts=_bn_params(3), rtol=1e-4)


def test_batch_norm_rank2_and_float16():
    check_vs_ort("BatchNormalization", {"x": randn(4, 3)}, opset=15, consts=_bn_params(3), rtol=1e-4)
    x = randn(2, 3, 4, dtype=np.float16)
    (y,) = check_vs_ort("BatchNormalization", {"x": x}, opset=15, consts=_bn_params(3), rtol=2e-3, atol=2e-3)
    assert y.dtype == np.float16


def test_batch_norm_training_mode_matches_reference():
    x = randn(2, 3, 4, 5)
    model = one_node("BatchNormalization", {"x": x}, {"training_mode": 1, "momentum": 0.8}, opset=15, n_outputs=3,
                     consts=_bn_params(3))
    got = run(model, {"x": x})
    want = ReferenceEvaluator(model).run(None, {"x": x})
    for g, w in zip(got, want):
        np.testing.assert_allclose(g, w, rtol=1e-4, atol=1e-5)
    assert out_type(model, 1) == TensorType(DType.FLOAT32, (3,))


def test_instance_norm_vs_ort():
    check_vs_ort("InstanceNormalization", {"x": randn(2, 3, 4, 5)}, {"epsilon": 1e-3},
                 consts={"s": randn(3), "b": randn(3)}, rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("axis", [-1, 1, 0])
def test_layer_norm_with_statistics_vs_ort(axis):
    x = randn(2, 3, 4)
    scale_shape = x.shape[axis:] if axis >= 0 else x.shape[axis:]
    (y, mean, inv) = check_vs_ort("LayerNormalization", {"x": x}, {"axis": axis}, opset=17, n_outputs=3,
                                  consts={"s": randn(*scale_shape), "b": randn(*scale_shape)}, rtol=1e-4, atol=1e-5)
    assert mean.shape == inv.shape == x.shape[: axis % 3] + (1,) * (3 - axis % 3)


def test_layer_norm_broadcast_scale_no_bias_and_half():
    check_vs_ort("LayerNormalization", {"x": randn(2, 3, 4)}, {"axis": 1}, opset=17, consts={"s": randn(1, 4)},
                 rtol=1e-4, atol=1e-5)
    x = randn(3, 8, dtype=np.float16)
    (y,) = check_vs_ort("LayerNormalization", {"x": x}, opset=17, consts={"s": randn(8, dtype=np.float16)},
                        rtol=2e-3, atol=2e-3)
    assert y.dtype == np.float16


def test_layer_norm_infer_types():
    model = one_node("LayerNormalization", {"x": randn(2, 3, 4, dtype=np.float16)}, {"axis": 1}, n_outputs=3,
                     consts={"s": randn(3, 4, dtype=np.float16)}, shapes={"x": ["B", 3, 4]}, opset=17)
    assert out_type(model, 0) == TensorType(DType.FLOAT16, ("B", 3, 4))
    assert out_type(model, 1) == TensorType(DType.FLOAT32, ("B", 1, 1))


def test_group_norm_opset18_scales_per_group():
    x = randn(2, 6, 3)
    model = one_node("GroupNormalization", {"x": x}, {"num_groups": 3}, opset=18,
                     consts={"s": randn(3), "b": randn(3)})
    (got,) = run(model, {"x": x})
    (want,) = ReferenceEvaluator(model).run(None, {"x": x})
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-5)


def test_group_norm_opset21_vs_ort():
    check_vs_ort("GroupNormalization", {"x": randn(2, 6, 3, 2)}, {"num_groups": 2, "epsilon": 1e-3}, opset=21,
                 consts={"s": randn(6), "b": randn(6)}, rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("axis", [-1, 1])
def test_rms_norm_vs_ort(axis):
    x = randn(2, 3, 4)
    check_vs_ort("RMSNormalization", {"x": x}, {"axis": axis}, opset=23, consts={"s": randn(*x.shape[axis:])},
                 rtol=1e-4, atol=1e-5)


def test_lrn_vs_ort():
    check_vs_ort("LRN", {"x": randn(2, 6, 3, 3)}, {"size": 3, "alpha": 0.01, "beta": 0.6, "bias": 1.5}, opset=13,
                 rtol=1e-4, atol=1e-6)


def test_lrn_even_size_window():
    # ORT rejects even sizes; the spec's window is [c - floor((size-1)/2), c + ceil((size-1)/2)].
    x = randn(1, 5, 2, 2)
    (y,) = run(one_node("LRN", {"x": x}, {"size": 4, "alpha": 0.4}, opset=13), {"x": x})
    sq = x.astype(np.float64) ** 2
    want = np.stack([x[:, c] / (1.0 + 0.1 * sq[:, max(0, c - 1): c + 3].sum(1)) ** 0.75 for c in range(5)], 1)
    np.testing.assert_allclose(y, want, rtol=1e-5)


@pytest.mark.parametrize("p,axis", [(1, 0), (2, -1), (2, 1)])
def test_lp_normalization_vs_ort(p, axis):
    check_vs_ort("LpNormalization", {"x": randn(3, 4, 2)}, {"p": p, "axis": axis}, opset=13, rtol=1e-5)


def test_mean_variance_normalization_vs_ort():
    check_vs_ort("MeanVarianceNormalization", {"x": randn(2, 3, 4, 5)}, opset=13, rtol=1e-4, atol=1e-5)
    check_vs_ort("MeanVarianceNormalization", {"x": randn(2, 3, 4)}, {"axes": [1, 2]}, opset=13, rtol=1e-4, atol=1e-5)
