"""Casts: Cast, CastLike and BitCast, and `cast_tensor`, a tensor converted with ONNX Cast semantics.

Casts to float8 round to nearest even and then saturate or overflow as the spec says, which
torch's own conversions do not do alike for every float8 type, so the range is handled here.
A module of its own, apart from elementwise.py's math: conversion between types is one idea.
"""

from __future__ import annotations

import math

import torch

from ..ir import DType, TensorType
from ._util import WIDE_UINTS
from .registry import InferContext, register

_FLOAT8 = (torch.float8_e4m3fn, torch.float8_e4m3fnuz, torch.float8_e5m2, torch.float8_e5m2fnuz)


def _float8_overflow(x: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
    """Where a float32 x rounds (to nearest even) beyond the largest finite value of dtype."""
    fmax = torch.finfo(dtype).max
    # The largest finite value has mantissa bits all ones (odd: ties round up, away from it),
    # except E4M3FN, whose all-ones mantissa at the top exponent is NaN (110 is even: ties stay).
    half_ulp = {torch.float8_e4m3fn: 16.0, torch.float8_e4m3fnuz: 8.0,
                torch.float8_e5m2: 4096.0, torch.float8_e5m2fnuz: 4096.0}[dtype]
    limit = fmax + half_ulp
    a = x.abs()
    return (a > limit) if dtype == torch.float8_e4m3fn else (a >= limit)


def _to_float8(x: torch.Tensor, dtype: torch.dtype, saturate: bool) -> torch.Tensor:
    """ONNX Cast to a float8 type: round to nearest even, then saturate or overflow per the spec.

    torch's own conversions disagree between types (E4M3FN saturates, the others do not), so
    the range is handled here and torch only rounds in-range values.
    """
    if x.dtype == torch.bool or not x.dtype.is_floating_point:
        x = x.to(torch.float64)
    x = x.float() if x.dtype != torch.float64 else x
    fmax = torch.finfo(dtype).max
    y = torch.clamp(x, -fmax, fmax).to(torch.float32).to(dtype)
    if saturate:
        return y
    over = _float8_overflow(x, dtype)
    if dtype == torch.float8_e5m2:
        special = torch.where(x > 0, math.inf, -math.inf).to(torch.float32)
    else:
        special = torch.full_like(x, math.nan, dtype=torch.float32)
    return torch.where(over, special.to(dtype).view(torch.uint8), y.view(torch.uint8)).view(dtype)


def cast_tensor(x: torch.Tensor, dtype: torch.dtype, saturate: bool = True) -> torch.Tensor:
    """x converted to dtype with ONNX Cast semantics."""
    if x.dtype == dtype:
        return x
    if dtype in _FLOAT8:
        return _to_float8(x, dtype, saturate)
    if x.dtype in _FLOAT8:
        x = x.to(torch.float32)  # exact, and torch converts float8 to few types directly
    if dtype == torch.bool and x.dtype in WIDE_UINTS:
        return x != 0
    return x.to(dtype)


def _cast_dtype(ctx) -> DType:
    to = ctx.attr("to")
    if to is None:
        raise ValueError("Cast needs the 'to' attribute")
    return DType.from_onnx(int(to), f"the 'to' attribute of node '{ctx.node.name}'")


def _cast_infer(ctx: InferContext) -> list[TensorType]:
    t = ctx.input(0)
    return [TensorType(_cast_dtype(ctx), t.shape if t else None)]


@register("Cast", infer=_cast_infer)
def cast(ctx, x):
    return cast_tensor(x, _cast_dtype(ctx).torch, bool(ctx.attr("saturate", 1)))


def _castlike_infer(ctx: InferContext) -> list[TensorType]:
    t, like = ctx.input(0), ctx.input(1)
    return [TensorType(like.dtype if like else None, t.shape if t else None)]


@register("CastLike", infer=_castlike_infer, since=15)
def cast_like(ctx, x, like):
    return cast_tensor(x, like.dtype, bool(ctx.attr("saturate", 1)))


@register("BitCast", infer=_cast_infer, since=26)
def bit_cast(ctx, x):
    dtype = _cast_dtype(ctx).torch
    if dtype.itemsize != x.dtype.itemsize:
        raise ValueError(f"BitCast needs types of the same width, got {x.dtype} to {dtype}")
    if x.dtype == torch.bool or dtype == torch.bool:
        # bool is one byte but only 0/1 are valid bool values.
        if dtype == torch.bool:
            return x.view(torch.uint8) != 0
        return x.to(torch.uint8).view(dtype)
    return x.contiguous().view(dtype)
