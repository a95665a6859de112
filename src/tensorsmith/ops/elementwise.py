"""Elementwise ops: unary math, activations, comparisons and logic, bitwise ops, variadic
Max/Min/Sum/Mean, Where, and the casts (Cast, CastLike, BitCast).

Every op declares its output type explicitly (these are the ops later fused into kernels).
torch lacks most kernels for uint16/32/64: such values run through int64, with an
order-preserving key for uint64 where comparisons are involved. float16/bfloat16
transcendental functions are computed in float32 and rounded back, as numpy and the GPU
kernels do, so that results do not depend on which half-precision kernels a device has.
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F

from ..ir import DType, TensorType, broadcast_shapes
from ._util import WIDE_UINTS, narrow, widen, with_wide_uints
from .registry import InferContext, broadcast, register, same_as

_HALVES = (torch.float16, torch.bfloat16)
_UNSIGNED = (torch.uint8, *WIDE_UINTS)
_INT64_MIN = -(2**63)


# -- helpers -------------------------------------------------------------------------------


def _in_float32(fn):
    """fn on a float32 copy of half-precision inputs, rounded back to the input dtype."""

    def apply(x: torch.Tensor) -> torch.Tensor:
        if x.dtype in _HALVES:
            return fn(x.float()).to(x.dtype)
        return fn(x)

    return apply


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
    f = _in_float32(fn)

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
    return _in_float32(torch.erf)(x)


@register("Abs", infer=same_as(0))
def abs_(ctx, x):
    if x.dtype in _UNSIGNED:
        return x
    return torch.abs(x)


@register("Neg", infer=same_as(0))
@with_wide_uints
def neg(ctx, x):
    return torch.neg(x)


@register("Sign", infer=same_as(0), since=9)
def sign(ctx, x):
    if x.dtype in _UNSIGNED:
        return (x != 0).to(x.dtype)
    return torch.sign(x)


@register("Relu", infer=same_as(0))
def relu(ctx, x):
    return torch.relu(x)


# -- activations with attributes -------------------------------------------------------------


@register("LeakyRelu", infer=same_as(0))
def leaky_relu(ctx, x):
    alpha = ctx.attr("alpha", 0.01)
    return torch.where(x < 0, x * alpha, x)


@register("Elu", infer=same_as(0))
def elu(ctx, x):
    alpha = ctx.attr("alpha", 1.0)
    return _in_float32(lambda v: torch.where(v > 0, v, alpha * torch.expm1(v)))(x)


@register("Selu", infer=same_as(0))
def selu(ctx, x):
    alpha = ctx.attr("alpha", 1.67326319217681884765625)
    gamma = ctx.attr("gamma", 1.05070102214813232421875)
    return _in_float32(lambda v: gamma * torch.where(v > 0, v, alpha * torch.expm1(v)))(x)


@register("Celu", infer=same_as(0), since=12)
def celu(ctx, x):
    alpha = ctx.attr("alpha", 1.0)
    return _in_float32(lambda v: torch.celu(v, alpha))(x)


@register("HardSigmoid", infer=same_as(0))
def hard_sigmoid(ctx, x):
    alpha = ctx.attr("alpha", 0.2)
    beta = ctx.attr("beta", 0.5)
    return _in_float32(lambda v: torch.clamp(alpha * v + beta, 0, 1))(x)


@register("HardSwish", infer=same_as(0), since=14)
def hard_swish(ctx, x):
    # ONNX fixes alpha = 1/6, beta = 0.5 (torch's hardswish uses relu6(x + 3) / 6, the same).
    return _in_float32(lambda v: v * torch.clamp(v / 6 + 0.5, 0, 1))(x)


@register("ThresholdedRelu", infer=same_as(0), since=10)
def thresholded_relu(ctx, x):
    alpha = ctx.attr("alpha", 1.0)
    return torch.where(x > alpha, x, torch.zeros((), dtype=x.dtype, device=x.device))


@register("Swish", infer=same_as(0), since=24)
def swish(ctx, x):
    alpha = ctx.attr("alpha", 1.0)
    return _in_float32(lambda v: v * torch.sigmoid(alpha * v))(x)


@register("SwiGLU", infer=same_as(0), since=28)
def swiglu(ctx, a, b):
    alpha = ctx.attr("alpha", 1.0)
    if a.shape != b.shape:
        raise ValueError(f"SwiGLU inputs must have the same shape, got {tuple(a.shape)} and {tuple(b.shape)}")
    if a.dtype in _HALVES:
        return (a.float() * torch.sigmoid(alpha * a.float()) * b.float()).to(a.dtype)
    return a * torch.sigmoid(alpha * a) * b


@register("Gelu", infer=same_as(0), since=20)
def gelu(ctx, x):
    approximate = ctx.attr("approximate", "none")
    if approximate not in ("none", "tanh"):
        raise ValueError(f"Gelu approximate must be 'none' or 'tanh', got {approximate!r}")
    return _in_float32(lambda v: F.gelu(v, approximate=approximate))(x)


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
    if x.dtype in _UNSIGNED:
        return x  # never negative
    # slope broadcasts to x (unidirectionally), so the result has x's shape.
    return torch.where(x < 0, x * slope.to(x.dtype), x)


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
        if x.dtype in _HALVES:
            return torch.pow(x.float(), y.float() if y.dtype in _HALVES else y).to(x.dtype)
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
    elif dtype in _UNSIGNED:
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
    work = torch.float32 if dtype in _HALVES else dtype
    out = xs[0].to(work)
    for x in xs[1:]:
        out = out + x.to(work)
    return (out / len(xs)).to(dtype)


# -- casts -----------------------------------------------------------------------------------

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
