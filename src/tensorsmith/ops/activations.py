"""Activations: Relu and the activations with attributes (LeakyRelu, Elu, Selu, Celu, HardSigmoid,
HardSwish, ThresholdedRelu, Swish, SwiGLU, Gelu, Shrink) and PRelu.

The activations that are plain float functions (Sigmoid, Tanh, Softsign, Softplus, Mish) are rows
of elementwise.py's float unary table. Each op here keeps its input's type; half-precision math
runs in float32 (`in_float32`). A module of its own so that elementwise.py stays one idea (math,
logic and comparisons) and both stay short.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

from ._util import HALVES, UNSIGNED, in_float32
from .registry import register, same_as


@register("Relu", infer=same_as(0))
def relu(ctx, x):
    return torch.relu(x)


@register("LeakyRelu", infer=same_as(0))
def leaky_relu(ctx, x):
    alpha = ctx.attr("alpha", 0.01)
    return torch.where(x < 0, x * alpha, x)


@register("Elu", infer=same_as(0))
def elu(ctx, x):
    alpha = ctx.attr("alpha", 1.0)
    return in_float32(lambda v: torch.where(v > 0, v, alpha * torch.expm1(v)))(x)


@register("Selu", infer=same_as(0))
def selu(ctx, x):
    alpha = ctx.attr("alpha", 1.67326319217681884765625)
    gamma = ctx.attr("gamma", 1.05070102214813232421875)
    return in_float32(lambda v: gamma * torch.where(v > 0, v, alpha * torch.expm1(v)))(x)


@register("Celu", infer=same_as(0), since=12)
def celu(ctx, x):
    alpha = ctx.attr("alpha", 1.0)
    return in_float32(lambda v: torch.celu(v, alpha))(x)


@register("HardSigmoid", infer=same_as(0))
def hard_sigmoid(ctx, x):
    alpha = ctx.attr("alpha", 0.2)
    beta = ctx.attr("beta", 0.5)
    return in_float32(lambda v: torch.clamp(alpha * v + beta, 0, 1))(x)


@register("HardSwish", infer=same_as(0), since=14)
def hard_swish(ctx, x):
    # ONNX fixes alpha = 1/6, beta = 0.5 (torch's hardswish uses relu6(x + 3) / 6, the same).
    return in_float32(lambda v: v * torch.clamp(v / 6 + 0.5, 0, 1))(x)


@register("ThresholdedRelu", infer=same_as(0), since=10)
def thresholded_relu(ctx, x):
    alpha = ctx.attr("alpha", 1.0)
    return torch.where(x > alpha, x, torch.zeros((), dtype=x.dtype, device=x.device))


@register("Swish", infer=same_as(0), since=24)
def swish(ctx, x):
    alpha = ctx.attr("alpha", 1.0)
    return in_float32(lambda v: v * torch.sigmoid(alpha * v))(x)


@register("SwiGLU", infer=same_as(0), since=28)
def swiglu(ctx, a, b):
    alpha = ctx.attr("alpha", 1.0)
    if a.shape != b.shape:
        raise ValueError(f"SwiGLU inputs must have the same shape, got {tuple(a.shape)} and {tuple(b.shape)}")
    if a.dtype in HALVES:
        return (a.float() * torch.sigmoid(alpha * a.float()) * b.float()).to(a.dtype)
    return a * torch.sigmoid(alpha * a) * b


@register("Gelu", infer=same_as(0), since=20)
def gelu(ctx, x):
    approximate = ctx.attr("approximate", "none")
    if approximate not in ("none", "tanh"):
        raise ValueError(f"Gelu approximate must be 'none' or 'tanh', got {approximate!r}")
    return in_float32(lambda v: F.gelu(v, approximate=approximate))(x)


@register("Shrink", infer=same_as(0), since=9)
def shrink(ctx, x):
    lambd = ctx.attr("lambd", 0.5)
    bias = ctx.attr("bias", 0.0)
    # Integer inputs: the float arithmetic below is truncated back, as the reference does.
    v = x if x.dtype.is_floating_point else x.double()
    zero = torch.zeros((), dtype=v.dtype, device=x.device)
    y = torch.where(v < -lambd, v + bias, torch.where(v > lambd, v - bias, zero))
    return y.to(x.dtype)


@register("PRelu", infer=same_as(0))
def prelu(ctx, x, slope):
    if x.dtype in UNSIGNED:
        return x  # never negative
    # slope broadcasts to x (unidirectionally), so the result has x's shape.
    return torch.where(x < 0, x * slope.to(x.dtype), x)
