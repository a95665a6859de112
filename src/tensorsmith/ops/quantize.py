"""Quantization: QuantizeLinear, DequantizeLinear, DynamicQuantizeLinear, QLinearMatMul,
QLinearConv, MatMulInteger and ConvInteger.

Scales and zero points are per tensor (a scalar or one element), per axis (1-D along `axis`) or
blocked (same rank as x, `block_size` elements of x per element along `axis`). Integer results
are exact: products of zero-point-shifted integers are accumulated in float64, which holds every
int32 sum these ops can produce (|sum| < 2**53) on every device, and requantization rounds half
to even as ONNX does.
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F

from ..ir import DType, TensorType, broadcast_shapes
from ._util import normalize_axis
from .registry import InferContext, register

_INT_RANGES = {
    torch.uint8: (0, 255),
    torch.int8: (-128, 127),
    torch.uint16: (0, 65535),
    torch.int16: (-32768, 32767),
}

# float8 types: largest finite value, the magnitude from which a non-saturating cast overflows,
# whether that magnitude itself overflows (it is a tie that rounds to even), and what overflow gives.
_FLOAT8 = {
    torch.float8_e4m3fn: (448.0, 464.0, False, math.nan),
    torch.float8_e4m3fnuz: (240.0, 248.0, True, math.nan),
    torch.float8_e5m2: (57344.0, 61440.0, True, math.inf),
    torch.float8_e5m2fnuz: (57344.0, 61440.0, True, math.nan),
}


# -- scale / zero-point layout ---------------------------------------------------------


def _layout(p: torch.Tensor, shape: tuple, axis: int, block_size: int) -> torch.Tensor:
    """Reshape or repeat a scale or zero point so that it broadcasts against x of `shape`."""
    if p.dim() == 0:
        return p
    if p.numel() == 1:
        return p.reshape(())
    rank = len(shape)
    axis = normalize_axis(axis, rank)
    if not block_size:
        if p.dim() != 1 or p.shape[0] != shape[axis]:
            raise ValueError(
                f"a per-axis scale or zero point must be 1-D of size {shape[axis]} (axis {axis}), "
                f"got shape {tuple(p.shape)}")
        dims = [1] * rank
        dims[axis] = p.shape[0]
        return p.reshape(dims)
    if block_size < 0:
        raise ValueError(f"block_size must be positive, got {block_size}")
    if p.dim() != rank:
        raise ValueError(f"a blocked scale or zero point must have rank {rank}, got shape {tuple(p.shape)}")
    bad = ValueError(
        f"blocked scale shape {tuple(p.shape)} with block_size {block_size} does not cover x shape {tuple(shape)}")
    if p.shape[axis] * block_size < shape[axis]:
        raise bad
    # The last block may be short: repeat, then cut to x's size.
    full = p.repeat_interleave(block_size, dim=axis).narrow(axis, 0, shape[axis])
    if tuple(full.shape) != tuple(shape):
        raise bad
    return full


def _layout_of(ctx, p: torch.Tensor | None, x: torch.Tensor) -> torch.Tensor | None:
    if p is None:
        return None
    return _layout(p, tuple(x.shape), ctx.attr("axis", 1), ctx.attr("block_size", 0))


# -- QuantizeLinear / DequantizeLinear ---------------------------------------------------


def _quant_dtype(output_dtype: int, zero_point_dtype: DType | None) -> DType:
    """The output type: the zero point's, else the output_dtype attribute, else uint8."""
    if output_dtype:
        declared = DType.from_onnx(output_dtype, "the output_dtype attribute")
        if zero_point_dtype is not None and declared != zero_point_dtype:
            raise ValueError(f"output_dtype {declared} differs from the zero point type {zero_point_dtype}")
        return declared
    return zero_point_dtype or DType.UINT8


def _to_float8(x: torch.Tensor, dtype: torch.dtype, saturate: bool) -> torch.Tensor:
    fmax, limit, tie_overflows, overflow = _FLOAT8[dtype]
    y = x.clamp(-fmax, fmax).to(dtype)
    if saturate:
        return y
    mag = x.abs()
    over = (mag >= limit) if tie_overflows else (mag > limit)
    if math.isinf(overflow):
        # e5m2 keeps the sign of what overflowed.
        inf = torch.where(x > 0, torch.tensor(math.inf, device=x.device), torch.tensor(-math.inf, device=x.device))
        return torch.where(over, inf.to(dtype), y)
    return torch.where(over, torch.tensor(math.nan, device=x.device).to(dtype), y)


