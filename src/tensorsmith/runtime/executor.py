"""Running a plan of Layers: each Layer's runner in order, values freed after their last reader.

With an Arena (runtime/arena.py), runners that can write into given tensors write their outputs
into views of one byte tensor, at offsets planned by liveness (engine/memory.py): no allocation
per run for them. With `use_cuda_graphs`, the first run of each input signature (names, shapes,
dtypes) is captured into a CUDA graph that later runs replay: one launch, no Python per Layer,
no host synchronisation, no allocation (the arena and the graph's memory pool hold every
activation).
"""

from __future__ import annotations

import threading
from collections import OrderedDict

import torch

from ..engine import LayerPlan
from ..engine.memory import plan_sizes
from ..tactics import Runner
from ..tactics.base import output_binding
from .arena import Arena, ArenaPlan, Layout, dense_layout


class Executor:
    def __init__(self, layers: list[LayerPlan], runners: list[Runner], constants: dict[str, torch.Tensor],
                 input_names: list[str], output_names: list[str], device: torch.device | None = None):
        self.layers = layers
        self.input_names = input_names
        self.output_names = output_names
        self.device = device
        self.weight_bytes = sum(t.numel() * t.element_size() for t in constants.values())
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
        # per step and output, whether its runner writes it into a given tensor (tactics/base.py)
        self.binding = [output_binding(r) or (False,) * len(lp.outputs) for r, lp in zip(runners, layers)]
        self.arena_plan: ArenaPlan | None = None  # learned on the first run with an arena

    def run(self, feeds: dict[str, torch.Tensor], arena: Arena | None = None) -> list[torch.Tensor]:
        """The outputs for `feeds`. With `arena`, bound outputs are written into its views; the
        first such run of this Executor allocates as usual and learns the plan (runtime/arena.py)."""
        if self.device is None:
            arena = None
        plan = self.arena_plan if arena is not None else None
        learning = arena is not None and plan is None
        bound = arena.views(self, plan, self.device) if plan is not None and plan.arena_bytes else None
        sizes: dict[str, int] = {}
        layouts: dict[str, Layout] = {}
        env = dict(self.constants)
        env.update(feeds)
        for k, (runner, ins, outs, free) in enumerate(self.steps):
            out = bound[k] if bound is not None else None
            res = runner([env[n] for n in ins]) if out is None else runner([env[n] for n in ins], out)
            for n, t in zip(outs, res):
                env[n] = t
            if learning:  # what the plan needs of each output, not the tensor: memory is freed as usual
                for n, t, can_bind in zip(outs, res, self.binding[k]):
                    if isinstance(t, torch.Tensor):
                        sizes[n] = t.numel() * t.element_size()
                        if can_bind and (layout := dense_layout(t)) is not None:
                            layouts[n] = layout
            for n in free:
                del env[n]
        results = [env[n] for n in self.output_names]
        if learning:
            self.arena_plan = self._plan(feeds, sizes, layouts)
        return results

    def _plan(self, feeds: dict[str, torch.Tensor], sizes: dict[str, int], layouts: dict[str, Layout]) -> ArenaPlan:
        """The arena plan from one run: every output's bytes, the layouts of those to bind."""
        sizes.update((n, t.numel() * t.element_size()) for n, t in feeds.items())
        memory = plan_sizes(self.layers, sizes, self.input_names, self.output_names, layouts)
        memory.weight_bytes = self.weight_bytes
        return ArenaPlan.place(memory, layouts, [lp.outputs for lp in self.layers])

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

    Each ExecutionContext owns one: its graphs' memory pool and its Arena are the context's
    activation memory, unless `pool` (a `torch.cuda.graph_pool_handle()`, see `DeviceMemory`) and
    the arena are shared with other contexts that never run at the same time. Outputs are the
    graph's static buffers: the next run of the same signature overwrites them.
    """

    def __init__(self, executor: Executor | None = None, max_graphs: int = 8, pool=None):
        self.executor = executor
        self.max_graphs = max_graphs
        self.pool = pool
        self.graphs: OrderedDict = OrderedDict()

    def run(self, feeds: dict[str, torch.Tensor], executor: Executor | None = None,
            arena: Arena | None = None) -> list[torch.Tensor]:
        executor = executor or self.executor
        key = (id(executor),) + tuple((n, tuple(t.shape), t.dtype) for n, t in sorted(feeds.items()))
        entry = self.graphs.get(key)
        if entry is None or entry[0] is not executor:
            entry = (executor,) + self._capture(executor, feeds, arena)
            self.graphs[key] = entry
            while len(self.graphs) > self.max_graphs:
                self.graphs.popitem(last=False)
        else:
            self.graphs.move_to_end(key)
        _, graph, static_in, static_out, _arena_tensor = entry
        for n, t in feeds.items():
            static_in[n].copy_(t, non_blocking=True)
        graph.replay()
        return static_out

    def clear(self) -> None:
        self.graphs.clear()

    def _capture(self, executor: Executor, feeds: dict[str, torch.Tensor], arena: Arena | None):
        with _CAPTURE_LOCK:  # one capture at a time in the process; replays need no lock
            static_in = {n: t.clone() for n, t in feeds.items()}
            side = torch.cuda.Stream()
            side.wait_stream(torch.cuda.current_stream())
            with torch.cuda.stream(side):
                # Warm up: lazy initialisation (and the arena plan, and the arena tensor itself)
                # must not happen during capture.
                for _ in range(2):
                    executor.run(static_in, arena)
            torch.cuda.current_stream().wait_stream(side)
            graph = torch.cuda.CUDAGraph()
            # thread_local: other threads may keep launching work on their streams meanwhile.
            with torch.cuda.graph(graph, pool=self.pool, capture_error_mode="thread_local"):
                static_out = executor.run(static_in, arena)
            torch.cuda.current_stream().wait_stream(side)
        # The graph writes into this arena tensor even after the arena grows to a new one. It was
        # allocated on the side stream: once freed, its bytes must wait for the replays.
        tensor = arena.tensor if arena is not None else None
        if tensor is not None:
            tensor.record_stream(torch.cuda.current_stream())
        return graph, static_in, static_out, tensor


_CAPTURE_LOCK = threading.Lock()
