"""Elementwise math and logic: unary math (the float unary table, Erf, Abs, Neg, Sign), Clip,
Pow/Mod/BitShift and the bitwise ops, logic and comparisons, IsNaN/IsInf, Where, and variadic
Max/Min/Sum/Mean.

Every op declares its output type explicitly (these are the ops later fused into kernels).
torch lacks most kernels for uint16/32/64: such values run through int64, with an
order-preserving key for uint64 where comparisons are involved. float16/bfloat16
transcendental functions are computed in float32 and rounded back (`in_float32`).

The activations (activations.py) and the casts (cast.py) are families of their own, kept apart
so that each module stays short; Add/Sub/Mul/Div are in basic.py.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

from ..ir import DType, TensorType, broadcast_shapes
from ._util import HALVES, UNSIGNED, WIDE_UINTS, in_float32, narrow, widen, with_wide_uints
from .registry import InferContext, broadcast, register, same_as

_INT64_MIN = -(2**63)


# -- helpers -------------------------------------------------------------------------------


def _to_key(t: torch.Tensor) -> torch.Tensor:
    """A tensor whose ordering matches t's, in a dtype torch can compare and clamp."""
    if t.dtype == torch.uint64:
        # Flipping the sign bit maps unsigned order onto signed order.
        return t.view(torch.int64) ^ _INT64_MIN
    if t.dtype in WIDE_UINTS:
        return t.to(torch.int64)
    return t


