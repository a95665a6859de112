"""Signal processing ops: DFT, STFT, the window functions and MelWeightMatrix.

ONNX has no complex dtype: a complex tensor is a real tensor whose last dim is 2 (real,
imaginary), and a real signal may come with a last dim of 1. References convert to torch
complex tensors, transform, and convert back.
"""

from __future__ import annotations

import math

import torch

from ..ir import DType, TensorType
from .registry import InferContext, register

# torch's FFT kernels take float32/float64 only (no half types on CPU).
_FFT_DTYPES = (torch.float32, torch.float64)


def _scalar(t: torch.Tensor | None, default=None):
    """A scalar or one-element input as a Python number."""
    if t is None:
        return default
    if t.numel() != 1:
        raise ValueError(f"expected a scalar, got a tensor of shape {list(t.shape)}")
    return t.reshape(-1)[0].item()


def _to_complex(x: torch.Tensor) -> torch.Tensor:
    """[..., 1] real or [..., 2] (re, im) -> a torch complex tensor of shape [...]."""
    if x.dtype not in _FFT_DTYPES:
        x = x.to(torch.float32)
    if x.shape[-1] == 1:
        return torch.complex(x[..., 0], torch.zeros_like(x[..., 0]))
    if x.shape[-1] == 2:
        return torch.complex(x[..., 0], x[..., 1])
    raise ValueError(f"the last dim of a signal must be 1 (real) or 2 (complex), got {x.shape[-1]}")


