"""Neural-network ops: convolutions and pooling.

These are the hot path of most models, so each has an explicit inference rule that keeps
symbolic batch dims, and the compute goes through torch.nn.functional (cuDNN/cuBLAS on a GPU).
ONNX pads may be asymmetric and pooling has ONNX's own ceil-mode rule, so the window
geometry is computed here once (`_window_geometry`) and the input is padded explicitly
where torch's symmetric padding cannot express it.
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F

from ..ir import DType, TensorType
from ._util import WIDE_UINTS, compute_dtype, narrow, widen
from .inference import fresh_dim
from .registry import InferContext, register

_CONV = {1: F.conv1d, 2: F.conv2d, 3: F.conv3d}
_CONV_T = {1: F.conv_transpose1d, 2: F.conv_transpose2d, 3: F.conv_transpose3d}
_MAX_POOL = {1: F.max_pool1d, 2: F.max_pool2d, 3: F.max_pool3d}
_AVG_POOL = {1: F.avg_pool1d, 2: F.avg_pool2d, 3: F.avg_pool3d}


# -- window geometry (conv and pooling) -------------------------------------------------


def _window_attrs(ctx, n: int, kernel: list[int]) -> tuple[list[int], list[int], list[int]]:
    """strides, dilations and pads (begin..., end...) with their ONNX defaults."""
    strides = list(ctx.attr("strides", None) or [1] * n)
    dilations = list(ctx.attr("dilations", None) or [1] * n)
    pads = list(ctx.attr("pads", None) or [0] * (2 * n))
    if len(strides) != n or len(dilations) != n or len(pads) != 2 * n or len(kernel) != n:
        raise ValueError(f"kernel_shape/strides/dilations/pads do not match {n} spatial dims")
    return strides, dilations, pads


def _out_size(size, ext: int, stride: int, pb: int, pe: int, auto_pad: str, ceil_mode: bool):
    """Output length of a window of extent `ext` sliding over `size` (ONNX rules).

    `size` may be a symbol: the output keeps it when the op preserves length, else gets a new one.
    """
    if isinstance(size, str):
        same = stride == 1 and (auto_pad in ("SAME_UPPER", "SAME_LOWER") or (
            auto_pad in ("NOTSET", "") and pb + pe == ext - 1) or (auto_pad == "VALID" and ext == 1))
        return size if same else fresh_dim()
    if auto_pad in ("SAME_UPPER", "SAME_LOWER"):
        return -(-size // stride)
    if auto_pad == "VALID":
        pb = pe = 0
    span = size + pb + pe - ext
    if not ceil_mode:
        return span // stride + 1
    out = -(-span // stride) + 1
    # ONNX (and torch): the last window must start inside the input or the leading padding.
    if (out - 1) * stride >= size + pb:
        out -= 1
    return out


def _window_geometry(ctx, sizes: list[int], kernel: list[int], ceil_mode: bool = False):
    """Output sizes and the (begin, end) padding that makes a floor-mode window yield exactly them.

    The end padding may exceed the declared pads (ceil mode) or be negative (trailing rows no
    window reaches); F.pad handles both.
    """
    n = len(sizes)
    strides, dilations, pads = _window_attrs(ctx, n, kernel)
    auto_pad = ctx.attr("auto_pad", "NOTSET")
    outs, begin, end, declared_end = [], [], [], []
    for i in range(n):
        ext = (kernel[i] - 1) * dilations[i] + 1
        pb, pe = pads[i], pads[n + i]
        if auto_pad in ("SAME_UPPER", "SAME_LOWER"):
            out = -(-sizes[i] // strides[i])
            total = max(0, (out - 1) * strides[i] + ext - sizes[i])
            pb = total // 2 if auto_pad == "SAME_UPPER" else total - total // 2
            pe = total - pb
        elif auto_pad == "VALID":
            pb = pe = 0
        elif auto_pad not in ("NOTSET", ""):
            raise ValueError(f"unknown auto_pad '{auto_pad}'")
        out = _out_size(sizes[i], ext, strides[i], pb, pe, "NOTSET", ceil_mode)
        if out < 1:
            raise ValueError(f"spatial dim {i}: input {sizes[i]} is too small for the window (extent {ext})")
        outs.append(out)
        begin.append(pb)
        end.append((out - 1) * strides[i] + ext - sizes[i] - pb)
        declared_end.append(pe)
    return outs, begin, end, declared_end, strides, dilations


def _pad_spatial(x: torch.Tensor, begin: list[int], end: list[int], value: float = 0.0) -> torch.Tensor:
    if not any(begin) and not any(end):
        return x
    flat = []
    for b, e in zip(reversed(begin), reversed(end)):  # F.pad lists the last dim first
        flat += [b, e]
    return F.pad(x, flat, value=value)


def _infer_window_op(ctx: InferContext, channels, kernel, ceil_mode: bool, n_out: int, out_dtypes=None):
    x = ctx.input(0)
    if x is None or x.shape is None or kernel is None or any(isinstance(k, str) for k in kernel):
        return [TensorType(d, None) for d in (out_dtypes or [x.dtype if x else None] * n_out)]
    n = len(x.shape) - 2
    strides, dilations, pads = _window_attrs(ctx, n, kernel)
    auto_pad = ctx.attr("auto_pad", "NOTSET")
    spatial = tuple(
        _out_size(x.shape[2 + i], (kernel[i] - 1) * dilations[i] + 1, strides[i], pads[i], pads[n + i], auto_pad,
                  ceil_mode)
        for i in range(n))
    shape = (x.shape[0], channels, *spatial)
    return [TensorType(d, shape) for d in (out_dtypes or [x.dtype] * n_out)]


# -- Conv / ConvTranspose ---------------------------------------------------------------


def _conv_kernel(ctx, w) -> list | None:
    k = ctx.attr("kernel_shape", None)
    if k is not None:
        return list(k)
    shape = w.shape if isinstance(w, torch.Tensor) else (w.shape if w is not None else None)
    return None if shape is None else list(shape[2:])


def _conv_infer(ctx: InferContext) -> list[TensorType]:
    w = ctx.input(1)
    m = w.shape[0] if w is not None and w.shape is not None else fresh_dim()
    return _infer_window_op(ctx, m, _conv_kernel(ctx, w), False, 1)


@register("Conv", infer=_conv_infer)
def conv(ctx, x, w, b=None):
    n = x.dim() - 2
    if n not in _CONV:
        raise ValueError(f"Conv supports 1-3 spatial dims, got input rank {x.dim()}")
    kernel = _conv_kernel(ctx, w)
    if kernel != list(w.shape[2:]):
        raise ValueError(f"kernel_shape {kernel} does not match the weight shape {list(w.shape)}")
    _, begin, end, _, strides, dilations = _window_geometry(ctx, list(x.shape[2:]), kernel)
    dt = compute_dtype(x)
    xc, wc, bc = x.to(dt), w.to(dt), (b.to(dt) if b is not None else None)
    if begin == end:
        y = _CONV[n](xc, wc, bc, strides, begin, dilations, ctx.attr("group", 1))
    else:
        y = _CONV[n](_pad_spatial(xc, begin, end), wc, bc, strides, 0, dilations, ctx.attr("group", 1))
    return y.to(x.dtype)


def _conv_transpose_geometry(ctx, sizes: list[int], kernel: list[int]):
    """Output sizes and (begin, end) crops of the full transposed-conv output, per ONNX."""
    n = len(sizes)
    strides, dilations, pads = _window_attrs(ctx, n, kernel)
    out_pad = list(ctx.attr("output_padding", None) or [0] * n)
    out_shape = ctx.attr("output_shape", None)
    auto_pad = ctx.attr("auto_pad", "NOTSET")
    full = [strides[i] * (sizes[i] - 1) + out_pad[i] + (kernel[i] - 1) * dilations[i] + 1 for i in range(n)]
    if out_shape is not None or auto_pad in ("SAME_UPPER", "SAME_LOWER"):
        if out_shape is None:
            out_shape = [sizes[i] * strides[i] for i in range(n)]
        out_shape = list(out_shape)[-n:]
        total = [full[i] - out_shape[i] for i in range(n)]
        if auto_pad == "SAME_UPPER":
            begin = [t // 2 for t in total]
        else:
            begin = [t - t // 2 for t in total]
        end = [t - b for t, b in zip(total, begin)]
    else:
        begin, end = pads[:n], pads[n:]
    outs = [full[i] - begin[i] - end[i] for i in range(n)]
    return outs, begin, end, strides, dilations, out_pad


def _conv_transpose_infer(ctx: InferContext) -> list[TensorType]:
    x, w = ctx.input(0), ctx.input(1)
    if x is None or x.shape is None or w is None or w.shape is None:
        return [TensorType(x.dtype if x else None, None)]
    group = ctx.attr("group", 1)
    m = w.shape[1] * group if isinstance(w.shape[1], int) else fresh_dim()
    kernel = _conv_kernel(ctx, w)
    sizes = list(x.shape[2:])
    if any(isinstance(d, str) for d in sizes + kernel):
        out = ctx.attr("output_shape", None)
        spatial = tuple(out[-len(sizes):]) if out is not None else tuple(fresh_dim() for _ in sizes)
    else:
        spatial = tuple(_conv_transpose_geometry(ctx, sizes, kernel)[0])
    return [TensorType(x.dtype, (x.shape[0], m, *spatial))]


@register("ConvTranspose", infer=_conv_transpose_infer)
def conv_transpose(ctx, x, w, b=None):
    n = x.dim() - 2
    if n not in _CONV_T:
        raise ValueError(f"ConvTranspose supports 1-3 spatial dims, got input rank {x.dim()}")
    kernel = _conv_kernel(ctx, w)
    _, begin, end, strides, dilations, out_pad = _conv_transpose_geometry(ctx, list(x.shape[2:]), kernel)
    dt = compute_dtype(x)
    y = _CONV_T[n](x.to(dt), w.to(dt), None, strides, 0, 0, ctx.attr("group", 1), dilations)
    # output_padding adds rows after the full output; pads crop it (negative pads extend it).
    y = _pad_spatial(y, [-v for v in begin], [p - e for p, e in zip(out_pad, end)])
    if b is not None:
        y = y + b.to(dt).reshape(1, -1, *([1] * n))
    return y.to(x.dtype)


# -- pooling ----------------------------------------------------------------------------


def _pool_kernel(ctx) -> list[int]:
    k = ctx.attr("kernel_shape", None)
    if k is None:
        raise ValueError("pooling needs the kernel_shape attribute")
    return list(k)


def _pool_infer(n_out: int = 1):
    def infer(ctx: InferContext) -> list[TensorType]:
        x = ctx.input(0)
        c = x.shape[1] if x is not None and x.shape is not None else None
        dtypes = [x.dtype if x else None, DType.INT64][: max(1, ctx.num_outputs)]
        return _infer_window_op(ctx, c, _pool_kernel(ctx), bool(ctx.attr("ceil_mode", 0)), n_out, dtypes)

    return infer


def _windows(x: torch.Tensor, kernel, strides, dilations) -> torch.Tensor:
    """(N, C, *out, K): every window of a padded input, as a strided view then one copy."""
    n = len(kernel)
    for i in range(n):
        ext = (kernel[i] - 1) * dilations[i] + 1
        x = x.unfold(2 + i, ext, strides[i])[..., :: dilations[i]]
    return x.reshape(*x.shape[: 2 + n], -1)


def _window_sum(x: torch.Tensor, kernel, strides, dilations) -> torch.Tensor:
    """Sum over each window of an already padded float input.

    Dilated windows are gathered and summed: a depthwise conv with a ones kernel would do it
    too, but cuDNN runs float32 convs in TF32 by default, which loses the precision ONNX asks.
    """
    n = len(kernel)
    if all(d == 1 for d in dilations):
        return _AVG_POOL[n](x, kernel, strides) * math.prod(kernel)
    return _windows(x, kernel, strides, dilations).sum(dim=-1)


def _pool_setup(ctx, x):
    n = x.dim() - 2
    if n not in _CONV:
        raise ValueError(f"pooling supports 1-3 spatial dims, got input rank {x.dim()}")
    kernel = _pool_kernel(ctx)
    outs, begin, end, declared_end, strides, dilations = _window_geometry(
        ctx, list(x.shape[2:]), kernel, bool(ctx.attr("ceil_mode", 0)))
    return n, kernel, outs, begin, end, declared_end, strides, dilations


def _onnx_indices(idx: torch.Tensor, x_shape, begin, padded, storage_order: int) -> torch.Tensor:
    """torch's per-plane indices into the padded input -> ONNX's indices into the whole input."""
    sizes = list(x_shape[2:])
    coords, rem = [], idx
    for p in reversed(padded):
        coords.append(rem % p)
        rem = rem // p
    coords = [c - b for c, b in zip(reversed(coords), begin)]
    flat = torch.zeros_like(idx)
    order = range(len(sizes)) if storage_order == 0 else reversed(range(len(sizes)))
    for i in order:
        flat = flat * sizes[i] + coords[i]
    plane = math.prod(sizes)
    nc = torch.arange(idx.shape[0] * idx.shape[1], device=idx.device).reshape(idx.shape[0], idx.shape[1])
    return flat + (nc * plane).reshape(*nc.shape, *([1] * len(sizes)))


@register("MaxPool", infer=_pool_infer(2))
def max_pool(ctx, x):
    n, kernel, outs, begin, end, _, strides, dilations = _pool_setup(ctx, x)
    want_idx = ctx.num_outputs > 1
    if x.dtype.is_floating_point:
        xp = _pad_spatial(x, begin, end, float("-inf"))
        res = _MAX_POOL[n](xp, kernel, strides, 0, dilations, return_indices=want_idx)
        y, idx = res if want_idx else (res, None)
    else:
        xw = widen(x)
        low = torch.iinfo(xw.dtype).min if xw.dtype != torch.bool else 0
        win = _windows(_pad_spatial(xw, begin, end, low), kernel, strides, dilations)
        y, k = win.max(dim=-1)
        y = narrow(y, x.dtype) if x.dtype in WIDE_UINTS else y
        idx = _window_argmax_to_plane(k, kernel, strides, dilations, outs, begin, end, x) if want_idx else None
    if not want_idx:
        return y
    padded = [x.shape[2 + i] + begin[i] + end[i] for i in range(n)]
    return y, _onnx_indices(idx, x.shape, begin, padded, ctx.attr("storage_order", 0))


def _window_argmax_to_plane(k, kernel, strides, dilations, outs, begin, end, x) -> torch.Tensor:
    """Position in a window (row-major over the kernel) -> flat index into the padded plane."""
    n = len(kernel)
    padded = [x.shape[2 + i] + begin[i] + end[i] for i in range(n)]
    rem, offs = k, []
    for i in reversed(range(n)):
        offs.append(rem % kernel[i])
        rem = rem // kernel[i]
    offs.reverse()
    flat = torch.zeros_like(k)
    for i in range(n):
        shape = [1] * (2 + n)
        shape[2 + i] = outs[i]
        start = (torch.arange(outs[i], device=k.device) * strides[i]).reshape(shape)
        flat = flat * padded[i] + start + offs[i] * dilations[i]
    return flat


def _avg_divisor(ctx, x, n, kernel, begin, end, declared_end, strides, dilations) -> torch.Tensor | float:
    """How many elements each window averages over: input only, or input plus declared pads."""
    include_pad = bool(ctx.attr("count_include_pad", 0))
    sizes = list(x.shape[2:])
    if include_pad and all(e <= d for e, d in zip(end, declared_end)):
        return float(math.prod(kernel))
    mask = torch.ones([1, 1, *sizes], dtype=x.dtype, device=x.device)
    if include_pad:
        mask = _pad_spatial(mask, begin, declared_end, 1.0)
        mask = _pad_spatial(mask, [0] * n, [e - d for e, d in zip(end, declared_end)], 0.0)
    else:
        mask = _pad_spatial(mask, begin, end, 0.0)
    return _window_sum(mask, kernel, strides, dilations)


@register("AveragePool", infer=_pool_infer(1))
def average_pool(ctx, x):
    n, kernel, _, begin, end, declared_end, strides, dilations = _pool_setup(ctx, x)
    dt = compute_dtype(x)
    xc = x.to(dt)
    total = _window_sum(_pad_spatial(xc, begin, end), kernel, strides, dilations)
    return (total / _avg_divisor(ctx, xc, n, kernel, begin, end, declared_end, strides, dilations)).to(x.dtype)


@register("LpPool", infer=_pool_infer(1))
def lp_pool(ctx, x):
    n, kernel, _, begin, end, _, strides, dilations = _pool_setup(ctx, x)
    p = float(ctx.attr("p", 2))
    dt = compute_dtype(x)
    powered = _pad_spatial(x.to(dt).abs().pow(p), begin, end)
    return _window_sum(powered, kernel, strides, dilations).pow(1.0 / p).to(x.dtype)


def _global_infer(ctx: InferContext) -> list[TensorType]:
    x = ctx.input(0)
    if x is None or x.shape is None:
        return [TensorType(x.dtype if x else None, None)]
    return [TensorType(x.dtype, (*x.shape[:2], *([1] * (len(x.shape) - 2))))]


def _spatial_dims(x: torch.Tensor) -> tuple[int, ...]:
    return tuple(range(2, x.dim()))


@register("GlobalAveragePool", infer=_global_infer)
def global_average_pool(ctx, x):
    return x.to(compute_dtype(x)).mean(dim=_spatial_dims(x), keepdim=True).to(x.dtype)


@register("GlobalMaxPool", infer=_global_infer)
def global_max_pool(ctx, x):
    return x.amax(dim=_spatial_dims(x), keepdim=True)


@register("GlobalLpPool", infer=_global_infer)
def global_lp_pool(ctx, x):
    p = float(ctx.attr("p", 2))
    xc = x.to(compute_dtype(x))
    return xc.abs().pow(p).sum(dim=_spatial_dims(x), keepdim=True).pow(1.0 / p).to(x.dtype)


def _max_unpool_infer(ctx: InferContext) -> list[TensorType]:
    x = ctx.input(0)
    if x is None or x.shape is None:
        return [TensorType(x.dtype if x else None, None)]
    if ctx.input(2) is not None:
        target = ctx.const(2)
        shape = tuple(int(v) for v in target.tolist()) if target is not None else tuple(fresh_dim() for _ in x.shape)
        return [TensorType(x.dtype, shape)]
    kernel = _pool_kernel(ctx)
    n = len(kernel)
    strides, _, pads = _window_attrs(ctx, n, kernel)
    spatial = tuple(
        (d - 1) * strides[i] - pads[i] - pads[n + i] + kernel[i] if isinstance(d, int) else fresh_dim()
        for i, d in enumerate(x.shape[2:]))
    return [TensorType(x.dtype, (*x.shape[:2], *spatial))]


@register("MaxUnpool", infer=_max_unpool_infer)
def max_unpool(ctx, x, indices, output_shape=None):
    n = x.dim() - 2
    kernel = _pool_kernel(ctx)
    strides, _, pads = _window_attrs(ctx, n, kernel)
    inferred = [(x.shape[2 + i] - 1) * strides[i] - pads[i] - pads[n + i] + kernel[i] for i in range(n)]
    shape = [*x.shape[:2], *inferred]
    y = torch.zeros(math.prod(shape), dtype=x.dtype, device=x.device)
    y = y.scatter(0, indices.reshape(-1).to(torch.int64), x.reshape(-1)).reshape(shape)
    if output_shape is None:
        return y
    # As the ONNX reference: indices address the inferred shape; a larger output pads at the end.
    target = [int(v) for v in output_shape.tolist()]
    return _pad_spatial(y, [0] * n, [t - s for t, s in zip(target[2:], inferred)])


def _max_roi_pool_infer(ctx: InferContext) -> list[TensorType]:
    x, rois = ctx.input(0), ctx.input(1)
    ph, pw = ctx.attr("pooled_shape")
    if x is None or x.shape is None or rois is None or rois.shape is None:
        return [TensorType(x.dtype if x else None, None)]
    return [TensorType(x.dtype, (rois.shape[0], x.shape[1], ph, pw))]


def _round_half_away(v: float) -> int:
    return int(math.floor(abs(v) + 0.5)) * (1 if v >= 0 else -1)


@register("MaxRoiPool", infer=_max_roi_pool_infer)
def max_roi_pool(ctx, x, rois):
    ph, pw = ctx.attr("pooled_shape")
    scale = float(ctx.attr("spatial_scale", 1.0))
    h, w = x.shape[2], x.shape[3]
    out = torch.empty((rois.shape[0], x.shape[1], ph, pw), dtype=x.dtype, device=x.device)
    for r, roi in enumerate(rois.tolist()):  # few rois; the window bounds are data-dependent
        b = int(roi[0])
        x1, y1, x2, y2 = (_round_half_away(v * scale) for v in roi[1:5])
        rh, rw = max(y2 - y1 + 1, 1), max(x2 - x1 + 1, 1)
        for i in range(ph):
            hs = min(max(int(math.floor(i * rh / ph)) + y1, 0), h)
            he = min(max(int(math.ceil((i + 1) * rh / ph)) + y1, 0), h)
            for j in range(pw):
                ws = min(max(int(math.floor(j * rw / pw)) + x1, 0), w)
                we = min(max(int(math.ceil((j + 1) * rw / pw)) + x1, 0), w)
                if he <= hs or we <= ws:
                    out[r, :, i, j] = 0
                else:
                    out[r, :, i, j] = x[b, :, hs:he, ws:we].amax(dim=(-2, -1))
    return out
