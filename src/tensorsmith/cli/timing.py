"""Measuring an engine as trtexec does.

On a GPU every iteration records CUDA events around its three phases on one stream:
H2D (inputs from pinned host memory), GPU compute (the engine's work, a CUDA graph replay
when captured) and D2H (outputs to pinned host memory); the host clock measures the
enqueue time (how long launching the engine takes on the host). Latency is H2D + compute
+ D2H on the GPU's clock; throughput is iterations over the wall time of the timed loop.
On the CPU engine the wall clock times each `engine.run`.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field

import numpy as np
import torch

PERCENTILES = (90, 95, 99)


def stats(ms: list[float]) -> dict | None:
    """min/mean/median/p90/p95/p99/max of times in ms (None for none)."""
    if not ms:
        return None
    a = np.asarray(ms, dtype=np.float64)
    out = {"min": float(a.min()), "mean": float(a.mean()), "median": float(np.median(a))}
    out.update({f"p{p}": float(np.percentile(a, p)) for p in PERCENTILES})
    out["max"] = float(a.max())
    return out


@dataclass
class Measurement:
    device: str  # "cuda" or "cpu"
    iterations: int
    wall_s: float
    latency: list[float] = field(default_factory=list)
    compute: list[float] = field(default_factory=list)
    enqueue: list[float] = field(default_factory=list)
    h2d: list[float] = field(default_factory=list)
    d2h: list[float] = field(default_factory=list)

    def summary(self) -> dict:
        return {
            "device": self.device, "iterations": self.iterations, "wall_time_s": self.wall_s,
            "throughput_qps": self.iterations / self.wall_s if self.wall_s > 0 else None,
            "latency_ms": stats(self.latency), "gpu_compute_ms": stats(self.compute),
            "enqueue_ms": stats(self.enqueue), "h2d_ms": stats(self.h2d), "d2h_ms": stats(self.d2h),
        }


def _loop(step, warmup: int, iterations: int | None, duration: float | None) -> tuple[int, float]:
    for _ in range(warmup):
        step(False)
    n, t0 = 0, time.perf_counter()
    while True:
        step(True)
        n += 1
        elapsed = time.perf_counter() - t0
        if (duration is not None and elapsed >= duration) or (duration is None and n >= iterations):
            return n, elapsed


def measure_cpu(engine, feeds: dict, warmup: int, iterations: int | None, duration: float | None) -> Measurement:
    m = Measurement("cpu", 0, 0.0)

    def step(record: bool):
        t0 = time.perf_counter()
        engine.run(feeds)
        ms = (time.perf_counter() - t0) * 1e3
        if record:
            m.latency.append(ms)
            m.compute.append(ms)

    m.iterations, m.wall_s = _loop(step, warmup, iterations, duration)
    return m


def measure_gpu(engine, feeds: dict, warmup: int, iterations: int | None, duration: float | None) -> Measurement:
    from ..runtime.feeds import check_feeds

    ctx = engine.create_execution_context()
    host_in = {n: t.contiguous().pin_memory() for n, t in check_feeds(feeds, engine.inputs).items()}
    dev_in = {n: torch.empty_like(t, device=engine.device) for n, t in host_in.items()}
    host_out: dict[str, torch.Tensor] = {}
    m = Measurement("cuda", 0, 0.0)
    stream = torch.cuda.current_stream()

    def step(record: bool):
        ev = [torch.cuda.Event(enable_timing=True) for _ in range(4)]
        ev[0].record(stream)
        for n, t in dev_in.items():
            t.copy_(host_in[n], non_blocking=True)
        ev[1].record(stream)
        t0 = time.perf_counter()
        outs = ctx.execute(dev_in)
        enqueue = (time.perf_counter() - t0) * 1e3
        ev[2].record(stream)
        for n, t in outs.items():
            dst = host_out.get(n)
            if dst is None or dst.shape != t.shape or dst.dtype != t.dtype:
                dst = host_out[n] = torch.empty(t.shape, dtype=t.dtype, pin_memory=True)
            dst.copy_(t, non_blocking=True)
        ev[3].record(stream)
        ev[3].synchronize()
        if record:
            m.enqueue.append(enqueue)
            m.h2d.append(ev[0].elapsed_time(ev[1]))
            m.compute.append(ev[1].elapsed_time(ev[2]))
            m.d2h.append(ev[2].elapsed_time(ev[3]))
            m.latency.append(ev[0].elapsed_time(ev[3]))

    with torch.inference_mode():
        m.iterations, m.wall_s = _loop(step, max(warmup, 1), iterations, duration)  # the first run captures
    return m


def measure(engine, feeds: dict, warmup: int, iterations: int | None, duration: float | None) -> Measurement:
    if engine.target == "cuda":
        return measure_gpu(engine, feeds, warmup, iterations, duration)
    return measure_cpu(engine, feeds, warmup, iterations, duration)