def _quantize(ctx, x: torch.Tensor, scale: torch.Tensor, zero_point: torch.Tensor | None,
              out: torch.dtype) -> torch.Tensor:
    precision = ctx.attr("precision", 0)
    s = _layout_of(ctx, scale, x)
    if precision:
        work = DType.from_onnx(precision, "the precision attribute").torch
        q = x.to(work) / s.to(work)
    else:
        q = x / s
    if out in _FLOAT8:
        # The zero point of a float8 type is zero by definition.
        return _to_float8(q.float(), out, bool(ctx.attr("saturate", 1)))
    if out not in _INT_RANGES:
        raise ValueError(f"QuantizeLinear cannot produce {out}")
    # Rounded and shifted in float (the zero point is an integer, so this is exact), then saturated
    # before the cast, so that huge or infinite values clamp instead of wrapping.
    qf = torch.round(q.to(torch.float32) if q.dtype in (torch.float16, torch.bfloat16) else q)
    if zero_point is not None:
        qf = qf + _layout_of(ctx, zero_point, x).to(qf.dtype)
    lo, hi = _INT_RANGES[out]
    return qf.clamp(lo, hi).to(out)


def _quantize_infer(ctx: InferContext) -> list[TensorType]:
    x, zp = ctx.input(0), ctx.input(2)
    try:
        dtype = _quant_dtype(ctx.attr("output_dtype", 0), zp.dtype if zp is not None else None)
    except ValueError as e:
        raise ctx.fail(str(e)) from None
    return [TensorType(dtype, x.shape if x else None)]


@register("QuantizeLinear", infer=_quantize_infer)
def quantize_linear(ctx, x, y_scale, y_zero_point=None):
    zp_dtype = DType.from_torch(y_zero_point.dtype) if y_zero_point is not None else None
    out = _quant_dtype(ctx.attr("output_dtype", 0), zp_dtype).torch
    return _quantize(ctx, x, y_scale, y_zero_point, out)


def _dequantize_dtype(output_dtype: int, scale: DType | None) -> DType | None:
    return DType.from_onnx(output_dtype, "the output_dtype attribute") if output_dtype else scale


def _dequantize_infer(ctx: InferContext) -> list[TensorType]:
    x, scale = ctx.input(0), ctx.input(1)
    dtype = _dequantize_dtype(ctx.attr("output_dtype", 0), scale.dtype if scale else None)
    return [TensorType(dtype, x.shape if x else None)]


@register("DequantizeLinear", infer=_dequantize_infer)
def dequantize_linear(ctx, x, x_scale, x_zero_point=None):
    out = _dequantize_dtype(ctx.attr("output_dtype", 0), DType.from_torch(x_scale.dtype)).torch
    if x_zero_point is not None and x.dtype not in _FLOAT8 and x_zero_point.dtype != x.dtype:
        raise ValueError(f"zero point type {x_zero_point.dtype} differs from x type {x.dtype}")
    # As ONNX's reference: the shift and the scaling are done in float32, then cast.
    dx = x.to(torch.float32)
    if x_zero_point is not None:
        dx = dx - _layout_of(ctx, x_zero_point, x).to(torch.float32)
    return (dx * _layout_of(ctx, x_scale, x).to(torch.float32)).to(out)


# -- DynamicQuantizeLinear -------------------------------------------------------------


def _dynamic_infer(ctx: InferContext) -> list[TensorType]:
    x = ctx.input(0)
    return [TensorType(DType.UINT8, x.shape if x else None), TensorType(x.dtype if x else DType.FLOAT32, ()),
            TensorType(DType.UINT8, ())]


@register("DynamicQuantizeLinear", infer=_dynamic_infer)
def dynamic_quantize_linear(ctx, x):
    xf = x.to(torch.float32)
    zero = torch.zeros((), dtype=torch.float32, device=x.device)
    hi = torch.maximum(zero, xf.max()) if xf.numel() else zero
    lo = torch.minimum(zero, xf.min()) if xf.numel() else zero
    # All-zero x gives scale 1, as onnxruntime does (and as the comment in ONNX's reference says;
    # its code gives 1/255, which quantizes zeros identically).
    scale = torch.where(hi == lo, torch.ones_like(hi), (hi - lo) / 255.0)
    zp = torch.round((0.0 - lo / scale).clamp(0.0, 255.0))
    y = (torch.round(xf / scale) + zp).clamp(0.0, 255.0)
    return y.to(torch.uint8), scale.to(x.dtype), zp.to(torch.uint8)


# -- integer matmul --------------------------------------------------------------------


