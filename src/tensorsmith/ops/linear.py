"""Matrix products (MatMul, Gemm, Einsum), Dropout and the softmax family."""

from __future__ import annotations

import math

import numpy as np
import torch

from ..ir import DType, TensorType, broadcast_shapes
from ._util import WIDE_UINTS, compute_dtype, narrow, normalize_axis, widen
from .registry import InferContext, register, same_as

# -- matrix products --------------------------------------------------------------------


def _int_matmul(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    """Exact integer matmul in int64 (wrapping as the narrower types would after the cast back)."""
    return _on_cpu(torch.matmul, widen(a).to(torch.int64), widen(b).to(torch.int64))


def _on_cpu(fn, *args):
    """CUDA has no integer GEMM kernels: integer products run on the CPU and come back."""
    device = args[0].device
    if device.type in ("cpu", "meta"):
        return fn(*args)
    return fn(*(a.cpu() for a in args)).to(device)


def _matmul(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    if a.dtype.is_floating_point:
        dt = compute_dtype(a) if a.dtype == torch.bfloat16 else a.dtype
        return torch.matmul(a.to(dt), b.to(dt)).to(a.dtype)
    y = _int_matmul(a, b)
    return narrow(y, a.dtype) if a.dtype in WIDE_UINTS else y.to(a.dtype)


def _matmul_infer(ctx: InferContext) -> list[TensorType]:
    a, b = ctx.input(0), ctx.input(1)
    if a is None or b is None or a.shape is None or b.shape is None:
        return [TensorType(a.dtype if a else None, None)]
    sa, sb = tuple(a.shape), tuple(b.shape)
    if len(sa) == 0 or len(sb) == 0:
        raise ctx.fail("MatMul operands must have rank >= 1")
    a1, b1 = len(sa) == 1, len(sb) == 1
    sa = (1, *sa) if a1 else sa
    sb = (*sb, 1) if b1 else sb
    k1, k2 = sa[-1], sb[-2]
    if isinstance(k1, int) and isinstance(k2, int) and k1 != k2:
        raise ctx.fail(f"MatMul inner dims differ: {list(a.shape)} x {list(b.shape)}")
    try:
        batch = broadcast_shapes(sa[:-2], sb[:-2])
    except ValueError as e:
        raise ctx.fail(str(e)) from None
    shape = (*batch, *(() if a1 else (sa[-2],)), *(() if b1 else (sb[-1],)))
    return [TensorType(a.dtype, shape)]


@register("MatMul", infer=_matmul_infer)
def matmul(ctx, a, b):
    return _matmul(a, b)


def _gemm_infer(ctx: InferContext) -> list[TensorType]:
    a, b = ctx.input(0), ctx.input(1)
    if a is None or b is None or a.shape is None or b.shape is None:
        return [TensorType(a.dtype if a else None, None)]
    if len(a.shape) != 2 or len(b.shape) != 2:
        raise ctx.fail(f"Gemm operands must be 2-D, got {list(a.shape)} and {list(b.shape)}")
    m = a.shape[1] if ctx.attr("transA", 0) else a.shape[0]
    n = b.shape[0] if ctx.attr("transB", 0) else b.shape[1]
    return [TensorType(a.dtype, (m, n))]


@register("Gemm", infer=_gemm_infer)
def gemm(ctx, a, b, c=None):
    if a.dim() != 2 or b.dim() != 2:
        raise ValueError(f"Gemm operands must be 2-D, got {list(a.shape)} and {list(b.shape)}")
    a = a.t() if ctx.attr("transA", 0) else a
    b = b.t() if ctx.attr("transB", 0) else b
    alpha, beta = float(ctx.attr("alpha", 1.0)), float(ctx.attr("beta", 1.0))
    if not a.dtype.is_floating_point:
        y = widen(_int_matmul(a, b))
        if alpha != 1.0:
            y = y * int(alpha)
        if c is not None and beta != 0.0:
            y = y + widen(c).to(torch.int64) * int(beta)
        return narrow(y, a.dtype) if a.dtype in WIDE_UINTS else y.to(a.dtype)
    dt = compute_dtype(a)
    y = torch.matmul(a.to(dt), b.to(dt))
    if alpha != 1.0:
        y = y * alpha
    if c is not None and beta != 0.0:
        y = y + (c.to(dt) if beta == 1.0 else c.to(dt) * beta)
    return y.to(a.dtype)


@register("Einsum")
def einsum(ctx, *operands):
    eq = ctx.attr("equation", "").replace(" ", "")
    if not operands:
        raise ValueError("Einsum needs at least one operand")
    dtype = operands[0].dtype
    if dtype.is_floating_point:
        dt = compute_dtype(operands[0]) if dtype == torch.bfloat16 else dtype
        return torch.einsum(eq, *(o.to(dt) for o in operands)).to(dtype)
    y = _on_cpu(lambda *ops: torch.einsum(eq, *ops), *(widen(o).to(torch.int64) for o in operands))
    return narrow(y, dtype) if dtype in WIDE_UINTS else y.to(dtype)


# -- dropout ----------------------------------------------------------------------------


def _dropout_infer(ctx: InferContext) -> list[TensorType]:
    x = ctx.input(0)
    shape = x.shape if x else None
    mask = DType.BOOL if ctx.opset >= 10 else (x.dtype if x else None)  # Dropout-7 typed the mask as x
    return [TensorType(x.dtype if x else None, shape), TensorType(mask, shape)][: ctx.num_outputs]


@register("Dropout", infer=_dropout_infer, deterministic=False)
def dropout(ctx, x, ratio=None, training_mode=None):
    p = float(ratio.item()) if ratio is not None else 0.5
    training = bool(training_mode.item()) if training_mode is not None else False
    mask_dtype = torch.bool if ctx.opset >= 10 else x.dtype  # Dropout-7 typed the mask as x
    if not training or p == 0.0:
        return x, torch.ones(x.shape, dtype=mask_dtype, device=x.device)
    seed = ctx.attr("seed", None)
    if seed is not None:
        # A seeded mask reproduces ONNX's reference (numpy's legacy generator), which defines the op.
        draw = np.random.RandomState(int(seed)).uniform(0.0, 1.0, tuple(x.shape))
        mask = torch.from_numpy(draw >= p).to(x.device)
    else:
        mask = torch.rand(x.shape, device=x.device) >= p
    return x * mask.to(x.dtype) * (1.0 / (1.0 - p)), mask


# -- softmax family ---------------------------------------------------------------------


def _along_axis(ctx, x: torch.Tensor, fn) -> torch.Tensor:
    """Apply fn(t, dim) along `axis`: before opset 13 over the input coerced to 2-D at `axis`."""
    if ctx.opset >= 13:
        return fn(x, normalize_axis(ctx.attr("axis", -1), x.dim()) if x.dim() else 0)
    axis = normalize_axis(ctx.attr("axis", 1), x.dim())
    rows = math.prod(x.shape[:axis])
    return fn(x.reshape(rows, -1), 1).reshape(x.shape)


def _float_op(fn):
    def run(t, dim):
        return fn(t.to(compute_dtype(t)), dim).to(t.dtype)

    return run


@register("Softmax", infer=same_as(0))
def softmax(ctx, x):
    return _along_axis(ctx, x, _float_op(lambda t, d: torch.softmax(t, d)))


@register("LogSoftmax", infer=same_as(0))
def log_softmax(ctx, x):
    return _along_axis(ctx, x, _float_op(lambda t, d: torch.log_softmax(t, d)))


def _hardmax(t: torch.Tensor, dim: int) -> torch.Tensor:
    # argmax returns the first maximum, as ONNX asks.
    idx = t.argmax(dim=dim, keepdim=True)
    return torch.zeros_like(t).scatter(dim, idx, torch.ones_like(idx, dtype=t.dtype))


@register("Hardmax", infer=same_as(0))
def hardmax(ctx, x):
    return _along_axis(ctx, x, _hardmax)
