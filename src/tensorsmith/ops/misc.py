"""Ops that fit no family: NonMaxSuppression, Det, and the random generators.

The random ops are registered with deterministic=False so that they are never folded at
build time. A `seed` attribute gives a private generator, so that one node gives the same
values at every run; without it they draw from torch's global generator.
"""

from __future__ import annotations

import torch

from ..ir import DType, TensorType
from .registry import InferContext, register, same_as

# -- NonMaxSuppression ---------------------------------------------------------------------


def _corners(boxes: torch.Tensor, center_point_box: int) -> tuple[torch.Tensor, ...]:
    """(x_min, y_min, x_max, y_max) of [..., 4] boxes, in the input's dtype."""
    if center_point_box == 0:
        # [y1, x1, y2, x2] with the corners in either order ("flipped" boxes are allowed).
        y1, x1, y2, x2 = boxes.unbind(-1)
        return torch.minimum(x1, x2), torch.minimum(y1, y2), torch.maximum(x1, x2), torch.maximum(y1, y2)
    if center_point_box == 1:
        xc, yc, w, h = boxes.unbind(-1)
        return xc - w / 2, yc - h / 2, xc + w / 2, yc + h / 2
    raise ValueError(f"center_point_box must be 0 or 1, got {center_point_box}")


def _overlaps(boxes: torch.Tensor, center_point_box: int, iou_threshold: float) -> torch.Tensor:
    """[batch, n, n] bool: box i suppresses box j (IoU > threshold, both boxes non-empty)."""
    x0, y0, x1, y1 = (c.unsqueeze(-1) for c in _corners(boxes, center_point_box))
    ix = torch.minimum(x1, x1.mT) - torch.maximum(x0, x0.mT)
    iy = torch.minimum(y1, y1.mT) - torch.maximum(y0, y0.mT)
    inter = ix * iy
    area = (x1 - x0) * (y1 - y0)
    union = area + area.mT - inter
    # The same order of float operations as the ONNX reference, so that boundary cases agree.
    valid = (ix > 0) & (iy > 0) & (inter > 0) & (area > 0) & (area.mT > 0) & (union > 0)
    return valid & (inter / union > iou_threshold)


def _greedy_select(order: list[int], overlaps: torch.Tensor, limit: int) -> list[int]:
    """Walk boxes by falling score; keep a box unless a kept one overlaps it."""
    suppressed = torch.zeros(overlaps.shape[0], dtype=torch.bool)
    kept = []
    for i in order:
        if len(kept) >= limit:
            break
        if not suppressed[i]:
            kept.append(i)
            suppressed |= overlaps[i]
    return kept


def _nms_infer(ctx: InferContext) -> list[TensorType]:
    # The number of selected boxes depends on the data.
    return [TensorType(DType.INT64, (f"{ctx.node.name}_num_selected", 3))]


@register("NonMaxSuppression", infer=_nms_infer)
def non_max_suppression(ctx, boxes, scores, max_output_boxes_per_class=None, iou_threshold=None, score_threshold=None):
    if boxes.dim() != 3 or boxes.shape[-1] != 4 or scores.dim() != 3 or scores.shape[0] != boxes.shape[0] \
            or scores.shape[2] != boxes.shape[1]:
        raise ValueError(
            f"NonMaxSuppression needs boxes [batch, boxes, 4] and scores [batch, classes, boxes], "
            f"got {list(boxes.shape)} and {list(scores.shape)}")
    limit = 0 if max_output_boxes_per_class is None or max_output_boxes_per_class.numel() == 0 \
        else max(int(max_output_boxes_per_class.reshape(-1)[0]), 0)
    iou = 0.0 if iou_threshold is None or iou_threshold.numel() == 0 else iou_threshold.reshape(-1)[0]
    selected: list[tuple[int, int, int]] = []
    if limit > 0 and boxes.shape[1] > 0:
        # The pairwise test runs on the device; only the greedy walk over a bool matrix is serial.
        over = _overlaps(boxes, int(ctx.attr("center_point_box", 0)), iou).cpu()
        order = torch.sort(scores, dim=-1, descending=True, stable=True).indices
        keep = torch.ones_like(scores, dtype=torch.bool)
        if score_threshold is not None and score_threshold.numel():
            keep = scores > score_threshold.reshape(-1)[0]
        order, keep = order.cpu().tolist(), keep.cpu()
        for b in range(scores.shape[0]):
            for c in range(scores.shape[1]):
                candidates = [i for i in order[b][c] if keep[b, c, i]]
                selected += [(b, c, i) for i in _greedy_select(candidates, over[b], limit)]
    return torch.tensor(selected, dtype=torch.int64, device=boxes.device).reshape(-1, 3)


# -- Det -----------------------------------------------------------------------------------


def _det_infer(ctx: InferContext) -> list[TensorType]:
    x = ctx.input(0)
    if x.shape is not None and len(x.shape) < 2:
        raise ctx.fail(f"Det needs a [..., M, M] input, got rank {len(x.shape)}")
    return [TensorType(x.dtype, None if x.shape is None else tuple(x.shape[:-2]))]


@register("Det", infer=_det_infer)
def det(ctx, x):
    if x.dim() < 2 or x.shape[-1] != x.shape[-2]:
        raise ValueError(f"Det needs square matrices [..., M, M], got shape {list(x.shape)}")
    # torch's LU kernels take float32/float64 only.
    wide = x if x.dtype in (torch.float32, torch.float64) else x.to(torch.float32)
    return torch.linalg.det(wide).to(x.dtype)


# -- random generators ---------------------------------------------------------------------


