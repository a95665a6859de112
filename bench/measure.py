"""What every system is measured with: device-event latency, peak memory, error, precision setup."""

from __future__ import annotations

import contextlib
import copy
import statistics
import time
from dataclasses import dataclass
from typing import Any, Callable, Sequence

import torch

HALF = {"fp16": torch.float16, "bf16": torch.bfloat16}
PRECISIONS = ("fp16", "bf16", "fp32", "tf32")


@dataclass(frozen=True)
class TimingPlan:
    """How long to measure: warm-up calls, then between min and max calls, stopping near target_s."""

    warmup: int = 20
    min_iters: int = 20
    max_iters: int = 300
    target_s: float = 2.0

    @classmethod
    def quick(cls) -> "TimingPlan":
        return cls(warmup=5, min_iters=10, max_iters=60, target_s=0.5)


@contextlib.contextmanager
def precision_flags(precision: str):
    """TF32 matrix math on for 'tf32' only (all systems alike); restored on exit."""
    saved = (torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32)
    on = precision == "tf32"
    torch.backends.cuda.matmul.allow_tf32 = torch.backends.cudnn.allow_tf32 = on
    try:
        yield
    finally:
        torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32 = saved


def channels_last(family: str, precision: str) -> bool:
    """NHWC lets cuDNN and Inductor use tensor-core convolutions; true fp32 has none to gain."""
    return family == "cnn" and precision != "fp32"


def prepare_model(model: torch.nn.Module, precision: str, family: str, device: torch.device) -> torch.nn.Module:
    """A copy of the float32 CPU model on `device` in the precision (model.half() for fp16)."""
    m = copy.deepcopy(model)
    if precision in HALF:
        m = m.to(HALF[precision])
    m = m.to(device)
    if channels_last(family, precision):
        m = m.to(memory_format=torch.channels_last)
    return m.eval().requires_grad_(False)


def prepare_inputs(inputs: Sequence[torch.Tensor], precision: str, family: str,
                   device: torch.device) -> list[torch.Tensor]:
    """The same inputs for a peer: float ones cast to the half type, images in channels-last."""
    out = []
    for t in inputs:
        t = t.to(device)
        if t.is_floating_point() and precision in HALF:
            t = t.to(HALF[precision])
        if t.dim() == 4 and channels_last(family, precision):
            t = t.contiguous(memory_format=torch.channels_last)
        out.append(t)
    return out


def sync(device: torch.device | None = None) -> None:
    if torch.cuda.is_available():
        torch.cuda.synchronize()


def time_fn(fn: Callable[[], Any], plan: TimingPlan) -> dict:
    """Median latency of `fn()` in ms, each call timed alone (device events on the GPU).

    The GPU is idle when each call starts, so a time includes the host's launch overhead as a
    user sees it; the iteration count adapts to the warm-up speed, within the plan's bounds.
    """
    cuda = torch.cuda.is_available()
    warm = []
    for _ in range(plan.warmup):
        t0 = time.perf_counter()
        fn()
        sync()
        warm.append(time.perf_counter() - t0)
    # The median: a first call may capture a CUDA graph or pick kernels, and take far longer.
    per_call = statistics.median(warm) if warm else 1e-3
    iters = int(min(plan.max_iters, max(plan.min_iters, plan.target_s / max(per_call, 1e-6))))
    times = []
    for _ in range(iters):
        if cuda:
            start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            start.record()
            fn()
            end.record()
            end.synchronize()
            times.append(start.elapsed_time(end))
        else:
            s = time.perf_counter()
            fn()
            times.append((time.perf_counter() - s) * 1e3)
    times.sort()
    return {"median_ms": statistics.median(times), "p10_ms": times[len(times) // 10],
            "p90_ms": times[(len(times) * 9) // 10], "iters": iters}


def as_list(out: Any) -> list[torch.Tensor]:
    """A system's outputs in order: a tensor, a tuple/list of them, or a dict by name."""
    if isinstance(out, torch.Tensor):
        return [out]
    if isinstance(out, dict):
        return list(out.values())
    if isinstance(out, (list, tuple)):
        return [t for o in out for t in as_list(o)]
    if hasattr(out, "last_hidden_state"):
        return [out.last_hidden_state]
    raise TypeError(f"cannot read outputs of type {type(out).__name__}")


def snapshot(out: Any) -> list[torch.Tensor]:
    """Float32 CPU copies of the outputs (graph-replaying systems overwrite theirs on the next call)."""
    return [t.detach().float().cpu().clone() for t in as_list(out)]


def error_vs(outputs: Sequence[torch.Tensor], reference: Sequence[torch.Tensor]) -> dict:
    """Max abs error over all outputs, and the same divided by max |reference|."""
    if len(outputs) != len(reference):
        raise ValueError(f"{len(outputs)} outputs, the reference has {len(reference)}")
    err = scale = 0.0
    for o, r in zip(outputs, reference):
        o = o.float().reshape(r.shape) if o.numel() == r.numel() else o.float()
        if o.shape != r.shape:
            raise ValueError(f"output shape {list(o.shape)} differs from the reference's {list(r.shape)}")
        e = (o - r).abs().max().item()
        err = max(err, e if e == e else float("inf"))    # NaN anywhere makes the result useless: inf
        scale = max(scale, r.abs().max().item())
    return {"max_abs_err": err, "rel_err": err / scale if scale else err}


class MemoryWatch:
    """Peak GPU memory a system allocates: at build (tuning, compiling) and while it runs."""

    def __init__(self):
        self.on = torch.cuda.is_available()
        self.base = 0
        self.build_peak = 0

    def start(self) -> None:
        if self.on:
            sync()
            torch.cuda.reset_peak_memory_stats()
            self.base = torch.cuda.memory_allocated()

    def built(self) -> None:
        if self.on:
            sync()
            self.build_peak = torch.cuda.max_memory_allocated() - self.base
            torch.cuda.reset_peak_memory_stats()

    def result(self) -> dict:
        if not self.on:
            return {}
        sync()
        mb = 1 << 20
        return {"build_peak_mb": round(self.build_peak / mb, 1),
                "run_peak_mb": round((torch.cuda.max_memory_allocated() - self.base) / mb, 1)}


def release() -> None:
    """Give back what the last system held before the next one is measured."""
    import gc

    gc.collect()
    if torch.cuda.is_available():
        torch.cuda.synchronize()
        torch.cuda.empty_cache()
