"""DFT, STFT, the window ops and MelWeightMatrix against onnxruntime and numpy."""

from __future__ import annotations

import numpy as np
import pytest
from onnx import TensorProto, helper

import tensorsmith
from tensorsmith.errors import ExecutionError, ShapeInferenceError
from tensorsmith.ir import DType, TensorType

from ..conftest import ort_run
from . import models
from .models import engine_output

RNG = np.random.default_rng(0)


def one_node(op, inputs, attrs=None, opset=20, consts=None, out_dtype=TensorProto.FLOAT):
    """models.one_node with a float output at opset 20 unless told, inputs in the op's order."""
    names = [n if n is not None else "" for n in _order(op, list(inputs) + list(consts or {}))]
    return models.one_node(op, inputs, attrs, opset, consts=consts, out_dtype=out_dtype, input_names=names)


_SIGNATURES = {
    "DFT": ["x", "dft_length", "axis"],
    "STFT": ["signal", "frame_step", "window", "frame_length"],
}


def _order(op, names):
    """Inputs in the op's positional order, with None for omitted optional ones."""
    sig = _SIGNATURES.get(op)
    if sig is None:
        return names
    present = [n if n in names else None for n in sig]
    while present and present[-1] is None:
        present.pop()
    return present


def as_onnx_complex(c: np.ndarray, dtype=np.float32) -> np.ndarray:
    return np.stack([c.real, c.imag], axis=-1).astype(dtype)


# -- DFT -----------------------------------------------------------------------------------


@pytest.mark.parametrize("opset", [17, 20])
@pytest.mark.parametrize("axis", [1, 2, -2])
def test_dft_axis_attribute_and_input_forms(opset, axis):
    x = RNG.standard_normal((2, 6, 5, 1)).astype(np.float32)
    if opset < 20:
        model = one_node("DFT", {"x": x}, {"axis": axis}, opset=opset)
    else:
        model = one_node("DFT", {"x": x}, consts={"axis": np.array(axis, np.int64)}, opset=opset)
    got = engine_output(model, {"x": x})
    want = np.fft.fft(x[..., 0], axis=axis % 4)
    np.testing.assert_allclose(got, as_onnx_complex(want), rtol=1e-4, atol=1e-4)
    np.testing.assert_allclose(got, ort_run(model, {"x": x})[0], rtol=1e-4, atol=1e-4)


def test_dft_20_defaults_to_axis_minus_2():
    x = RNG.standard_normal((3, 8, 1)).astype(np.float32)
    got = engine_output(one_node("DFT", {"x": x}, opset=20), {"x": x})
    np.testing.assert_allclose(got, as_onnx_complex(np.fft.fft(x[..., 0], axis=1)), rtol=1e-4, atol=1e-4)