def _from_key(k: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
    if dtype == torch.uint64:
        return (k ^ _INT64_MIN).view(torch.uint64)
    if dtype in WIDE_UINTS:
        return k.to(dtype)
    return k


def _where_infer(ctx: InferContext) -> list[TensorType]:
    """Where: the broadcast shape of all three inputs, the dtype of the values (input 1)."""
    ts = [t for t in ctx.inputs if t is not None]
    try:
        shape = broadcast_shapes(*(t.shape for t in ts))
    except ValueError as e:
        raise ctx.fail(str(e)) from None
    x = ctx.input(1)
    return [TensorType(x.dtype if x else None, shape)]


# -- unary math ----------------------------------------------------------------------------

_FLOAT_UNARY = {
    "Acos": torch.acos, "Acosh": torch.acosh, "Asin": torch.asin, "Asinh": torch.asinh,
    "Atan": torch.atan, "Atanh": torch.atanh, "Cos": torch.cos, "Cosh": torch.cosh,
    "Sin": torch.sin, "Sinh": torch.sinh, "Tan": torch.tan, "Tanh": torch.tanh,
    "Exp": torch.exp, "Log": torch.log, "Sqrt": torch.sqrt, "Reciprocal": torch.reciprocal,
    "Sigmoid": torch.sigmoid, "Ceil": torch.ceil, "Floor": torch.floor,
    # torch.round rounds half to even, as ONNX Round does.
    "Round": torch.round,
    "Softsign": lambda x: x / (1 + x.abs()),
    "Softplus": F.softplus,
    "Mish": F.mish,
}


# First ONNX opset of the ops introduced after opset 7, the oldest one supported.
_SINCE = {"Acosh": 9, "Asinh": 9, "Atanh": 9, "Cosh": 9, "Sinh": 9, "Round": 11, "Mish": 18}


def _float_unary(fn):
    f = in_float32(fn)

    def ref(ctx, x):
        return f(x)

    return ref


for _name, _fn in _FLOAT_UNARY.items():
    register(_name, infer=same_as(0), since=_SINCE.get(_name, 1))(_float_unary(_fn))


@register("Erf", infer=same_as(0), since=9)
def erf(ctx, x):
    if not x.dtype.is_floating_point:
        # Erf-13 accepts integers; torch returns float for them.
        return torch.erf(x.double()).to(x.dtype)
    return in_float32(torch.erf)(x)


@register("Abs", infer=same_as(0))
def abs_(ctx, x):
    if x.dtype in UNSIGNED:
        return x
    return torch.abs(x)


@register("Neg", infer=same_as(0))
@with_wide_uints
def neg(ctx, x):
    return torch.neg(x)


@register("Sign", infer=same_as(0), since=9)
def sign(ctx, x):
    if x.dtype in UNSIGNED:
        return (x != 0).to(x.dtype)
    return torch.sign(x)


@register("Clip", infer=same_as(0))
def clip(ctx, x, lo=None, hi=None):
    # Clip-6 bounds arrive as float32 attributes turned into inputs: bring them to x's dtype.
    k = _to_key(x)
    lo = _to_key(lo.to(x.dtype)) if lo is not None and lo.numel() else None
    hi = _to_key(hi.to(x.dtype)) if hi is not None and hi.numel() else None
    if lo is None and hi is None:
        return x
    # torch.clamp gives max where min > max, as ONNX specifies.
    return _from_key(torch.clamp(k, min=lo, max=hi), x.dtype)


# -- binary arithmetic -----------------------------------------------------------------------


@register("Pow", infer=broadcast())
def pow_(ctx, x, y):
    y = widen(y)
    if x.dtype.is_floating_point:
        # Mixed dtypes (Pow-12+): compute in the promoted type, the result has the base's dtype.
        if x.dtype in HALVES:
            return torch.pow(x.float(), y.float() if y.dtype in HALVES else y).to(x.dtype)
        return torch.pow(x, y).to(x.dtype)
    if y.dtype.is_floating_point:
        return torch.pow(widen(x).double(), y.double()).to(x.dtype)
    return narrow(torch.pow(widen(x).to(torch.int64), y.to(torch.int64)), x.dtype)


@register("Mod", infer=broadcast(), since=10)
@with_wide_uints
def mod(ctx, a, b):
    # Known limit: uint64 runs as an int64 view, so operands >= 2**63 give wrong results.
    if ctx.attr("fmod", 0):
        return torch.fmod(a, b)
    # fmod=0: the result takes the sign of the divisor (numpy's mod), for integers and floats;
    # Mod-28 wants that for a zero result too, which torch.remainder leaves positive.
    r = torch.remainder(a, b)
    if r.dtype.is_floating_point:
        r = torch.where(r == 0, torch.copysign(r, b), r)
    return r


@register("BitShift", infer=broadcast(), since=11)
def bit_shift(ctx, x, s):
    direction = ctx.attr("direction", "")
    if direction not in ("LEFT", "RIGHT"):
        raise ValueError(f"BitShift direction must be 'LEFT' or 'RIGHT', got {direction!r}")
    if x.dtype.is_floating_point or x.dtype == torch.bool:
        raise ValueError(f"BitShift takes integers, got {x.dtype}")
    dtype = x.dtype
    bits = dtype.itemsize * 8
    # Work in int64: signed values sign-extend, unsigned ones stay non-negative (uint64 is a view).
    xv = widen(x).to(torch.int64)
    sv = widen(s).to(torch.int64)
    # A shift < 0 or >= the width leaves only the sign fill (BitShift-28; undefined before).
    bad = (sv < 0) | (sv >= bits)
    if direction == "LEFT":
        out = torch.where(bad, 0, xv << sv.clamp(0, bits - 1))
    elif dtype in UNSIGNED:
        out = torch.where(bad, 0, xv >> sv.clamp(0, bits - 1))
        if dtype == torch.uint64:
            # int64 shifts are arithmetic: clear the copies of the top bit shifted in.
            sc = sv.clamp(1, 63)
            out = torch.where(sv > 0, out & ((1 << (64 - sc)) - 1), out)
    else:
        out = xv >> torch.where(bad, bits - 1, sv)
    # Narrowing keeps the low bits: a left shift drops what passes the top (the sign bit too).
    return narrow(out, dtype) if dtype in WIDE_UINTS else out.to(dtype)


def _bitwise(fn):
    @with_wide_uints
    def ref(ctx, a, b):
        return fn(a, b)

    return ref


register("BitwiseAnd", infer=broadcast(), since=18)(_bitwise(torch.bitwise_and))
register("BitwiseOr", infer=broadcast(), since=18)(_bitwise(torch.bitwise_or))
register("BitwiseXor", infer=broadcast(), since=18)(_bitwise(torch.bitwise_xor))


@register("BitwiseNot", infer=same_as(0), since=18)
@with_wide_uints
def bitwise_not(ctx, x):
    return torch.bitwise_not(x)


# -- logic and comparisons -----------------------------------------------------------------

register("And", infer=broadcast(DType.BOOL))(lambda ctx, a, b: torch.logical_and(a, b))
register("Or", infer=broadcast(DType.BOOL))(lambda ctx, a, b: torch.logical_or(a, b))
register("Xor", infer=broadcast(DType.BOOL))(lambda ctx, a, b: torch.logical_xor(a, b))
register("Not", infer=same_as(0, DType.BOOL))(lambda ctx, x: torch.logical_not(x))


def _compare(fn):
    def ref(ctx, a, b):
        return fn(_to_key(a), _to_key(b))

    return ref


register("Equal", infer=broadcast(DType.BOOL))(_compare(torch.eq))
register("Greater", infer=broadcast(DType.BOOL))(_compare(torch.gt))
register("GreaterOrEqual", infer=broadcast(DType.BOOL), since=12)(_compare(torch.ge))
register("Less", infer=broadcast(DType.BOOL))(_compare(torch.lt))
register("LessOrEqual", infer=broadcast(DType.BOOL), since=12)(_compare(torch.le))


def _as_float(x: torch.Tensor) -> torch.Tensor:
    # float8 tensors lack most kernels; their values are exact in float32.
    return x if x.dtype in (torch.float16, torch.bfloat16, torch.float32, torch.float64) else x.float()


@register("IsNaN", infer=same_as(0, DType.BOOL), since=9)
def is_nan(ctx, x):
    return torch.isnan(_as_float(x))


@register("IsInf", infer=same_as(0, DType.BOOL), since=10)
def is_inf(ctx, x):
    x = _as_float(x)
    pos = ctx.attr("detect_positive", 1)
    neg = ctx.attr("detect_negative", 1)
    if pos and neg:
        return torch.isinf(x)
    if pos:
        return torch.isposinf(x)
    if neg:
        return torch.isneginf(x)
    return torch.zeros(x.shape, dtype=torch.bool, device=x.device)


@register("Where", infer=_where_infer, since=9)
def where(ctx, cond, x, y):
    return torch.where(cond.to(torch.bool), x, y)


# -- variadic --------------------------------------------------------------------------------


def _variadic_extreme(fn):
    def ref(ctx, *xs):
        if not xs:
            raise ValueError("needs at least one input")
        dtype = xs[0].dtype
        out = _to_key(xs[0])
        for x in xs[1:]:
            out = fn(out, _to_key(x))
        return _from_key(out, dtype)

    return ref


register("Max", infer=broadcast())(_variadic_extreme(torch.maximum))
register("Min", infer=broadcast())(_variadic_extreme(torch.minimum))


@register("Sum", infer=broadcast())
@with_wide_uints
def sum_(ctx, *xs):
    if not xs:
        raise ValueError("Sum needs at least one input")
    out = xs[0]
    for x in xs[1:]:
        out = out + x
    return out


@register("Mean", infer=broadcast())
def mean(ctx, *xs):
    if not xs:
        raise ValueError("Mean needs at least one input")
    dtype = xs[0].dtype
    work = torch.float32 if dtype in HALVES else dtype
    out = xs[0].to(work)
    for x in xs[1:]:
        out = out + x.to(work)
    return (out / len(xs)).to(dtype)
