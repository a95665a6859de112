"""The memory plan: activations packed into one arena by liveness.

Each activation lives from the Layer that writes it to the last Layer that reads it; two
activations whose lifetimes do not overlap may share bytes. Offsets are assigned greedily,
largest first, at the lowest aligned offset free for the whole lifetime (the classic
interval-packing heuristic that TensorRT and TFLite use). The plan reports the arena size
(peak), the naive sum (every activation its own buffer) and the weight bytes.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

from ..ir import Graph
from .plan import LayerPlan

ALIGNMENT = 256  # bytes; what cudaMalloc gives, and what vectorized kernels want


@dataclass
class Buffer:
    name: str
    size: int
    first: int  # index of the layer that writes it (-1: an engine input)
    last: int   # index of the last layer that reads it (len(layers): an engine output)
    offset: int = 0


@dataclass
class MemoryPlan:
    buffers: list[Buffer] = field(default_factory=list)
    arena_bytes: int = 0
    naive_bytes: int = 0
    weight_bytes: int = 0

    def summary(self) -> dict:
        return {"activation_arena_bytes": self.arena_bytes, "activation_naive_bytes": self.naive_bytes,
                "weight_bytes": self.weight_bytes, "buffers": len(self.buffers)}


def _align(n: int) -> int:
    return (n + ALIGNMENT - 1) // ALIGNMENT * ALIGNMENT


def _nbytes(graph: Graph, name: str) -> int | None:
    v = graph.lookup(name)
    t = v.type if v is not None else None
    if t is None or t.dtype is None or not t.is_static:
        return None
    return math.prod(t.shape) * t.dtype.itemsize


def plan_memory(graph: Graph, layers: list[LayerPlan]) -> MemoryPlan:
    """Lifetimes of every activation of a layer plan (static shapes) and their arena offsets."""
    first: dict[str, int] = {v.name: -1 for v in graph.inputs}
    last: dict[str, int] = {}
    for i, lp in enumerate(layers):
        for n in lp.outputs:
            first.setdefault(n, i)
        for n in lp.inputs:
            last[n] = i
    for v in graph.outputs:
        last[v.name] = len(layers)
    buffers = []
    for name, start in first.items():
        size = _nbytes(graph, name)
        if size is None or name in graph.initializers:
            continue
        buffers.append(Buffer(name, _align(size), start, last.get(name, start)))
    placed: list[Buffer] = []
    for b in sorted(buffers, key=lambda b: (-b.size, b.first)):
        live = sorted((p.offset, p.offset + p.size) for p in placed if p.first <= b.last and b.first <= p.last)
        offset = 0
        for lo, hi in live:
            if offset + b.size <= lo:
                break
            offset = max(offset, hi)
        b.offset = offset
        placed.append(b)
    weights = sum(t.numel() * t.element_size() for t in graph.initializers.values())
    return MemoryPlan(
        buffers=sorted(placed, key=lambda b: b.first),
        arena_bytes=max((b.offset + b.size for b in placed), default=0),
        naive_bytes=sum(b.size for b in placed),
        weight_bytes=weights,
    )