def _shifted(t: torch.Tensor, zero_point: torch.Tensor | None, per_row: bool) -> torch.Tensor:
    """t - zero_point in float64 (exact for 8/16-bit values). A 1-D zero point of a left operand
    is per row, so it lines up with the second-to-last dim."""
    v = t.to(torch.float64)
    if zero_point is None:
        return v
    zp = zero_point.to(torch.float64)
    if per_row and zp.dim() == 1 and zp.numel() > 1:
        zp = zp.unsqueeze(-1)
    return v - zp


def _row_param(p: torch.Tensor) -> torch.Tensor:
    return p.unsqueeze(-1) if p.dim() == 1 and p.numel() > 1 else p


def _matmul_shape(a, b):
    if a is None or b is None or a.shape is None or b.shape is None:
        return None
    sa, sb = list(a.shape), list(b.shape)
    if not sa or not sb:
        return None
    da, db = len(sa) == 1, len(sb) == 1
    if da:
        sa = [1, *sa]
    if db:
        sb = [*sb, 1]
    batch = broadcast_shapes(tuple(sa[:-2]), tuple(sb[:-2]))
    out = [*batch, sa[-2], sb[-1]]
    if db:
        out.pop(-1)
    if da:
        out.pop(-2 if not db else -1)
    return tuple(out)


def _matmul_infer(dtype_of, b_index: int):
    def infer(ctx: InferContext) -> list[TensorType]:
        a, b = ctx.input(0), ctx.input(b_index)
        try:
            shape = _matmul_shape(a, b)
        except ValueError as e:
            raise ctx.fail(str(e)) from None
        return [TensorType(dtype_of(ctx), shape)]

    return infer


@register("MatMulInteger", infer=_matmul_infer(lambda ctx: DType.INT32, 1))
def matmul_integer(ctx, a, b, a_zero_point=None, b_zero_point=None):
    return torch.matmul(_shifted(a, a_zero_point, True), _shifted(b, b_zero_point, False)).to(torch.int32)


def _requantize(acc: torch.Tensor, multiplier: torch.Tensor, zero_point: torch.Tensor | None,
                out: torch.dtype) -> torch.Tensor:
    """Round acc * multiplier + zero_point (half to even) and saturate into `out`."""
    r = acc * multiplier.to(torch.float64)
    if zero_point is not None:
        r = r + zero_point.to(torch.float64)
    lo, hi = _INT_RANGES[out]
    return torch.round(r).clamp(lo, hi).to(out)


def _qlinear_out(ctx) -> DType | None:
    zp = ctx.input(7)
    return zp.dtype if zp is not None else (ctx.input(0).dtype if ctx.input(0) else None)


@register("QLinearMatMul", infer=_matmul_infer(_qlinear_out, 3))
def qlinear_matmul(ctx, a, a_scale, a_zero_point, b, b_scale, b_zero_point, y_scale, y_zero_point=None):
    acc = torch.matmul(_shifted(a, a_zero_point, True), _shifted(b, b_zero_point, False))
    # The multiplier is formed in the scales' own type, as ONNX's reference does.
    multiplier = _row_param(a_scale) * b_scale / y_scale
    out = y_zero_point.dtype if y_zero_point is not None else a.dtype
    if out not in _INT_RANGES:
        raise ValueError(f"QLinearMatMul cannot produce {out}")
    return _requantize(acc, multiplier, y_zero_point, out)


# -- integer convolution ---------------------------------------------------------------


