"""Vision ops: Resize/Upsample, GridSample, AffineGrid, RoiAlign, DeformConv and Col2Im.

Resize is separable: along each resized axis, every output index maps to a source
coordinate (by the coordinate transformation mode), and then to a few source indices with
weights (by the interpolation mode). Those tables depend only on sizes, so they are built
once per axis on the host in float64, exactly as ONNX's reference builds them, and applied
on the device as one gather and one weighted sum per axis. One implementation serves every
mode, so nothing depends on which modes torch's interpolate happens to cover.
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F

from ..ir import TensorType
from ._util import ints, normalize_axis
from .inference import fresh_dim
from .registry import InferContext, register

# -- Resize: sizes ----------------------------------------------------------------------


def _floats(t: torch.Tensor | None) -> list[float] | None:
    return None if t is None or t.numel() == 0 else [float(v) for v in t.reshape(-1).tolist()]


def _resize_plan(ctx, shape: list, roi, scales, sizes):
    """Per axis of the input: (output size, scale, roi start, roi end); symbolic dims pass through."""
    rank = len(shape)
    axes = ctx.attr("axes", None)
    axes = list(range(rank)) if axes is None else [normalize_axis(a, rank) for a in axes]
    scales, sizes, roi = _floats(scales), ints(sizes) if sizes is not None and sizes.numel() else None, _floats(roi)
    if (scales is None) == (sizes is None):
        raise ValueError("Resize needs exactly one of scales and sizes")
    given = scales if scales is not None else sizes
    if len(given) != len(axes):
        raise ValueError(f"Resize got {len(given)} scales/sizes for {len(axes)} axes")
    plan = [(d, 1.0, 0.0, 1.0) for d in shape]
    if sizes is not None:
        policy = ctx.attr("keep_aspect_ratio_policy", "stretch")
        ratios = [s / shape[a] if isinstance(shape[a], int) else None for a, s in zip(axes, sizes)]
        if policy != "stretch":
            if None in ratios:
                raise ValueError("keep_aspect_ratio_policy needs static input dims")
            if policy not in ("not_larger", "not_smaller"):
                raise ValueError(f"unknown keep_aspect_ratio_policy '{policy}'")
            r = min(ratios) if policy == "not_larger" else max(ratios)
            ratios = [r] * len(axes)
            sizes = [int(r * shape[a] + 0.5) for a in axes]
        for a, n, r in zip(axes, sizes, ratios):
            plan[a] = (n, r, 0.0, 1.0)
    else:
        for a, s in zip(axes, scales):
            if s <= 0:
                raise ValueError(f"Resize scales must be positive, got {s}")
            out = int(math.floor(s * shape[a])) if isinstance(shape[a], int) else (shape[a] if s == 1 else fresh_dim())
            plan[a] = (out, s, 0.0, 1.0)
    if roi is not None and len(roi) == 2 * len(axes):
        for i, a in enumerate(axes):
            plan[a] = (plan[a][0], plan[a][1], roi[i], roi[len(axes) + i])
    return plan


def _resize_infer(ctx: InferContext) -> list[TensorType]:
    x = ctx.input(0)
    if x is None or x.shape is None:
        return [TensorType(x.dtype if x else None, None)]
    have = [ctx.input(i) is not None for i in (2, 3)]
    consts = [ctx.const(i) for i in (2, 3)]
    if any(h and c is None for h, c in zip(have, consts)):
        return [TensorType(x.dtype, tuple(fresh_dim() for _ in x.shape))]
    try:
        # The roi moves sample points only, never the output size: an unknown one is fine here.
        plan = _resize_plan(ctx, list(x.shape), None, consts[0], consts[1])
    except ValueError as e:
        raise ctx.fail(str(e)) from None
    return [TensorType(x.dtype, tuple(p[0] for p in plan))]


# -- Resize: per-axis tables --------------------------------------------------------------


def _source_coords(mode: str, out_n: int, in_n: int, scale: float, roi: tuple[float, float]):
    """Source coordinate of each output index (float64), and which ones extrapolate (tf_crop_and_resize)."""
    y = torch.arange(out_n, dtype=torch.float64)
    out_w = scale * in_n
    outside = None
    if mode == "align_corners":
        # As ONNX's reference and conformance data: the length is scale * length_original, which
        # may be fractional (ONNX Runtime uses the integer output length; they differ only then).
        x = torch.zeros_like(y) if out_w == 1 else y * (in_n - 1) / (out_w - 1)
    elif mode == "asymmetric":
        x = y / scale
    elif mode == "tf_crop_and_resize":
        start, end = roi
        if out_w == 1:
            x = torch.full_like(y, (end - start) * (in_n - 1) / 2)
        else:
            x = y * (end - start) * (in_n - 1) / (out_w - 1)
        x = x + start * (in_n - 1)
        outside = (x < 0) | (x > in_n - 1)
    elif mode == "pytorch_half_pixel":
        x = torch.full_like(y, -0.5) if out_w == 1 else (y + 0.5) / scale - 0.5
    elif mode == "half_pixel":
        x = (y + 0.5) / scale - 0.5
    elif mode == "half_pixel_symmetric":
        offset = (in_n / 2) * (1 - out_n / out_w)
        x = offset + (y + 0.5) / scale - 0.5
    elif mode == "tf_half_pixel_for_nn":  # Resize-11 only
        x = (y + 0.5) / scale
    else:
        raise ValueError(f"unknown coordinate_transformation_mode '{mode}'")
    return x, outside


def _nearest_index(x: torch.Tensor, nearest_mode: str, scale: float) -> torch.Tensor:
    fl = torch.floor(x)
    frac = x - fl
    if nearest_mode == "round_prefer_floor":
        idx = torch.where(frac > 0.5, fl + 1, fl)
    elif nearest_mode == "round_prefer_ceil":
        idx = torch.where(frac >= 0.5, fl + 1, fl)
    elif nearest_mode == "floor":
        idx = fl
    elif nearest_mode == "ceil":
        idx = torch.ceil(x)
    elif nearest_mode == "simple":  # opset < 11: ONNX Runtime's legacy rule
        idx = torch.ceil(x) if scale < 1 else fl
    else:
        raise ValueError(f"unknown nearest_mode '{nearest_mode}'")
    return idx.to(torch.int64)


def _cubic(t: torch.Tensor, a: float) -> torch.Tensor:
    t = t.abs()
    near = ((a + 2) * t - (a + 3)) * t * t + 1
    far = ((a * t - 5 * a) * t + 8 * a) * t - 4 * a
    return torch.where(t <= 1, near, torch.where(t < 2, far, torch.zeros_like(t)))


def _tap_weights(kind: str, ratio: torch.Tensor, scale: float, antialias: bool, a: float) -> torch.Tensor:
    """(out, n) weights of the n taps around each source coordinate; ratio in (0, 1]."""
    if kind == "linear":
        s = min(scale, 1.0) if antialias else 1.0
        start = int(math.floor(-1 / s) + 1)
        taps = torch.arange(start, 2 - start, dtype=torch.float64)
        w = (1 - ((taps[None, :] - ratio[:, None]) * s).abs()).clamp(0, 1)
    else:
        s = min(scale, 1.0) if antialias else 1.0
        start = int(math.floor(-2 / s) + 1)
        taps = torch.arange(start, 2 - start, dtype=torch.float64)
        w = _cubic((taps[None, :] - ratio[:, None]) * s, a)
    return w / w.sum(dim=1, keepdim=True) if antialias else w


def _axis_table(ctx, kind: str, out_n: int, in_n: int, scale: float, roi: tuple[float, float]):
    """(indices (out, n), weights (out, n) or None for nearest, extrapolated mask or None)."""
    legacy = ctx.opset < 11
    mode = "asymmetric" if legacy else ctx.attr("coordinate_transformation_mode", "half_pixel")
    x, outside = _source_coords(mode, out_n, in_n, scale, roi)
    if kind == "nearest":
        nearest_mode = "simple" if legacy else ctx.attr("nearest_mode", "round_prefer_floor")
        idx = _nearest_index(x, nearest_mode, scale).clamp(0, in_n - 1)
        return idx[:, None], None, outside
    fl = torch.floor(x)
    # As ONNX's reference: an integer coordinate has ratio 1 (it prefers the left neighbour).
    ratio = torch.where(x == fl, torch.ones_like(x), x - fl)
    antialias = bool(ctx.attr("antialias", 0))
    w = _tap_weights(kind, ratio, scale, antialias, float(ctx.attr("cubic_coeff_a", -0.75)))
    n = w.shape[1]
    pad = -(-n // 2)
    xp = x + pad
    p = torch.floor(xp)
    frac = xp - p
    if n % 2 == 0:
        offset = torch.where(frac == 0, torch.full_like(p, -(n // 2)), torch.full_like(p, -(n // 2) + 1))
    else:
        base = -((n - 1) // 2)
        offset = torch.where(frac <= 0.5, torch.full_like(p, base), torch.full_like(p, base + 1))
    idx = (p + offset).to(torch.int64)[:, None] + torch.arange(n)[None, :] - pad
    if ctx.attr("exclude_outside", 0):
        w = torch.where((idx < 0) | (idx >= in_n), torch.zeros_like(w), w)
        total = w.sum(dim=1, keepdim=True)
        w = w / torch.where(total == 0, torch.ones_like(total), total)
    return idx.clamp(0, in_n - 1), w, outside


def _resize_axis(ctx, kind: str, y: torch.Tensor, axis: int, out_n: int, scale: float, roi) -> torch.Tensor:
    idx, w, outside = _axis_table(ctx, kind, out_n, y.shape[axis], scale, roi)
    dev = y.device
    taps = idx.shape[1]
    g = y.index_select(axis, idx.reshape(-1).to(dev))
    if w is not None:
        shape = [1] * y.dim()
        shape[axis] = out_n
        g = g.reshape(*y.shape[:axis], out_n, taps, *y.shape[axis + 1:])
        g = (g * w.to(dev, y.dtype).reshape(*shape[: axis + 1], taps, *shape[axis + 1:])).sum(dim=axis + 1)
    if outside is not None and bool(outside.any()):
        shape = [1] * y.dim()
        shape[axis] = out_n
        fill = torch.tensor(float(ctx.attr("extrapolation_value", 0.0)), dtype=g.dtype, device=dev)
        g = torch.where(outside.to(dev).reshape(shape), fill, g)
    return g


def _resize(ctx, x: torch.Tensor, kind: str, plan) -> torch.Tensor:
    if kind not in ("nearest", "linear", "cubic"):
        raise ValueError(f"unknown Resize mode '{kind}'")
    if kind == "nearest" and ctx.attr("antialias", 0):
        raise ValueError("antialias is not defined for mode 'nearest'")
    # Weighted modes compute in float32 (float64 for float64 and integers, then saturate as ONNX does).
    exact = x.dtype == torch.float64 or not x.dtype.is_floating_point
    y = x if kind == "nearest" else x.to(torch.float64 if exact else torch.float32)
    crop = ctx.attr("coordinate_transformation_mode", "half_pixel") == "tf_crop_and_resize" and ctx.opset >= 11
    for axis, (out_n, scale, r0, r1) in enumerate(plan):
        if out_n == y.shape[axis] and math.isclose(scale, 1.0) and (
                not crop or (math.isclose(r0, 0.0) and math.isclose(r1, 1.0))):
            continue  # identity along this axis (as ONNX's reference skips it)
        y = _resize_axis(ctx, kind, y, axis, out_n, scale, (r0, r1))
    if y.dtype == x.dtype:
        return y
    if not x.dtype.is_floating_point:
        info = torch.iinfo(x.dtype)
        y = y.round().clamp(info.min, info.max)
    return y.to(x.dtype)


def _resize_mode(ctx) -> str:
    mode = ctx.attr("mode", "nearest")
    return {"bilinear": "linear", "trilinear": "linear", "bicubic": "cubic"}.get(mode, mode)


@register("Resize", infer=_resize_infer)
def resize(ctx, x, roi=None, scales=None, sizes=None):
    plan = _resize_plan(ctx, list(x.shape), roi, scales, sizes)
    return _resize(ctx, x, _resize_mode(ctx), plan)


def _upsample_infer(ctx: InferContext) -> list[TensorType]:
    x, scales = ctx.input(0), ctx.const(1)
    if x is None or x.shape is None or scales is None:
        return [TensorType(x.dtype if x else None, None if x is None or x.shape is None else
                           tuple(fresh_dim() for _ in x.shape))]
    return [TensorType(x.dtype, tuple(
        int(math.floor(s * d)) if isinstance(d, int) else (d if s == 1 else fresh_dim())
        for s, d in zip(_floats(scales), x.shape)))]


@register("Upsample", infer=_upsample_infer)
def upsample(ctx, x, scales):
    """Upsample (opset 7-9): Resize with asymmetric coordinates and ORT's legacy nearest rule."""
    s = _floats(scales)
    if len(s) != x.dim():
        raise ValueError(f"Upsample got {len(s)} scales for rank {x.dim()}")
    plan = [(int(math.floor(v * d)), v, 0.0, 1.0) for v, d in zip(s, x.shape)]
    return _resize(_LegacyResize(ctx), x, _resize_mode(ctx), plan)


