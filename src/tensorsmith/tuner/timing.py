"""Timing a runner: device time on a GPU, perf_counter on the CPU; median of repeats after warm-up.

On a GPU the engine replays CUDA graphs, so a Layer costs its kernels' device time, not the
host time of launching them. Timed call by call, a small kernel whose Python launch takes
longer than it runs would be charged the launch (Triton's launcher is slower than a PyTorch
op's), and the tuner would pick the op with the cheapest launch instead of the fastest
kernel. So the runner is captured into a CUDA graph, a few calls back to back, and the graph
replays are timed; a runner that cannot be captured is timed call by call.
"""

from __future__ import annotations

import logging
import statistics
import time
from typing import Callable

import torch

log = logging.getLogger("tensorsmith.build")

GRAPH_CALLS = 8  # calls per captured graph: amortises the graph launch over several runs


def time_runner(fn: Callable[[], object], device: torch.device, warmup: int = 3, repeats: int = 15,
                inner: int = 1, graph: bool = True) -> float:
    """Median milliseconds of one call of `fn` (each sample averages `inner` back-to-back calls)."""
    for _ in range(warmup):
        fn()
    if device.type != "cuda":
        samples = []
        for _ in range(repeats):
            t0 = time.perf_counter()
            for _ in range(inner):
                fn()
            samples.append((time.perf_counter() - t0) * 1e3 / inner)
        return statistics.median(samples)
    if graph:
        replay = _captured(fn, device)
        if replay is not None:
            return _event_median(replay, device, repeats) / GRAPH_CALLS

    def calls():
        for _ in range(inner):
            fn()
    return _event_median(calls, device, repeats) / inner


def _event_median(fn: Callable[[], object], device: torch.device, repeats: int) -> float:
    torch.cuda.synchronize(device)
    samples = []
    for _ in range(repeats):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        fn()
        end.record()
        end.synchronize()
        samples.append(start.elapsed_time(end))
    return statistics.median(samples)


def _captured(fn: Callable[[], object], device: torch.device) -> Callable[[], None] | None:
    """`fn` called GRAPH_CALLS times, captured as one CUDA graph; None if it cannot be captured."""
    graph = torch.cuda.CUDAGraph()
    side = torch.cuda.Stream(device)
    side.wait_stream(torch.cuda.current_stream(device))
    try:
        with torch.cuda.stream(side):
            fn()  # on the capture stream once first (lazy per-stream state, e.g. cuBLAS workspaces)
        torch.cuda.current_stream(device).wait_stream(side)
        with torch.cuda.graph(graph, stream=side):
            for _ in range(GRAPH_CALLS):
                fn()
        graph.replay()
        torch.cuda.synchronize(device)
    except Exception as e:  # noqa: BLE001 - host syncs, CPU work: time it call by call instead
        log.debug("  not capturable (%s: %s); timing call by call", type(e).__name__, str(e).splitlines()[0][:120])
        torch.cuda.synchronize(device)
        return None
    return graph.replay