def _random_dtype(ctx, like: torch.dtype | DType | None = None) -> DType:
    """The `dtype` attribute; defaults to `like` (the *Like ops) or float32."""
    code = ctx.attr("dtype")
    if code is not None:
        return DType.from_onnx(int(code), "the dtype attribute of a random op")
    if like is None:
        return DType.FLOAT32
    return like if isinstance(like, DType) else DType.from_torch(like)


def _generator(ctx, device) -> torch.Generator | None:
    seed = ctx.attr("seed")
    if seed is None:
        return None
    device = device if device is not None else torch.get_default_device()
    return torch.Generator(device=device).manual_seed(int(seed))


def _sample_dtype(dtype: DType) -> torch.dtype:
    # torch samples floats only; integer outputs (allowed for the *Like ops) are cast afterwards.
    return dtype.torch if dtype.is_float and dtype.itemsize >= 2 else torch.float32


def _normal(ctx, shape, dtype: DType, device) -> torch.Tensor:
    t = torch.empty(shape, dtype=_sample_dtype(dtype), device=device)
    t.normal_(float(ctx.attr("mean", 0.0)), float(ctx.attr("scale", 1.0)), generator=_generator(ctx, device))
    return t.to(dtype.torch)


def _uniform(ctx, shape, dtype: DType, device) -> torch.Tensor:
    t = torch.empty(shape, dtype=_sample_dtype(dtype), device=device)
    t.uniform_(float(ctx.attr("low", 0.0)), float(ctx.attr("high", 1.0)), generator=_generator(ctx, device))
    return t.to(dtype.torch)


def _shape_attr(ctx) -> list[int]:
    shape = ctx.attr("shape")
    if shape is None:
        raise ValueError(f"{ctx.node.op_type} needs a `shape` attribute")
    return list(shape)


def _fixed_infer(ctx: InferContext) -> list[TensorType]:
    return [TensorType(_random_dtype(ctx), tuple(ctx.attr("shape", ())))]


def _like_infer(ctx: InferContext) -> list[TensorType]:
    x = ctx.input(0)
    return [TensorType(_random_dtype(ctx, x.dtype), x.shape)]


# Ops without inputs have no device to follow: they use torch's default device.
@register("RandomNormal", infer=_fixed_infer, deterministic=False)
def random_normal(ctx):
    return _normal(ctx, _shape_attr(ctx), _random_dtype(ctx), None)


@register("RandomUniform", infer=_fixed_infer, deterministic=False)
def random_uniform(ctx):
    return _uniform(ctx, _shape_attr(ctx), _random_dtype(ctx), None)


@register("RandomNormalLike", infer=_like_infer, deterministic=False)
def random_normal_like(ctx, x):
    return _normal(ctx, x.shape, _random_dtype(ctx, x.dtype), x.device)


@register("RandomUniformLike", infer=_like_infer, deterministic=False)
def random_uniform_like(ctx, x):
    return _uniform(ctx, x.shape, _random_dtype(ctx, x.dtype), x.device)


def _bernoulli_infer(ctx: InferContext) -> list[TensorType]:
    x = ctx.input(0)
    return [TensorType(_random_dtype(ctx, x.dtype), x.shape)]


@register("Bernoulli", infer=_bernoulli_infer, deterministic=False)
def bernoulli(ctx, p):
    u = torch.empty(p.shape, dtype=torch.float64, device=p.device).uniform_(generator=_generator(ctx, p.device))
    return (u < p.to(torch.float64)).to(_random_dtype(ctx, p.dtype).torch)


def _multinomial_infer(ctx: InferContext) -> list[TensorType]:
    x = ctx.input(0)
    batch = x.shape[0] if x.shape is not None and len(x.shape) == 2 else f"{ctx.node.name}_batch"
    return [TensorType(_random_dtype(ctx, DType.INT32), (batch, int(ctx.attr("sample_size", 1))))]


@register("Multinomial", infer=_multinomial_infer, deterministic=False)
def multinomial(ctx, logits):
    if logits.dim() != 2:
        raise ValueError(f"Multinomial needs [batch, classes] log-probabilities, got shape {list(logits.shape)}")
    dtype = _random_dtype(ctx, DType.INT32)
    if dtype not in (DType.INT32, DType.INT64):
        raise ValueError(f"Multinomial dtype must be int32 or int64, got {dtype}")
    # The input holds unnormalized log-probabilities; torch wants (unnormalized) probabilities.
    probs = torch.softmax(logits.to(torch.float64), dim=-1)
    samples = torch.multinomial(probs, int(ctx.attr("sample_size", 1)), replacement=True,
                                generator=_generator(ctx, logits.device))
    return samples.to(dtype.torch)


# -- experimental ops of early opsets (removed from ONNX since; TensorRT's parser still reads them) --

@register("ImageScaler", infer=same_as(0))
def image_scaler(ctx, x):
    """scale * x + bias[c] over an NCHW image (opset 1-8 experimental)."""
    bias = torch.tensor(ctx.attr("bias", [0.0] * x.shape[1]), dtype=x.dtype, device=x.device)
    if bias.numel() != x.shape[1]:
        raise ValueError(f"ImageScaler: {bias.numel()} biases for {x.shape[1]} channels")
    return x * ctx.attr("scale", 1.0) + bias.reshape(1, -1, *([1] * (x.dim() - 2)))


@register("ScaledTanh", infer=same_as(0))
def scaled_tanh(ctx, x):
    """alpha * tanh(beta * x) (opset 1-8 experimental)."""
    return ctx.attr("alpha", 1.0) * torch.tanh(ctx.attr("beta", 1.0) * x)


@register("ParametricSoftplus", infer=same_as(0))
def parametric_softplus(ctx, x):
    """alpha * ln(exp(beta * x) + 1) (opset 1-8 experimental)."""
    beta = ctx.attr("beta", 1.0)
    return ctx.attr("alpha", 1.0) * torch.nn.functional.softplus(x * beta)