class _LegacyResize:
    """A RunContext view that makes Resize's tables follow Upsample's (pre-opset-11) rules."""

    def __init__(self, ctx):
        self._ctx = ctx
        self.opset = min(ctx.opset, 10)

    def attr(self, name, default=None):
        return default if name != "mode" else self._ctx.attr(name, default)


# -- GridSample and AffineGrid ----------------------------------------------------------

_GRID_MODES = {"bilinear": "bilinear", "linear": "bilinear", "nearest": "nearest", "bicubic": "bicubic",
               "cubic": "bicubic"}


def _grid_sample_infer(ctx: InferContext) -> list[TensorType]:
    x, grid = ctx.input(0), ctx.input(1)
    if x is None or x.shape is None or grid is None or grid.shape is None:
        return [TensorType(x.dtype if x else None, None)]
    return [TensorType(x.dtype, (x.shape[0], x.shape[1], *grid.shape[1:-1]))]


@register("GridSample", infer=_grid_sample_infer)
def grid_sample(ctx, x, grid):
    mode = ctx.attr("mode", "linear" if ctx.opset >= 20 else "bilinear")
    if mode not in _GRID_MODES:
        raise ValueError(f"unknown GridSample mode '{mode}'")
    mode = _GRID_MODES[mode]
    if mode == "bicubic" and x.dim() != 4:
        raise ValueError("GridSample cubic mode supports 4-D inputs only")
    padding = ctx.attr("padding_mode", "zeros")
    if padding not in ("zeros", "border", "reflection"):
        raise ValueError(f"unknown GridSample padding_mode '{padding}'")
    dt = torch.float64 if x.dtype == torch.float64 else torch.float32
    y = F.grid_sample(x.to(dt), grid.to(dt), mode=mode, padding_mode=padding,
                      align_corners=bool(ctx.attr("align_corners", 0)))
    return y.to(x.dtype)


