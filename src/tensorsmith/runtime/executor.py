"""Running a plan of Layers: each Layer's runner in order, values freed after their last reader.

With `use_cuda_graphs`, the first run of each input signature (names, shapes, dtypes) is
captured into a CUDA graph that later runs replay: one launch, no Python per Layer, no host
synchronisation, no allocation (the graph's memory pool holds every activation).
"""

from __future__ import annotations

import threading
from collections import OrderedDict

import torch

from ..engine import LayerPlan
from ..tactics import Runner


class Executor:
    def __init__(self, layers: list[LayerPlan], runners: list[Runner], constants: dict[str, torch.Tensor],
                 input_names: list[str], output_names: list[str]):
        self.layers = layers
        self.output_names = output_names
        self.constants = {n: t for n, t in constants.items() if n in output_names}  # weights returned as outputs
        keep = set(output_names)
        last: dict[str, int] = {}
        for i, lp in enumerate(layers):
            for n in lp.inputs:
                last[n] = i
        frees: list[list[str]] = [[] for _ in layers]
        for n, i in last.items():
            if n not in keep and n not in input_names:
                frees[i].append(n)
        self.steps = [(r, lp.inputs, lp.outputs, f) for r, lp, f in zip(runners, layers, frees)]

    def run(self, feeds: dict[str, torch.Tensor]) -> list[torch.Tensor]:
        env = dict(self.constants)
        env.update(feeds)
        for runner, ins, outs, free in self.steps:
            res = runner([env[n] for n in ins])
            for n, t in zip(outs, res):
                env[n] = t
            for n in free:
                del env[n]
        return [env[n] for n in self.output_names]

    def profile(self, feeds: dict[str, torch.Tensor], repeats: int = 20) -> list[tuple[str, str, float]]:
        """Median ms per Layer (device events around each runner, no CUDA graph)."""
        import statistics

        device = next(iter(feeds.values())).device
        times: list[list[float]] = [[] for _ in self.steps]
        for _ in range(repeats + 2):
            env = dict(self.constants)
            env.update(feeds)
            for k, (runner, ins, outs, _free) in enumerate(self.steps):
                if device.type == "cuda":
                    a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
                    a.record()
                    res = runner([env[n] for n in ins])
                    b.record()
                    b.synchronize()
                    times[k].append(a.elapsed_time(b))
                else:
                    import time

                    t0 = time.perf_counter()
                    res = runner([env[n] for n in ins])
                    times[k].append((time.perf_counter() - t0) * 1e3)
                env.update(zip(outs, res))
        return [(lp.name, lp.tactic, statistics.median(t[2:])) for lp, t in zip(self.layers, times)]


class CudaGraphRunner:
    """Replays one captured CUDA graph per (executor, input signature), at most `max_graphs`
    (least recently used dropped).

    Each ExecutionContext owns one: its graphs' memory pool is the context's activation memory,
    unless `pool` (a `torch.cuda.graph_pool_handle()`, see `DeviceMemory`) is shared with other
    contexts that never run at the same time. Outputs are the graph's static buffers: the next
    run of the same signature overwrites them.
    """

    def __init__(self, executor: Executor | None = None, max_graphs: int = 8, pool=None):
        self.executor = executor
        self.max_graphs = max_graphs
        self.pool = pool
        self.graphs: OrderedDict = OrderedDict()

    def run(self, feeds: dict[str, torch.Tensor], executor: Executor | None = None) -> list[torch.Tensor]:
        executor = executor or self.executor
        key = (id(executor),) + tuple((n, tuple(t.shape), t.dtype) for n, t in sorted(feeds.items()))
        entry = self.graphs.get(key)
        if entry is None or entry[0] is not executor:
            entry = (executor,) + self._capture(executor, feeds)
            self.graphs[key] = entry
            while len(self.graphs) > self.max_graphs:
                self.graphs.popitem(last=False)
        else:
            self.graphs.move_to_end(key)
        _, graph, static_in, static_out = entry
        for n, t in feeds.items():
            static_in[n].copy_(t, non_blocking=True)
        graph.replay()
        return static_out

    def clear(self) -> None:
        self.graphs.clear()

    def _capture(self, executor: Executor, feeds: dict[str, torch.Tensor]):
        with _CAPTURE_LOCK:  # one capture at a time in the process; replays need no lock
            static_in = {n: t.clone() for n, t in feeds.items()}
            side = torch.cuda.Stream()
            side.wait_stream(torch.cuda.current_stream())
            with torch.cuda.stream(side):
                for _ in range(2):  # warm up: lazy initialisation must not happen during capture
                    executor.run(static_in)
            torch.cuda.current_stream().wait_stream(side)
            graph = torch.cuda.CUDAGraph()
            # thread_local: other threads may keep launching work on their streams meanwhile.
            with torch.cuda.graph(graph, pool=self.pool, capture_error_mode="thread_local"):
                static_out = executor.run(static_in)
            torch.cuda.current_stream().wait_stream(side)
        return graph, static_in, static_out


_CAPTURE_LOCK = threading.Lock()
