"""Tactic "triton.norm": normalizations, softmaxes and reductions as one generated Triton kernel.

norm_plan.py decides whether the template takes a Layer and how each tensor is addressed;
norm_source.py writes the kernel for that plan and a config. This module is what the tuner
sees: `applies`, the config space, and `compile` to a runner.
"""

from __future__ import annotations

import os
from typing import Any

import torch
import triton

from ..base import (
    LayerContext,
    Runner,
    Tactic,
    binds_outputs,
    output_or_empty,
    register_tactic,
)
from .compile import load_kernel
from .norm_plan import Decline, build_plan
from .norm_source import KERNEL_NAME, kernel_source

_MAX_SINGLE_PASS = 16384  # longest row kept in registers


def _pow2(n: int) -> int:
    return 1 << max(0, n - 1).bit_length()


def _clamp(v: int, lo: int, hi: int) -> int:
    return max(lo, min(hi, v))


def _configs(M: int, R: int, strided: bool) -> list[dict[str, int]]:
    """Single-pass tiles of ~1K and ~4K elements when the row fits, looped ones for long rows."""
    block, max_rows = _pow2(R), min(128, _pow2(M))
    out: list[dict[str, int]] = []
    if block <= _MAX_SINGLE_PASS:
        for elems in (1024, 4096):
            rows = _clamp(elems // block, 1, max_rows)
            warps = _clamp(rows * block // 512, 2, 16)
            fewest = max(2, rows * block // 1024)  # at most 32 elements a thread: no spills
            for w in (max(fewest, warps // 2), warps, min(16, warps * 2)):
                out.append({"BLOCK": block, "ROWS": rows, "num_warps": w})
    if block > 4096:
        for b, w in ((2048, 4), (4096, 8), (8192, 16)):
            if b < block:
                out.append({"BLOCK": b, "ROWS": 1, "num_warps": w})
    if strided and block > 64:
        # Columns strided in memory (softmax over a middle axis): neighbouring rows are contiguous.
        rows = min(32, max_rows)
        out.append({"BLOCK": _clamp(2048 // rows, 1, block), "ROWS": rows, "num_warps": 4})
    unique = []
    for c in out:
        if c not in unique:
            unique.append(c)
    return unique[:8]


def _usable_device(lc: LayerContext) -> bool:
    return lc.device.type == "cuda" or os.environ.get("TRITON_INTERPRET") == "1"


class TritonNormTactic(Tactic):
    """LayerNormalization, RMSNormalization, Group/InstanceNormalization, (Log)Softmax and float
    reductions (Reduce{Sum,Mean,Max,Min,SumSquare,L1,L2,LogSumExp}, Global{Average,Max}Pool) over
    any axes, with the layer's elementwise prologue and epilogue fused in."""

    name = "triton.norm"

    def applies(self, lc: LayerContext) -> bool:
        if not _usable_device(lc):
            return False
        try:
            plan = build_plan(lc)
            kernel_source(plan, _pow2(plan.R), 1)  # every prologue/epilogue node must be expressible
        except (Decline, ValueError):
            return False
        return True

    def configs(self, lc: LayerContext) -> list[dict[str, Any]]:
        plan = build_plan(lc)
        x = plan.tile.get(plan.x_name)
        strided = x is not None and plan.split(x.strides)[1][-1:] != (1,)
        return _configs(plan.M, plan.R, strided)

    def compile(self, lc: LayerContext, config: dict[str, Any]) -> Runner:
        plan = build_plan(lc)
        block, rows = int(config["BLOCK"]), int(config.get("ROWS", 1))
        if block & (block - 1) or rows & (rows - 1):
            raise ValueError(f"triton.norm: BLOCK and ROWS must be powers of 2, got {config}")
        kernel = load_kernel(kernel_source(plan, block, rows), KERNEL_NAME)
        grid = (triton.cdiv(plan.M, rows),)
        warps = int(config.get("num_warps", 4))
        slots = [a if kind == "weight" else int(a) for kind, a in plan.args]
        is_input = [kind == "input" for kind, _ in plan.args]
        shape, dtype, device = plan.out_shape, plan.out_dtype.torch, lc.device

        def run(inputs: list[torch.Tensor], out: list | None = None) -> list[torch.Tensor]:
            y = output_or_empty(out, 0, shape, dtype, device)
            args = [inputs[s] if inp else s for s, inp in zip(slots, is_input)]
            kernel[grid](*args, y, num_warps=warps)
            return [y]

        return binds_outputs(run, [True])


TRITON_NORM = register_tactic(TritonNormTactic())