def _affine_grid_infer(ctx: InferContext) -> list[TensorType]:
    theta, size = ctx.input(0), ctx.const(1)
    if size is None:
        return [TensorType(theta.dtype if theta else None, None)]
    n, _, *spatial = ints(size)
    return [TensorType(theta.dtype, (n, *spatial, len(spatial)))]


@register("AffineGrid", infer=_affine_grid_infer)
def affine_grid(ctx, theta, size):
    dims = ints(size)
    if len(dims) not in (4, 5):
        raise ValueError(f"AffineGrid supports 2-D and 3-D grids, got size {dims}")
    dt = torch.float64 if theta.dtype == torch.float64 else torch.float32
    grid = F.affine_grid(theta.to(dt), dims, align_corners=bool(ctx.attr("align_corners", 0)))
    return grid.to(theta.dtype)


# -- RoiAlign ---------------------------------------------------------------------------


def _roi_align_infer(ctx: InferContext) -> list[TensorType]:
    x, rois = ctx.input(0), ctx.input(1)
    if x is None or x.shape is None or rois is None or rois.shape is None:
        return [TensorType(x.dtype if x else None, None)]
    oh, ow = ctx.attr("output_height", 1), ctx.attr("output_width", 1)
    return [TensorType(x.dtype, (rois.shape[0], x.shape[1], oh, ow))]