def _from_complex(c: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
    return torch.stack((c.real, c.imag), dim=-1).to(dtype)


def _signal_axis(axis: int, rank: int) -> int:
    """The transformed axis; the last dim holds (re, im) and cannot be transformed."""
    if not -rank <= axis < rank:
        raise ValueError(f"DFT axis {axis} is out of range for an input of rank {rank}")
    axis %= rank
    if axis == rank - 1:
        raise ValueError("DFT axis cannot be the last dim, which holds the real/imaginary parts")
    return axis


def _dft_axis(ctx, axis_input) -> int:
    # DFT-17 has an `axis` attribute (default 1); DFT-20 made it an input (default -2).
    if ctx.opset < 20:
        return int(ctx.attr("axis", 1))
    return int(_scalar(axis_input, -2))


def _dft(x: torch.Tensor, n: int | None, axis: int, inverse: bool, onesided: bool) -> torch.Tensor:
    """DFT of x (ONNX layout) along `axis`; returns the ONNX layout in x's dtype."""
    length = x.shape[axis]
    if inverse and onesided:
        # A one-sided spectrum of an even-length real signal: the output is real (last dim 1).
        n = n if n is not None else 2 * (length - 1)
        y = torch.fft.irfft(_to_complex(x), n=n, dim=axis)
        return y.unsqueeze(-1).to(x.dtype)
    n = n if n is not None else length
    c = _to_complex(x)
    y = torch.fft.ifft(c, n=n, dim=axis) if inverse else torch.fft.fft(c, n=n, dim=axis)
    if onesided:
        y = y.narrow(axis, 0, n // 2 + 1)
    return _from_complex(y, x.dtype)


def _dft_infer(ctx: InferContext) -> list[TensorType]:
    x = ctx.input(0)
    if x is None or x.shape is None:
        return [TensorType(x.dtype if x else None, None)]
    axis_known = ctx.opset < 20 or ctx.input(2) is None or ctx.const(2) is not None
    if not axis_known:
        return [TensorType(x.dtype, None)]
    rank = len(x.shape)
    try:
        axis = int(ctx.attr("axis", 1)) if ctx.opset < 20 else int(_scalar(ctx.const(2), -2))
        axis = _signal_axis(axis, rank)
    except ValueError as e:
        raise ctx.fail(str(e)) from None
    inverse, onesided = bool(ctx.attr("inverse", 0)), bool(ctx.attr("onesided", 0))
    length = x.shape[axis]
    n = None
    if ctx.input(1) is not None:
        c = ctx.const(1)
        n = int(_scalar(c)) if c is not None else f"{ctx.node.name}_dft_length"
    shape = list(x.shape)
    if inverse and onesided:
        if n is None:
            n = 2 * (length - 1) if isinstance(length, int) else f"{ctx.node.name}_n"
        shape[axis], shape[-1] = n, 1
    else:
        n = length if n is None else n
        shape[axis] = (n // 2 + 1 if isinstance(n, int) else f"{ctx.node.name}_bins") if onesided else n
        shape[-1] = 2
    return [TensorType(x.dtype, tuple(shape))]


@register("DFT", infer=_dft_infer)
def dft(ctx, x, dft_length=None, axis=None):
    n = _scalar(dft_length)
    axis = _signal_axis(_dft_axis(ctx, axis), x.dim())
    return _dft(x, None if n is None else int(n), axis, bool(ctx.attr("inverse", 0)), bool(ctx.attr("onesided", 0)))


def _stft_frame_length(signal_len: int, window_len: int | None, frame_length: int | None) -> int:
    if frame_length is not None:
        return frame_length
    return window_len if window_len is not None else signal_len


def _stft_infer(ctx: InferContext) -> list[TensorType]:
    x, w = ctx.input(0), ctx.input(2)
    if x is None or x.shape is None or len(x.shape) != 3:
        return [TensorType(x.dtype if x else None, None)]
    name = ctx.node.name
    step = ctx.const(1)
    fl_const = ctx.const(3)
    if ctx.input(3) is not None and fl_const is None:
        fl = None
    else:
        wl = w.shape[0] if w is not None and w.shape is not None else None
        if w is not None and wl is None and fl_const is None:
            fl = None
        else:
            fl = _stft_frame_length(x.shape[1], wl, None if fl_const is None else int(_scalar(fl_const)))
    sig = x.shape[1]
    frames = f"{name}_frames"
    if step is not None and isinstance(fl, int) and isinstance(sig, int):
        frames = (sig - fl) // int(_scalar(step)) + 1
    bins = f"{name}_bins"
    if isinstance(fl, int):
        bins = fl // 2 + 1 if ctx.attr("onesided", 1) else fl
    return [TensorType(x.dtype, (x.shape[0], frames, bins, 2))]


@register("STFT", infer=_stft_infer)
def stft(ctx, signal, frame_step, window=None, frame_length=None):
    if signal.dim() != 3:
        raise ValueError(f"STFT signal must be [batch, length, 1 or 2], got shape {list(signal.shape)}")
    step = int(_scalar(frame_step))
    if step <= 0:
        raise ValueError(f"STFT frame_step must be positive, got {step}")
    window_len = None if window is None else window.shape[0]
    fl = _stft_frame_length(signal.shape[1], window_len, None if frame_length is None else int(_scalar(frame_length)))
    if window is not None and window.shape[0] != fl:
        raise ValueError(f"STFT window has length {window.shape[0]}, frame_length is {fl}")
    if not 0 < fl <= signal.shape[1]:
        raise ValueError(f"STFT frame_length {fl} does not fit a signal of length {signal.shape[1]}")
    # [batch, frames, re/im, frame_length] -> [batch, frames, frame_length, re/im]
    frames = signal.unfold(1, fl, step).transpose(-1, -2)
    if window is not None:
        frames = frames * window.to(frames.dtype).reshape(fl, 1)
    return _dft(frames, fl, 2, inverse=False, onesided=bool(ctx.attr("onesided", 1)))


# -- windows -----------------------------------------------------------------------------


def _window_dtype(ctx) -> DType:
    return DType.from_onnx(int(ctx.attr("output_datatype", 1)), "the output_datatype of a window op")


def _window_infer(ctx: InferContext) -> list[TensorType]:
    size = ctx.const(0)
    shape = (int(_scalar(size)),) if size is not None else (f"{ctx.node.name}_size",)
    return [TensorType(_window_dtype(ctx), shape)]


def _cosine_window(ctx, size: torch.Tensor, coeffs: tuple[float, ...]) -> torch.Tensor:
    """sum_k (-1)^k a_k cos(2 pi k n / N), N = size (periodic) or size - 1 (symmetric)."""
    n = int(_scalar(size))
    if n < 0:
        raise ValueError(f"window size must be non-negative, got {n}")
    periodic = bool(ctx.attr("periodic", 1))
    denom = n if periodic else n - 1
    dtype = _window_dtype(ctx).torch
    if denom <= 0:
        # A symmetric window of one sample is [1], as in torch and scipy (the formula gives 0/0).
        return torch.ones(n, dtype=dtype, device=size.device)
    phase = torch.arange(n, dtype=torch.float64, device=size.device) * (2 * math.pi / denom)
    w = torch.zeros(n, dtype=torch.float64, device=size.device)
    for k, a in enumerate(coeffs):
        w += (-1) ** k * a * torch.cos(k * phase)
    return w.to(dtype)


@register("HannWindow", infer=_window_infer)
def hann_window(ctx, size):
    return _cosine_window(ctx, size, (0.5, 0.5))


@register("HammingWindow", infer=_window_infer)
def hamming_window(ctx, size):
    return _cosine_window(ctx, size, (25 / 46, 21 / 46))


@register("BlackmanWindow", infer=_window_infer)
def blackman_window(ctx, size):
    return _cosine_window(ctx, size, (0.42, 0.5, 0.08))


# -- MelWeightMatrix -----------------------------------------------------------------------


def _mel_infer(ctx: InferContext) -> list[TensorType]:
    mels, dft_len = ctx.const(0), ctx.const(1)
    rows = int(_scalar(dft_len)) // 2 + 1 if dft_len is not None else f"{ctx.node.name}_bins"
    cols = int(_scalar(mels)) if mels is not None else f"{ctx.node.name}_mels"
    return [TensorType(_window_dtype(ctx), (rows, cols))]


def _hz_to_mel(hz: float) -> float:
    return 2595 * math.log10(1 + hz / 700)


def _mel_to_hz(mel: float) -> float:
    return 700 * (10 ** (mel / 2595) - 1)


@register("MelWeightMatrix", infer=_mel_infer)
def mel_weight_matrix(ctx, num_mel_bins, dft_length, sample_rate, lower_edge_hertz, upper_edge_hertz):
    mels, n_fft = int(_scalar(num_mel_bins)), int(_scalar(dft_length))
    rate, low, high = _scalar(sample_rate), float(_scalar(lower_edge_hertz)), float(_scalar(upper_edge_hertz))
    if mels <= 0 or n_fft <= 0 or rate <= 0:
        raise ValueError("MelWeightMatrix needs positive num_mel_bins, dft_length and sample_rate")
    # num_mel_bins + 2 points evenly spaced in mel, mapped to the FFT bin at or below them.
    low_mel, high_mel = _hz_to_mel(low), _hz_to_mel(high)
    step = (high_mel - low_mel) / (mels + 2)
    bins = [int(((n_fft + 1) * _mel_to_hz(i * step + low_mel)) // rate) for i in range(mels + 2)]
    rows = n_fft // 2 + 1
    out = [[0.0] * mels for _ in range(rows)]
    for i in range(mels):
        left, center, right = bins[i], bins[i + 1], bins[i + 2]
        if center == left:
            out[center][i] = 1.0
        else:
            for j in range(left, center + 1):
                out[j][i] = (j - left) / (center - left)
        for j in range(center, right):
            out[j][i] = (right - j) / (right - center)
    return torch.tensor(out, dtype=torch.float64, device=num_mel_bins.device).to(_window_dtype(ctx).torch)
