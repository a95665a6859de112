"""The activation arena: one byte tensor per execution context, views of it handed to the runners.

An Executor learns its arena plan on its first run with an arena: runners allocate as usual and
it records the shape, strides and dtype of each output that a runner could write into a given
tensor (tactics/base.py). Layouts are the runners' own choice (images stay channels-last in
half-precision builds, and some kernels pick NCHW or NHWC by their inputs), so they are observed
rather than predicted; `plan_sizes` then packs those outputs by liveness (engine/memory.py). From
the next run on, each such output is written into its view of the arena. A runner handed a view
that is not in the layout it would produce allocates instead, so a changed layout costs memory,
never a wrong result.

`TENSORSMITH_ARENA=0` turns binding off for engines made afterwards (debugging); a context can
also be created with `arena=False`.
"""

from __future__ import annotations

import math
import os
import weakref
from dataclasses import dataclass

import torch

from ..engine.memory import MemoryPlan

Layout = tuple[tuple[int, ...], tuple[int, ...], torch.dtype]  # shape, strides, dtype


def arena_enabled() -> bool:
    """The default for new engines: on unless TENSORSMITH_ARENA is 0/false/off/no."""
    return os.environ.get("TENSORSMITH_ARENA", "1").strip().lower() not in ("0", "false", "off", "no")


def dense_layout(t: torch.Tensor) -> Layout | None:
    """`t`'s layout if its elements fill one block of memory without gaps or overlaps, else None."""
    if t.numel() == 0:
        return None
    expected = 1
    for stride, size in sorted((st, sz) for st, sz in zip(t.stride(), t.shape) if sz > 1):
        if stride != expected:
            return None
        expected *= size
    return tuple(t.shape), tuple(t.stride()), t.dtype


@dataclass
class ArenaPlan:
    """Where each bound output of an Executor lives: `memory.bound` holds the arena's buffers."""

    memory: MemoryPlan
    # per step: None (nothing bound), else per output None or (offset, layout)
    slots: list[list[tuple[int, Layout] | None] | None]

    @staticmethod
    def place(memory: MemoryPlan, layouts: dict[str, Layout], step_outputs: list[list[str]]) -> ArenaPlan:
        offsets = {b.name: b.offset for b in memory.bound.buffers}
        slots = []
        for names in step_outputs:
            step = [(offsets[n], layouts[n]) if n in offsets else None for n in names]
            slots.append(step if any(s is not None for s in step) else None)
        return ArenaPlan(memory, slots)

    @property
    def arena_bytes(self) -> int:
        return self.memory.bound.arena_bytes

    def views(self, arena: torch.Tensor) -> list[list[torch.Tensor | None] | None]:
        """The `out` list of every step, as views of `arena` (uint8, at least `arena_bytes`)."""
        def view(offset: int, layout: Layout) -> torch.Tensor:
            shape, strides, dtype = layout
            nbytes = math.prod(shape) * dtype.itemsize
            return arena[offset:offset + nbytes].view(dtype).as_strided(shape, strides)

        return [None if step is None else [None if s is None else view(*s) for s in step] for step in self.slots]


class Arena:
    """The activation bytes of one context, or of the contexts sharing a DeviceMemory (which never
    run at the same time). It grows to the largest plan that ran in it; a CUDA graph captured on
    an older tensor keeps that one alive (executor.CudaGraphRunner)."""

    def __init__(self):
        self.tensor: torch.Tensor | None = None
        self._views: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()  # executor -> (tensor, plan, views)

    def views(self, executor, plan: ArenaPlan, device: torch.device) -> list[list[torch.Tensor | None] | None]:
        t = self.tensor
        if t is None or t.numel() < plan.arena_bytes or t.device.type != device.type:
            t = self.tensor = torch.empty(plan.arena_bytes, dtype=torch.uint8, device=device)
            self._views.clear()  # views of the old tensor would keep it alive
        hit = self._views.get(executor)
        if hit is not None and hit[0] is t and hit[1] is plan:
            return hit[2]
        views = plan.views(t)
        self._views[executor] = (t, plan, views)
        return views