def _bilinear_taps(pos: torch.Tensor, size: int):
    """Low/high indices and weights of ONNX RoiAlign's bilinear taps along one axis; valid mask."""
    valid = (pos >= -1.0) & (pos <= size)
    pos = pos.clamp(min=0)
    low = pos.floor().to(torch.int64)
    at_end = low >= size - 1
    low = torch.where(at_end, torch.full_like(low, size - 1), low)
    high = torch.where(at_end, low, low + 1)
    pos = torch.where(at_end, low.to(pos.dtype), pos)
    frac = pos - low
    return low, high, 1 - frac, frac, valid


@register("RoiAlign", infer=_roi_align_infer)
def roi_align(ctx, x, rois, batch_indices):
    oh, ow = int(ctx.attr("output_height", 1)), int(ctx.attr("output_width", 1))
    ratio = int(ctx.attr("sampling_ratio", 0))
    scale = float(ctx.attr("spatial_scale", 1.0))
    mode = ctx.attr("mode", "avg")
    half_pixel = ctx.opset >= 16 and ctx.attr("coordinate_transformation_mode", "half_pixel") == "half_pixel"
    if mode not in ("avg", "max"):
        raise ValueError(f"unknown RoiAlign mode '{mode}'")
    h, w = x.shape[2], x.shape[3]
    dt = torch.float64 if x.dtype == torch.float64 else torch.float32
    xf = x.to(dt)
    out = torch.zeros((rois.shape[0], x.shape[1], oh, ow), dtype=dt, device=x.device)
    offset = 0.5 if half_pixel else 0.0
    # One roi at a time: each has its own sampling grid (its size depends on the roi).
    for r, (box, b) in enumerate(zip(rois.tolist(), batch_indices.tolist())):
        x0, y0, x1, y1 = (v * scale - offset for v in box)
        rw, rh = x1 - x0, y1 - y0
        if not half_pixel:
            rw, rh = max(rw, 1.0), max(rh, 1.0)
        gh = ratio if ratio > 0 else int(math.ceil(rh / oh))
        gw = ratio if ratio > 0 else int(math.ceil(rw / ow))
        ys = _sample_positions(y0, rh / oh, oh, gh, x.device, dt)
        xs = _sample_positions(x0, rw / ow, ow, gw, x.device, dt)
        yl, yh_, wyl, wyh, vy = _bilinear_taps(ys, h)
        xl, xh_, wxl, wxh, vx = _bilinear_taps(xs, w)
        img = xf[int(b)]  # (C, H, W)
        mask = (vy[:, None] & vx[None, :]).to(dt)
        terms = [img[:, yi][:, :, xi] * (wy[:, None] * wx[None, :] * mask)
                 for yi, wy in ((yl, wyl), (yh_, wyh)) for xi, wx in ((xl, wxl), (xh_, wxh))]
        terms = [t.reshape(x.shape[1], oh, gh, ow, gw) for t in terms]
        if mode == "avg":
            out[r] = sum(terms).sum(dim=(2, 4)) / max(gh * gw, 1)
        else:
            # ONNX's max mode: the max over samples of the largest weighted corner.
            out[r] = torch.stack(terms).amax(dim=0).amax(dim=(2, 4))
    return out.to(x.dtype)


