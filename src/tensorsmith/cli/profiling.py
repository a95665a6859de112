"""Per-Layer times: `engine.profile` on a GPU plan (device events per Layer); on the CPU engine,
each Layer's nodes run through the reference interpreter under the wall clock."""

from __future__ import annotations

import statistics
import time
from dataclasses import dataclass

import torch


@dataclass
class LayerTime:
    name: str
    tactic: str
    ms: float
    percent: float = 0.0


def profile_layers(engine, feeds: dict, repeats: int = 20) -> list[LayerTime]:
    """Median ms per Layer, sorted slowest first, with its percent of the total."""
    if engine.plan.layers:
        rows = [LayerTime(n, t, ms) for n, t, ms in engine.profile(feeds, repeats=repeats)]
    else:
        rows = _profile_cpu(engine, feeds, repeats)
    total = sum(r.ms for r in rows) or 1.0
    for r in rows:
        r.percent = 100.0 * r.ms / total
    return sorted(rows, key=lambda r: -r.ms)


class _LayerView:
    """A Layer seen as a graph for `run_graph`: its nodes, its weights, its outputs."""

    def __init__(self, graph, layer):
        self.nodes = layer.nodes
        self.initializers = {v.name: graph.initializers[v.name] for v in layer.weights(graph)}
        self.outputs = layer.outputs(graph)
        self.inputs = layer.inputs(graph)


def _profile_cpu(engine, feeds: dict, repeats: int) -> list[LayerTime]:
    from ..ops.interpreter import run_graph
    from ..runtime.feeds import check_feeds

    graph = engine.plan.graph
    views = [(layer, _LayerView(graph, layer)) for layer in graph.layers or []]
    tensors = check_feeds(feeds, engine.inputs)
    times: list[list[float]] = [[] for _ in views]
    with torch.inference_mode():
        for _ in range(repeats + 1):  # the first round warms up
            env = dict(tensors)
            for k, (_layer, view) in enumerate(views):
                t0 = time.perf_counter()
                outs = run_graph(view, {v.name: env[v.name] for v in view.inputs if v.name in env})
                times[k].append((time.perf_counter() - t0) * 1e3)
                env.update((v.name, t) for v, t in zip(view.outputs, outs))
    return [LayerTime(layer.name, layer.attrs.get("tactic", "reference"), statistics.median(t[1:]))
            for (layer, _), t in zip(views, times)]
