"""Helpers shared by op references."""

from __future__ import annotations

import functools

import torch

# torch implements few kernels for uint16/32/64; references compute in int64 and cast back.
WIDE_UINTS = (torch.uint16, torch.uint32, torch.uint64)
UNSIGNED = (torch.uint8, *WIDE_UINTS)
HALVES = (torch.float16, torch.bfloat16)


def in_float32(fn):
    """fn on a float32 copy of half-precision inputs, rounded back to the input dtype.

    numpy and the GPU kernels compute half-precision math so too; results then do not depend on
    which half-precision kernels a device has.
    """

    def apply(x: torch.Tensor) -> torch.Tensor:
        if x.dtype in HALVES:
            return fn(x.float()).to(x.dtype)
        return fn(x)

    return apply


def widen(t: torch.Tensor | None) -> torch.Tensor | None:
    """int64 view of the values of a uint16/32/64 tensor (others unchanged)."""
    if t is not None and t.dtype in WIDE_UINTS:
        if t.dtype == torch.uint64:
            return t.view(torch.int64)  # same bits; arithmetic wraps as uint64 would
        return t.to(torch.int64)
    return t


def narrow(t: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
    """Back from int64 to a wide unsigned dtype (wrapping)."""
    if dtype == torch.uint64:
        return t.view(torch.uint64) if t.dtype == torch.int64 else t.to(torch.int64).view(torch.uint64)
    if dtype in WIDE_UINTS:
        bits = dtype.itemsize * 8
        return (t & ((1 << bits) - 1)).to(dtype)
    return t.to(dtype)


def with_wide_uints(fn):
    """Decorate a reference so that uint16/32/64 inputs run through int64 and come back in their dtype."""

    @functools.wraps(fn)
    def wrapped(ctx, *args):
        dtype = next((a.dtype for a in args if isinstance(a, torch.Tensor) and a.dtype in WIDE_UINTS), None)
        if dtype is None:
            return fn(ctx, *args)
        res = fn(ctx, *(widen(a) if isinstance(a, torch.Tensor) else a for a in args))
        if isinstance(res, torch.Tensor) and res.dtype == torch.int64:
            return narrow(res, dtype)
        return res

    return wrapped


def normalize_axis(axis: int, rank: int) -> int:
    if not -rank <= axis < max(rank, 1):
        raise ValueError(f"axis {axis} is out of range for rank {rank}")
    return axis % rank if rank else 0


def ints(t: torch.Tensor | None) -> list[int] | None:
    """A small int tensor (shape, axes, pads) as a Python list."""
    return None if t is None else [int(v) for v in t.reshape(-1).tolist()]


def compute_dtype(x: torch.Tensor) -> torch.dtype:
    """Half types run in float32 on the CPU, where their kernels are slow or missing."""
    if x.device.type == "cpu" and x.dtype in (torch.float16, torch.bfloat16):
        return torch.float32
    return x.dtype
