"""The memory plan: activations packed into one arena by liveness.

Each activation lives from the Layer that writes it to the last Layer that reads it; two
activations whose lifetimes do not overlap may share bytes. Offsets are assigned greedily,
largest first, at the lowest aligned offset free for the whole lifetime (the classic
interval-packing heuristic that TensorRT and TFLite use). The plan reports the arena size
(peak), the naive sum (every activation its own buffer) and the weight bytes.

`plan_memory` plans every activation (what the engine could reach); `plan_arena` plans the
activations the executor actually binds (runtime/executor.py): those whose runner writes into
a tensor it is given (tactics/base.py), minus what an engine output may share bytes with.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
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
    bound: MemoryPlan | None = None  # the part the executor binds to its arena (plan_arena)

    def summary(self) -> dict:
        out = {"activation_arena_bytes": self.arena_bytes, "activation_naive_bytes": self.naive_bytes,
               "weight_bytes": self.weight_bytes, "buffers": len(self.buffers)}
        if self.bound is not None:
            bound = {b.name for b in self.bound.buffers}
            out.update(arena_bound_bytes=self.bound.naive_bytes, device_arena_bytes=self.bound.arena_bytes,
                       # views of other activations count here too: their bytes are not known apart
                       runner_allocated_bytes=sum(b.size for b in self.buffers if b.first >= 0 and b.name not in bound))
        return out


def _align(n: int) -> int:
    return (n + ALIGNMENT - 1) // ALIGNMENT * ALIGNMENT


def _nbytes(graph: Graph, name: str) -> int | None:
    v = graph.lookup(name)
    t = v.type if v is not None else None
    if t is None or t.dtype is None or not t.is_static:
        return None
    return math.prod(t.shape) * t.dtype.itemsize


def pack(buffers: list[Buffer]) -> MemoryPlan:
    """Offsets for `buffers` (sizes aligned, lifetimes set): two share bytes only if their
    lifetimes do not overlap. Returns the plan without weights."""
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
    return MemoryPlan(buffers=sorted(placed, key=lambda b: b.first),
                      arena_bytes=max((b.offset + b.size for b in placed), default=0),
                      naive_bytes=sum(b.size for b in placed))


def plan_memory(graph: Graph, layers: list[LayerPlan], written: Iterable[str] | None = None) -> MemoryPlan:
    """Lifetimes of every activation of a layer plan (static shapes) and their arena offsets.

    With `written` (the values whose runners write into a given tensor), `bound` is the arena
    the executor would bind (plan_arena), at the graph's shapes."""
    names = [v.name for v in graph.inputs] + [n for lp in layers for n in lp.outputs]
    sizes = {n: s for n in names if n not in graph.initializers and (s := _nbytes(graph, n)) is not None}
    plan = plan_sizes(layers, sizes, [v.name for v in graph.inputs], [v.name for v in graph.outputs], written)
    plan.weight_bytes = sum(t.numel() * t.element_size() for t in graph.initializers.values())
    return plan


def plan_sizes(layers: list[LayerPlan], sizes: Mapping[str, int], inputs: Iterable[str], outputs: Iterable[str],
               written: Iterable[str] | None = None) -> MemoryPlan:
    """`plan_memory` from the activations' sizes in bytes (those without one are left out)."""
    outputs = list(outputs)
    first: dict[str, int] = {n: -1 for n in inputs}
    last: dict[str, int] = {}
    for i, lp in enumerate(layers):
        for n in lp.outputs:
            first.setdefault(n, i)
        for n in lp.inputs:
            last[n] = i
    for n in outputs:
        last[n] = len(layers)
    plan = pack([Buffer(n, _align(sizes[n]), start, last.get(n, start)) for n, start in first.items() if n in sizes])
    if written is not None:
        plan.bound = plan_arena(layers, sizes, written, outputs)
    return plan


def plan_arena(layers: list[LayerPlan], sizes: Mapping[str, int], written: Iterable[str],
               outputs: Iterable[str]) -> MemoryPlan:
    """The arena of a run: one buffer per value of `written` that has a size in `sizes` (bytes).

    An output that its runner does not write into the arena may be a view of the runner's inputs
    (Reshape, Transpose, Split and Identity return views; any runner may), so an arena buffer
    stays live until the last reader of every value that may share its bytes, and a buffer that
    an engine output may share bytes with is left out (outputs outlive the run). Engine inputs
    and outputs are never in the arena."""
    produced = {n for lp in layers for n in lp.outputs}
    written = {n for n in written if n in produced and sizes.get(n, 0) > 0}
    outputs = set(outputs)
    first: dict[str, int] = {}
    last: dict[str, int] = {}
    bases: dict[str, set[str]] = {}  # value -> arena buffers whose bytes it may show
    for i, lp in enumerate(layers):
        for n in lp.inputs:
            last[n] = i
        # what an output the runner allocates itself may be a view of (its own bound outputs too)
        shown = set().union(*(bases.get(n, ()) for n in lp.inputs), written.intersection(lp.outputs))
        for n in lp.outputs:
            first.setdefault(n, i)
            bases[n] = {n} if n in written else shown
    end: dict[str, int] = {}
    dropped: set[str] = set()
    for v, bs in bases.items():
        for b in bs:
            end[b] = max(end.get(b, first[b]), last.get(v, first[v]))
            if v in outputs:
                dropped.add(b)
    return pack([Buffer(b, _align(sizes[b]), first[b], end[b]) for b in sorted(written - dropped)])
