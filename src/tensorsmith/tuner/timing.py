"""Timing a runner: device events on a GPU, perf_counter on the CPU; median of repeats after warm-up."""

from __future__ import annotations

import statistics
import time
from typing import Callable

import torch


def time_runner(fn: Callable[[], object], device: torch.device, warmup: int = 3, repeats: int = 15,
                inner: int = 1) -> float:
    """Median milliseconds of one call of `fn` (each sample averages `inner` back-to-back calls)."""
    for _ in range(warmup):
        fn()
    samples = []
    if device.type == "cuda":
        torch.cuda.synchronize(device)
        for _ in range(repeats):
            start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            start.record()
            for _ in range(inner):
                fn()
            end.record()
            end.synchronize()
            samples.append(start.elapsed_time(end) / inner)
    else:
        for _ in range(repeats):
            t0 = time.perf_counter()
            for _ in range(inner):
                fn()
            samples.append((time.perf_counter() - t0) * 1e3 / inner)
    return statistics.median(samples)
