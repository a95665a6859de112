"""Normalization ops: batch, instance, layer, group and RMS normalization, LRN, Lp and MVN.

Statistics are computed in float32 at least (ONNX's stash_type, 1 = float32 by default), then
the result is cast back to the input dtype, as the ONNX reference and ONNX Runtime do.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

from ..ir import DType, TensorType
from ._util import normalize_axis
from .registry import InferContext, register, same_as


def _stat_dtype(x: torch.Tensor, stash_type: int = 1) -> torch.dtype:
    """The dtype statistics are computed in: stash_type, but never narrower than float32."""
    want = DType.from_onnx(stash_type, "stash_type").torch
    if x.dtype == torch.float64 or want == torch.float64:
        return torch.float64
    return torch.float32


def _channel_shape(x: torch.Tensor) -> tuple[int, ...]:
    """Shape that broadcasts a per-channel vector against an (N, C, ...) tensor."""
    return (1, -1, *([1] * (x.dim() - 2)))


# -- BatchNormalization ---------------------------------------------------------------


def _batch_norm_infer(ctx: InferContext) -> list[TensorType]:
    x, mean = ctx.input(0), ctx.input(3)
    out = [TensorType(x.dtype if x else None, x.shape if x else None)]
    stat = TensorType(mean.dtype if mean else None, mean.shape if mean else None)
    return (out + [stat] * 4)[: ctx.num_outputs]


@register("BatchNormalization", infer=_batch_norm_infer)
def batch_normalization(ctx, x, scale, bias, mean, var, *_):
    eps = float(ctx.attr("epsilon", 1e-5))
    training = ctx.opset >= 14 and bool(ctx.attr("training_mode", 0))
    dt = _stat_dtype(x)
    xc = x.to(dt)
    if not training:
        # Opsets 7-13 had no training mode in practice: outputs 2-5 were optional, for training only.
        y = F.batch_norm(xc, mean.to(dt), var.to(dt), scale.to(dt), bias.to(dt), False, 0.0, eps)
        return y.to(x.dtype)
    momentum = float(ctx.attr("momentum", 0.9))
    dims = [d for d in range(x.dim()) if d != 1]
    batch_mean = xc.mean(dim=dims)
    batch_var = xc.var(dim=dims, unbiased=False)
    y = F.batch_norm(xc, batch_mean, batch_var, scale.to(dt), bias.to(dt), False, 0.0, eps)
    running_mean = mean.to(dt) * momentum + batch_mean * (1 - momentum)
    running_var = var.to(dt) * momentum + batch_var * (1 - momentum)
    return y.to(x.dtype), running_mean.to(mean.dtype), running_var.to(var.dtype)


@register("InstanceNormalization", infer=same_as(0))
def instance_normalization(ctx, x, scale, bias):
    dt = _stat_dtype(x)
    y = F.instance_norm(x.to(dt), weight=scale.to(dt), bias=bias.to(dt), eps=float(ctx.attr("epsilon", 1e-5)))
    return y.to(x.dtype)


# -- layer, group and RMS normalization -----------------------------------------------


def _layer_norm_infer(ctx: InferContext) -> list[TensorType]:
    x = ctx.input(0)
    if x is None:
        return [TensorType(None, None)] * ctx.num_outputs
    out = [TensorType(x.dtype, x.shape)]
    stat_dtype = DType.from_onnx(ctx.attr("stash_type", 1), "stash_type")
    if x.shape is None:
        stat_shape = None
    else:
        axis = normalize_axis(ctx.attr("axis", -1), len(x.shape))
        stat_shape = (*x.shape[:axis], *([1] * (len(x.shape) - axis)))
    return (out + [TensorType(stat_dtype, stat_shape)] * 2)[: ctx.num_outputs]


@register("LayerNormalization", infer=_layer_norm_infer)
def layer_normalization(ctx, x, scale, bias=None):
    axis = normalize_axis(ctx.attr("axis", -1), x.dim())
    eps = float(ctx.attr("epsilon", 1e-5))
    stash = ctx.attr("stash_type", 1)
    dt = _stat_dtype(x, stash)
    dims = tuple(range(axis, x.dim()))
    norm_shape = tuple(x.shape[axis:])
    if ctx.num_outputs == 1 and tuple(scale.shape) == norm_shape and (bias is None or tuple(bias.shape) == norm_shape):
        # The fused kernel computes in float32 for half inputs, as stash_type=1 asks.
        y = F.layer_norm(x.to(dt), norm_shape, scale.to(dt), None if bias is None else bias.to(dt), eps)
        return y.to(x.dtype)
    xc = x.to(dt)
    mean = xc.mean(dim=dims, keepdim=True)
    diff = xc - mean
    inv_std = torch.rsqrt((diff * diff).mean(dim=dims, keepdim=True) + eps)
    y = diff * inv_std * scale.to(dt)
    if bias is not None:
        y = y + bias.to(dt)
    stat = DType.from_onnx(stash, "stash_type").torch
    return y.to(x.dtype), mean.to(stat), inv_std.to(stat)


@register("GroupNormalization", infer=same_as(0))
def group_normalization(ctx, x, scale, bias):
    groups = int(ctx.attr("num_groups"))
    n, c = x.shape[0], x.shape[1]
    if c % groups:
        raise ValueError(f"{c} channels do not split into num_groups={groups}")
    eps = float(ctx.attr("epsilon", 1e-5))
    dt = _stat_dtype(x, ctx.attr("stash_type", 1))
    xg = x.to(dt).reshape(n, groups, -1)
    mean = xg.mean(dim=-1, keepdim=True)
    var = xg.var(dim=-1, unbiased=False, keepdim=True)
    y = ((xg - mean) * torch.rsqrt(var + eps)).reshape(x.shape)
    scale, bias = scale.to(dt), bias.to(dt)
    if ctx.opset < 21 and scale.numel() == groups and groups != c:
        # Opset 18 scales per group; opset 21 per channel.
        scale, bias = scale.repeat_interleave(c // groups), bias.repeat_interleave(c // groups)
    return (y * scale.reshape(_channel_shape(x)) + bias.reshape(_channel_shape(x))).to(x.dtype)


@register("RMSNormalization", infer=same_as(0))
def rms_normalization(ctx, x, scale):
    axis = normalize_axis(ctx.attr("axis", -1), x.dim())
    eps = float(ctx.attr("epsilon", 1e-5))
    dt = _stat_dtype(x, ctx.attr("stash_type", 1))
    xc = x.to(dt)
    ms = (xc * xc).mean(dim=tuple(range(axis, x.dim())), keepdim=True)
    return (xc * torch.rsqrt(ms + eps) * scale.to(dt)).to(x.dtype)


# -- local and Lp normalizations ------------------------------------------------------


@register("LRN", infer=same_as(0))
def lrn(ctx, x):
    size = int(ctx.attr("size"))
    alpha, beta, bias = float(ctx.attr("alpha", 1e-4)), float(ctx.attr("beta", 0.75)), float(ctx.attr("bias", 1.0))
    dt = _stat_dtype(x)
    xc = x.to(dt)
    # Channel window [c - floor((size-1)/2), c + ceil((size-1)/2)]: torch's LRN centres even sizes differently.
    sq = (xc * xc).reshape(x.shape[0], 1, x.shape[1], -1)
    sq = F.pad(sq, (0, 0, (size - 1) // 2, size // 2))
    square_sum = F.avg_pool2d(sq, (size, 1), stride=1) * size
    y = xc / (bias + (alpha / size) * square_sum.reshape(x.shape)).pow(beta)
    return y.to(x.dtype)


@register("LpNormalization", infer=same_as(0))
def lp_normalization(ctx, x):
    p = int(ctx.attr("p", 2))
    if p not in (1, 2):
        raise ValueError(f"LpNormalization supports p=1 or 2, got {p}")
    axis = normalize_axis(ctx.attr("axis", -1), x.dim())
    dt = _stat_dtype(x)
    xc = x.to(dt)
    norm = torch.linalg.vector_norm(xc, ord=p, dim=axis, keepdim=True)
    # An all-zero slice stays zero (ONNX's reference), instead of 0/0.
    return (xc / torch.where(norm == 0, torch.ones_like(norm), norm)).to(x.dtype)


@register("MeanVarianceNormalization", infer=same_as(0))
def mean_variance_normalization(ctx, x):
    axes = [normalize_axis(a, x.dim()) for a in ctx.attr("axes", [0, 2, 3])]
    dt = _stat_dtype(x)
    xc = x.to(dt)
    mean = xc.mean(dim=axes, keepdim=True)
    # As the ONNX function body: sqrt(E[x^2] - E[x]^2), plus 1e-9 against division by zero.
    var = (xc * xc).mean(dim=axes, keepdim=True) - mean * mean
    return ((xc - mean) / (var.sqrt() + 1e-9)).to(x.dtype)

