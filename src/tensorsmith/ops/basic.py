"""The few ops every graph needs: constants, identity, and the four arithmetic ops."""

from __future__ import annotations

import torch

from ..ir import DType, TensorType
from ._util import with_wide_uints
from .registry import InferContext, broadcast, register, same_as


def _constant_infer(ctx: InferContext) -> list[TensorType]:
    value = _constant_value(ctx)
    return [TensorType(DType.from_torch(value.dtype), tuple(value.shape))]


def _constant_value(ctx) -> torch.Tensor:
    a = ctx.node.attrs
    if "value" in a:
        return a["value"]
    if "value_float" in a:
        return torch.tensor(a["value_float"], dtype=torch.float32)
    if "value_floats" in a:
        return torch.tensor(a["value_floats"], dtype=torch.float32)
    if "value_int" in a:
        return torch.tensor(a["value_int"], dtype=torch.int64)
    if "value_ints" in a:
        return torch.tensor(a["value_ints"], dtype=torch.int64)
    raise ctx.fail("Constant has no numeric value attribute (value, value_float(s), value_int(s))") if hasattr(
        ctx, "fail") else ValueError("Constant has no numeric value attribute")


@register("Constant", infer=_constant_infer)
def constant(ctx):
    return _constant_value(ctx)


@register("Identity", infer=same_as(0))
def identity(ctx, x):
    return x


def _arith(fn):
    @with_wide_uints
    def ref(ctx, a, b):
        return fn(a, b)

    return ref


register("Add", infer=broadcast())(_arith(torch.add))
register("Sub", infer=broadcast())(_arith(torch.sub))
register("Mul", infer=broadcast())(_arith(torch.mul))


@register("Div", infer=broadcast())
@with_wide_uints
def div(ctx, a, b):
    if a.dtype.is_floating_point:
        return a / b
    # ONNX integer division truncates toward zero (as C does).
    return torch.div(a, b, rounding_mode="trunc")
