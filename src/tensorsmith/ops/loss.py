"""Losses: SoftmaxCrossEntropyLoss and NegativeLogLikelihoodLoss.

Both take scores of shape (N, C, d1, ..., dk), integer labels of shape (N, d1, ..., dk) and
optional per-class weights (C,). Labels equal to ignore_index contribute nothing, neither to the
loss nor to the weight total that 'mean' divides by.
"""

from __future__ import annotations

import torch

from ..ir import TensorType
from .registry import InferContext, register

_HALF = (torch.float16, torch.bfloat16)


def _nll(ctx, log_prob: torch.Tensor, target: torch.Tensor, weight: torch.Tensor | None) -> torch.Tensor:
    """The NLL loss of log-probabilities, computed in log_prob's dtype."""
    if log_prob.dim() < 2:
        raise ValueError(f"input must have shape (N, C, ...), got rank {log_prob.dim()}")
    if tuple(target.shape) != (log_prob.shape[0], *log_prob.shape[2:]):
        raise ValueError(f"target shape {tuple(target.shape)} does not fit input shape {tuple(log_prob.shape)}")
    reduction = ctx.attr("reduction", "mean")
    if isinstance(reduction, bytes):
        reduction = reduction.decode()
    if reduction not in ("none", "sum", "mean"):
        raise ValueError(f"unknown reduction '{reduction}'")
    target = target.to(torch.int64)
    ignore_index = ctx.attr("ignore_index")
    keep = target != ignore_index if ignore_index is not None else torch.ones_like(target, dtype=torch.bool)
    # Ignored labels may be out of range: gather at class 0, then zero them out.
    safe = torch.where(keep, target, torch.zeros_like(target))
    picked = -log_prob.gather(1, safe.unsqueeze(1)).squeeze(1)
    w = weight[safe] if weight is not None else torch.ones_like(picked)
    w = torch.where(keep, w.to(picked.dtype), torch.zeros_like(picked))
    loss = picked * w
    if reduction == "none":
        return loss
    if reduction == "sum":
        return loss.sum()
    return loss.sum() / w.sum()


def _loss_infer(ctx: InferContext) -> list[TensorType]:
    x, t = ctx.input(0), ctx.input(1)
    reduction = ctx.attr("reduction", "mean")
    if isinstance(reduction, bytes):
        reduction = reduction.decode()
    loss_shape = (t.shape if t is not None else None) if reduction == "none" else ()
    out = [TensorType(x.dtype, loss_shape)]
    if ctx.num_outputs > 1:
        out.append(TensorType(x.dtype, x.shape))
    return out


@register("NegativeLogLikelihoodLoss", infer=_loss_infer)
def negative_log_likelihood_loss(ctx, x, target, weight=None):
    dtype = x.dtype
    if dtype in _HALF:
        x, weight = x.float(), (weight.float() if weight is not None else None)
    return _nll(ctx, x, target, weight).to(dtype)


@register("SoftmaxCrossEntropyLoss", infer=_loss_infer)
def softmax_cross_entropy_loss(ctx, scores, labels, weights=None):
    dtype = scores.dtype
    work = scores.float() if dtype in _HALF else scores
    if work.dim() < 2:
        raise ValueError(f"scores must have shape (N, C, ...), got rank {work.dim()}")
    log_prob = torch.log_softmax(work, dim=1)
    if weights is not None and dtype in _HALF:
        weights = weights.float()
    loss = _nll(ctx, log_prob, labels, weights).to(dtype)
    return loss, log_prob.to(dtype)