def _sample_positions(start: float, bin_size: float, bins: int, grid: int, device, dtype) -> torch.Tensor:
    """Sample coordinates, bin-major: start + p*bin + (i + 0.5) * bin / grid."""
    p = torch.arange(bins, dtype=dtype, device=device)[:, None]
    i = torch.arange(grid, dtype=dtype, device=device)[None, :]
    return (start + p * bin_size + (i + 0.5) * bin_size / grid).reshape(-1)


# -- DeformConv -------------------------------------------------------------------------


def _deform_conv_infer(ctx: InferContext) -> list[TensorType]:
    x, w, offset = ctx.input(0), ctx.input(1), ctx.input(2)
    if x is None or w is None or offset is None or offset.shape is None or w.shape is None:
        return [TensorType(x.dtype if x else None, None)]
    return [TensorType(x.dtype, (x.shape[0], w.shape[0], *offset.shape[2:]))]


@register("DeformConv", infer=_deform_conv_infer)
def deform_conv(ctx, x, w, offset, b=None, mask=None):
    if x.dim() != 4:
        raise ValueError("DeformConv supports 2-D images (rank-4 inputs) only")
    n, c, h, wd = x.shape
    m, cg, kh, kw = w.shape
    group, og = int(ctx.attr("group", 1)), int(ctx.attr("offset_group", 1))
    sh, sw = ctx.attr("strides", None) or [1, 1]
    dh, dw = ctx.attr("dilations", None) or [1, 1]
    pt, pl, _, _ = ctx.attr("pads", None) or [0, 0, 0, 0]
    oh, ow = offset.shape[2], offset.shape[3]
    k = kh * kw
    dt = torch.float64 if x.dtype == torch.float64 else torch.float32
    dev = x.device
    # Absolute sampling positions: output grid + kernel tap + learned offset, per offset group.
    off = offset.to(dt).reshape(n, og, k, 2, oh, ow)
    ky = (torch.arange(kh, device=dev, dtype=dt) * dh).repeat_interleave(kw).reshape(1, 1, k, 1, 1)
    kx = (torch.arange(kw, device=dev, dtype=dt) * dw).repeat(kh).reshape(1, 1, k, 1, 1)
    base_y = (torch.arange(oh, device=dev, dtype=dt) * sh - pt).reshape(1, 1, 1, oh, 1)
    base_x = (torch.arange(ow, device=dev, dtype=dt) * sw - pl).reshape(1, 1, 1, 1, ow)
    py = base_y + ky + off[:, :, :, 0]
    px = base_x + kx + off[:, :, :, 1]
    # grid_sample with align_corners=True addresses pixel centres exactly; zero padding gives
    # the zero contributions of out-of-image corners that deformable convolution specifies.
    # A 1-pixel axis gets a zero row so that normalized coordinates stay well defined.
    xs = F.pad(x.to(dt), (0, int(wd == 1), 0, int(h == 1)))
    hp, wp = xs.shape[2], xs.shape[3]
    gy = py / (hp - 1) * 2 - 1
    gx = px / (wp - 1) * 2 - 1
    grid = torch.stack([gx, gy], dim=-1).reshape(n * og, k * oh, ow, 2)
    xs = xs.reshape(n * og, c // og, hp, wp)
    cols = F.grid_sample(xs, grid, mode="bilinear", padding_mode="zeros", align_corners=True)
    cols = cols.reshape(n, og, c // og, k, oh, ow)
    if mask is not None:
        cols = cols * mask.to(dt).reshape(n, og, 1, k, oh, ow)
    cols = cols.reshape(n, group, cg * k, oh * ow)
    wg = w.to(dt).reshape(group, m // group, cg * k)
    y = torch.einsum("gmk,ngkl->ngml", wg, cols).reshape(n, m, oh, ow)
    if b is not None:
        y = y + b.to(dt).reshape(1, -1, 1, 1)
    return y.to(x.dtype)


# -- Col2Im -----------------------------------------------------------------------------


def _col2im_infer(ctx: InferContext) -> list[TensorType]:
    cols, image, block = ctx.input(0), ctx.const(1), ctx.const(2)
    if cols is None or cols.shape is None or image is None or block is None:
        return [TensorType(cols.dtype if cols else None, None)]
    kprod = math.prod(ints(block))
    c = cols.shape[1] // kprod if isinstance(cols.shape[1], int) else fresh_dim()
    return [TensorType(cols.dtype, (cols.shape[0], c, *ints(image)))]


@register("Col2Im", infer=_col2im_infer)
def col2im(ctx, cols, image_shape, block_shape):
    image, block = ints(image_shape), ints(block_shape)
    nd = len(image)
    dil = ctx.attr("dilations", None) or [1] * nd
    pads = ctx.attr("pads", None) or [0] * (2 * nd)
    strides = ctx.attr("strides", None) or [1] * nd
    padded = [image[i] + pads[i] + pads[nd + i] for i in range(nd)]
    counts = [(padded[i] - ((block[i] - 1) * dil[i] + 1)) // strides[i] + 1 for i in range(nd)]
    n, ck, length = cols.shape
    kprod = math.prod(block)
    if ck % kprod or length != math.prod(counts):
        raise ValueError(f"Col2Im input {list(cols.shape)} does not match block {block} and {counts} blocks")
    c = ck // kprod
    dev = cols.device
    # Flat index into the padded image of each (kernel tap, block position) pair.
    target = torch.zeros((kprod, length), dtype=torch.int64, device=dev)
    for i in range(nd):
        tap = torch.arange(block[i], device=dev) * dil[i]
        pos = torch.arange(counts[i], device=dev) * strides[i]
        tap = tap.reshape([-1 if j == i else 1 for j in range(nd)]).expand(block).reshape(-1, 1)
        pos = pos.reshape([-1 if j == i else 1 for j in range(nd)]).expand(counts).reshape(1, -1)
        target = target * padded[i] + tap + pos
    out = torch.zeros((n, c, math.prod(padded)), dtype=cols.dtype, device=dev)
    out.index_add_(2, target.reshape(-1), cols.reshape(n, c, kprod * length))
    out = out.reshape(n, c, *padded)
    index = [slice(None), slice(None)] + [slice(pads[i], pads[i] + image[i]) for i in range(nd)]
    return out[tuple(index)]