def _conv_pads(ctx, in_sizes: list[int], kernel: list[int], strides: list[int], dilations: list[int]) -> list[int]:
    """Begin pads then end pads, one per spatial dim, from auto_pad or pads."""
    n = len(in_sizes)
    auto_pad = ctx.attr("auto_pad", "NOTSET")
    if isinstance(auto_pad, bytes):
        auto_pad = auto_pad.decode()
    if auto_pad in ("SAME_UPPER", "SAME_LOWER"):
        begins, ends = [], []
        for size, k, s, d in zip(in_sizes, kernel, strides, dilations):
            out = -(-size // s)
            total = max(0, (out - 1) * s + (k - 1) * d + 1 - size)
            small = total // 2
            begins.append(small if auto_pad == "SAME_UPPER" else total - small)
            ends.append(total - begins[-1])
        return begins + ends
    if auto_pad == "VALID":
        return [0] * (2 * n)
    if auto_pad != "NOTSET":
        raise ValueError(f"unknown auto_pad '{auto_pad}'")
    pads = list(ctx.attr("pads", [0] * (2 * n)))
    if len(pads) != 2 * n:
        raise ValueError(f"pads {pads} must have {2 * n} values")
    return pads


def _conv_params(ctx, x_shape, w_shape):
    n = len(x_shape) - 2
    if n < 1:
        raise ValueError(f"x must have rank >= 3, got shape {tuple(x_shape)}")
    kernel = list(ctx.attr("kernel_shape", w_shape[2:]))
    strides = list(ctx.attr("strides", [1] * n))
    dilations = list(ctx.attr("dilations", [1] * n))
    return kernel, strides, dilations, n


def _int_conv(ctx, x: torch.Tensor, w: torch.Tensor, bias: torch.Tensor | None = None) -> torch.Tensor:
    """Convolution of float64 tensors holding integers (exact)."""
    kernel, strides, dilations, n = _conv_params(ctx, x.shape, w.shape)
    if n > 3:
        raise ValueError(f"{n}-D convolution is not supported")
    if list(w.shape[2:]) != kernel:
        raise ValueError(f"kernel_shape {kernel} differs from the weight shape {tuple(w.shape)}")
    pads = _conv_pads(ctx, list(x.shape[2:]), kernel, strides, dilations)
    torch_pads = []
    for i in reversed(range(n)):  # F.pad lists the last dim first
        torch_pads += [pads[i], pads[n + i]]
    if any(torch_pads):
        x = F.pad(x, torch_pads)
    conv = (F.conv1d, F.conv2d, F.conv3d)[n - 1]
    return conv(x, w, bias, stride=strides, dilation=dilations, groups=ctx.attr("group", 1))


def _weight_zp(zp: torch.Tensor | None, rank: int) -> torch.Tensor | None:
    """A 1-D weight zero point is per output channel (dim 0 of the weight)."""
    if zp is None or zp.dim() == 0 or zp.numel() == 1:
        return None if zp is None else zp.reshape(()).to(torch.float64)
    return zp.to(torch.float64).reshape(-1, *([1] * (rank - 1)))


def _conv_operands(x, x_zero_point, w, w_zero_point):
    xs = _shifted(x, x_zero_point.reshape(()) if x_zero_point is not None else None, False)
    ws = w.to(torch.float64)
    wzp = _weight_zp(w_zero_point, w.dim())
    return xs, (ws - wzp if wzp is not None else ws)


def _conv_infer(dtype_of, w_index: int):
    def infer(ctx: InferContext) -> list[TensorType]:
        x, w = ctx.input(0), ctx.input(w_index)
        dtype = dtype_of(ctx)
        if x is None or w is None or x.shape is None or w.shape is None:
            return [TensorType(dtype, None)]
        kernel, strides, dilations, n = _conv_params(ctx, x.shape, w.shape)
        spatial = list(x.shape[2:])
        out = [x.shape[0], w.shape[0]]
        static = all(isinstance(d, int) for d in spatial) and all(isinstance(k, int) for k in kernel)
        if not static:
            name = ctx.node.name or ctx.node.op_type
            return [TensorType(dtype, tuple(out + [f"{name}_out{i}" for i in range(n)]))]
        pads = _conv_pads(ctx, spatial, kernel, strides, dilations)
        for i in range(n):
            span = spatial[i] + pads[i] + pads[n + i] - (kernel[i] - 1) * dilations[i] - 1
            out.append(span // strides[i] + 1)
        return [TensorType(dtype, tuple(out))]

    return infer


@register("ConvInteger", infer=_conv_infer(lambda ctx: DType.INT32, 1))
def conv_integer(ctx, x, w, x_zero_point=None, w_zero_point=None):
    xs, ws = _conv_operands(x, x_zero_point, w, w_zero_point)
    return _int_conv(ctx, xs, ws).to(torch.int32)


@register("QLinearConv", infer=_conv_infer(_qlinear_out, 3))
def qlinear_conv(ctx, x, x_scale, x_zero_point, w, w_scale, w_zero_point, y_scale, y_zero_point=None, bias=None):
    xs, ws = _conv_operands(x, x_zero_point, w, w_zero_point)
    acc = _int_conv(ctx, xs, ws, bias.to(torch.float64) if bias is not None else None)
    # A 1-D weight scale is per output channel (dim 1 of the result).
    ws_ = w_scale.reshape(-1, *([1] * (acc.dim() - 2))) if w_scale.numel() > 1 else w_scale.reshape(())
    multiplier = x_scale.reshape(()) * ws_ / y_scale.reshape(())
    out = y_zero_point.dtype if y_zero_point is not None else x.dtype
    if out not in _INT_RANGES:
        raise ValueError(f"QLinearConv cannot produce {out}")
    zp = y_zero_point.reshape(()) if y_zero_point is not None else None
    return _requantize(acc, multiplier, zp, out)