def test_dft_axis_as_runtime_input():
    x = RNG.standard_normal((2, 4, 6, 1)).astype(np.float32)
    axis = np.array(1, np.int64)
    model = one_node("DFT", {"x": x, "axis": axis})
    np.testing.assert_allclose(engine_output(model, {"x": x, "axis": axis}), as_onnx_complex(np.fft.fft(x[..., 0], axis=1)),
                               rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("n", [6, 8, 12])  # truncate, keep, zero-pad
@pytest.mark.parametrize("onesided", [0, 1])
def test_dft_real_input_with_length_and_onesided(n, onesided):
    x = RNG.standard_normal((2, 8, 1)).astype(np.float32)
    model = one_node("DFT", {"x": x}, {"onesided": onesided}, consts={"dft_length": np.array(n, np.int64)})
    want = np.fft.fft(x[..., 0], n=n, axis=1)
    if onesided:
        want = want[:, : n // 2 + 1]
    got = engine_output(model, {"x": x})
    np.testing.assert_allclose(got, as_onnx_complex(want), rtol=1e-4, atol=1e-4)
    np.testing.assert_allclose(got, ort_run(model, {"x": x})[0], rtol=1e-4, atol=1e-4)
    assert tensorsmith.import_onnx(model).outputs[0].type == TensorType(DType.FLOAT32, (2, want.shape[1], 2))


def test_dft_complex_input_and_inverse_round_trip():
    c = RNG.standard_normal((2, 7)) + 1j * RNG.standard_normal((2, 7))
    x = as_onnx_complex(c)
    fwd = engine_output(one_node("DFT", {"x": x}, opset=20), {"x": x})
    np.testing.assert_allclose(fwd, as_onnx_complex(np.fft.fft(c, axis=1)), rtol=1e-4, atol=1e-4)
    back = engine_output(one_node("DFT", {"x": fwd}, {"inverse": 1}, opset=20), {"x": fwd})
    np.testing.assert_allclose(back, x, rtol=1e-4, atol=1e-5)


def test_dft_inverse_onesided_is_irfft():
    spec = np.fft.rfft(RNG.standard_normal((3, 10)), axis=1)
    x = as_onnx_complex(spec)
    model = one_node("DFT", {"x": x}, {"inverse": 1, "onesided": 1}, opset=17)
    got = engine_output(model, {"x": x})
    assert got.shape == (3, 10, 1)
    np.testing.assert_allclose(got[..., 0], np.fft.irfft(spec, n=10, axis=1), rtol=1e-4, atol=1e-5)
    assert tensorsmith.import_onnx(model).outputs[0].type == TensorType(DType.FLOAT32, (3, 10, 1))


@pytest.mark.parametrize("dtype", [np.float16, np.float64])
def test_dft_keeps_the_input_dtype(dtype):
    x = RNG.standard_normal((1, 8, 1)).astype(dtype)
    got = engine_output(one_node("DFT", {"x": x}, opset=20, out_dtype=helper.np_dtype_to_tensor_dtype(np.dtype(dtype))), {"x": x})
    assert got.dtype == dtype
    tol = 1e-2 if dtype == np.float16 else 1e-10
    np.testing.assert_allclose(got, as_onnx_complex(np.fft.fft(x[..., 0].astype(np.float64), axis=1), dtype),
                               rtol=tol, atol=tol)


def test_dft_rejects_the_last_axis():
    x = RNG.standard_normal((2, 8, 1)).astype(np.float32)
    with pytest.raises(ShapeInferenceError, match="last dim"):
        tensorsmith.build(one_node("DFT", {"x": x}, {"axis": 2}, opset=17))
    x = RNG.standard_normal((2, 8, 3)).astype(np.float32)
    with pytest.raises(ExecutionError, match="1 \\(real\\) or 2"):
        engine_output(one_node("DFT", {"x": x}, opset=20), {"x": x})


# -- STFT ----------------------------------------------------------------------------------


def _numpy_stft(sig, step, length, window, onesided):
    frames = [sig[:, s : s + length] * window for s in range(0, sig.shape[1] - length + 1, step)]
    spec = np.fft.fft(np.stack(frames, axis=1), axis=-1)
    return as_onnx_complex(spec[..., : length // 2 + 1] if onesided else spec)


@pytest.mark.parametrize("onesided", [0, 1])
def test_stft_with_window(onesided):
    sig = RNG.standard_normal((2, 40, 1)).astype(np.float32)
    window = np.hanning(12).astype(np.float32)
    model = one_node("STFT", {"signal": sig}, {"onesided": onesided}, opset=17,
                     consts={"frame_step": np.array(5, np.int64), "window": window})
    got = engine_output(model, {"signal": sig})
    want = _numpy_stft(sig[..., 0], 5, 12, window, onesided)
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-4)
    np.testing.assert_allclose(got, ort_run(model, {"signal": sig})[0], rtol=1e-4, atol=1e-4)
    assert tensorsmith.import_onnx(model).outputs[0].type.shape == want.shape


def test_stft_frame_length_without_window_at_runtime():
    sig = RNG.standard_normal((1, 33, 1)).astype(np.float32)
    feeds = {"signal": sig, "frame_step": np.array(4, np.int64), "frame_length": np.array(8, np.int64)}
    got = engine_output(one_node("STFT", feeds, opset=17), feeds)
    np.testing.assert_allclose(got, _numpy_stft(sig[..., 0], 4, 8, np.ones(8), True), rtol=1e-4, atol=1e-4)


# -- windows and MelWeightMatrix -------------------------------------------------------------

_WINDOWS = {
    "HannWindow": lambda n, N: 0.5 - 0.5 * np.cos(2 * np.pi * n / N),
    "HammingWindow": lambda n, N: 25 / 46 - 21 / 46 * np.cos(2 * np.pi * n / N),
    "BlackmanWindow": lambda n, N: 0.42 - 0.5 * np.cos(2 * np.pi * n / N) + 0.08 * np.cos(4 * np.pi * n / N),
}


@pytest.mark.parametrize("op", sorted(_WINDOWS))
@pytest.mark.parametrize("periodic", [0, 1])
def test_windows(op, periodic):
    size = np.array(10, np.int32)
    model = one_node(op, {"size": size}, {"periodic": periodic}, opset=17)
    got = engine_output(model, {"size": size})
    want = _WINDOWS[op](np.arange(10), 10 if periodic else 9)
    assert got.dtype == np.float32
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(got, ort_run(model, {"size": size})[0], rtol=1e-5, atol=1e-6)


def test_window_output_datatype_and_static_shape():
    model = one_node("HannWindow", {}, {"output_datatype": TensorProto.DOUBLE}, opset=17,
                     consts={"size": np.array(7, np.int64)}, out_dtype=TensorProto.DOUBLE)
    assert tensorsmith.import_onnx(model).outputs[0].type == TensorType(DType.FLOAT64, (7,))
    got = engine_output(model, {})
    assert got.dtype == np.float64
    np.testing.assert_allclose(got, np.hanning(8)[:7], rtol=1e-12, atol=1e-12)  # periodic = symmetric of size+1


def _mel_feeds(bins=8, n_fft=32, rate=16000, low=20.0, high=8000.0):
    return {
        "num_mel_bins": np.array(bins, np.int64), "dft_length": np.array(n_fft, np.int64),
        "sample_rate": np.array(rate, np.int64), "lower_edge_hertz": np.array(low, np.float32),
        "upper_edge_hertz": np.array(high, np.float32),
    }


@pytest.mark.parametrize("kw", [{}, {"bins": 5, "n_fft": 64, "rate": 8000, "low": 0.0, "high": 4000.0}])
def test_mel_weight_matrix_matches_onnxruntime(kw):
    feeds = _mel_feeds(**kw)
    model = one_node("MelWeightMatrix", feeds, opset=17)
    got = engine_output(model, feeds)
    assert got.shape == (int(feeds["dft_length"]) // 2 + 1, int(feeds["num_mel_bins"]))
    np.testing.assert_allclose(got, ort_run(model, feeds)[0], rtol=1e-5, atol=1e-6)
    assert got.sum() > 0


def test_mel_weight_matrix_static_shape_and_dtype():
    model = one_node("MelWeightMatrix", {}, {"output_datatype": TensorProto.FLOAT16}, opset=17, consts=_mel_feeds(),
                     out_dtype=TensorProto.FLOAT16)
    assert tensorsmith.import_onnx(model).outputs[0].type == TensorType(DType.FLOAT16, (17, 8))
    assert engine_output(model, {}).dtype == np.float16
