"""ExecutionContext: one line of execution of an Engine (TensorRT's IExecutionContext).

Contexts of one engine share its weights and compiled runners; each has its own activation
memory (an arena, runtime/arena.py, and a CUDA graph pool), captured CUDA graphs (one per
concrete input shape, at most `max_graphs`) and selected optimization profile. Use one context
per thread (or per stream): a context is not meant to be entered by two threads at once, two
contexts are.
"""

from __future__ import annotations

from typing import Any, Mapping

import numpy as np
import torch

from ..errors import InputError, TensorsmithError
from ..ops.interpreter import run_graph
from .arena import Arena
from .engine import Engine, _to_numpy
from .feeds import check_feeds


class DeviceMemory:
    """Activation memory that several contexts may share, as TensorRT's `setDeviceMemory`.

    It is a CUDA graph memory pool and an activation arena: contexts created with the same
    DeviceMemory capture their graphs into it and bind activations to the same arena, so they
    must not run at the same time (the caller orders them, e.g. on one stream). Without it,
    every context has a pool and an arena of its own."""

    def __init__(self):
        if not torch.cuda.is_available():
            raise TensorsmithError("DeviceMemory needs a CUDA GPU; CPU contexts allocate as they run")
        self.pool = torch.cuda.graph_pool_handle()
        self.arena = Arena()


class ExecutionContext:
    """Runs an Engine. Create with `engine.create_execution_context()`."""

    max_graphs = 8  # captured CUDA graphs kept per context (one per input shape)

    def __init__(self, engine: Engine, device_memory: DeviceMemory | None = None, arena: bool = True):
        if device_memory is not None and not isinstance(device_memory, DeviceMemory):
            raise TensorsmithError(f"device_memory must be a tensorsmith.runtime.DeviceMemory, got "
                                   f"{type(device_memory).__name__}")
        self.engine = engine
        self.device_memory = device_memory
        self._profile: int | None = None
        self._generation = engine.generation
        self._graphs = None
        self._arena = None
        if arena:
            self._arena = device_memory.arena if device_memory is not None else Arena()
        if engine.cuda_graphs:
            from .executor import CudaGraphRunner

            self._graphs = CudaGraphRunner(max_graphs=self.max_graphs,
                                           pool=device_memory.pool if device_memory is not None else None)

    @property
    def profile(self) -> int | None:
        """The selected optimization profile (None: chosen by the input shapes at each run)."""
        return self._profile

    def set_profile(self, index: int | None) -> None:
        """Select optimization profile `index` (None: pick the first that contains the shapes)."""
        n = len(self.engine.profiles)
        if index is not None and not (isinstance(index, int) and 0 <= index < n):
            raise InputError(f"profile {index!r} does not exist; the engine has {n} profile(s)"
                             + (f" (0..{n - 1})" if n else "; build with profiles=[...] to get some"))
        self._profile = index

    def execute(self, feeds: Mapping[str, torch.Tensor], stream: torch.cuda.Stream | None = None) -> dict[str, torch.Tensor]:
        """Enqueue the engine on `stream` (default: the current stream) and return its outputs.

        Inputs are torch tensors already on the engine's device; nothing is copied to or from the
        host and the call does not wait for the GPU. With CUDA graphs the outputs are this
        context's buffers, valid until its next `execute` (copy them to keep them)."""
        engine = self.engine
        tensors = check_feeds(feeds, engine.plan.inputs)
        for name, t in tensors.items():
            if t.device.type != engine.device.type:
                raise InputError(f"input '{name}' is on {t.device}, the engine runs on {engine.device}; move it "
                                 "there first (execute does not copy), or use run_numpy/engine.run", name)
        return self._enqueue(tensors, stream)

    def _enqueue(self, tensors: dict[str, torch.Tensor], stream=None) -> dict[str, torch.Tensor]:
        """`execute` after its checks: `tensors` are already validated and on the device."""
        engine = self.engine
        shapes = {n: tuple(t.shape) for n, t in tensors.items()}
        profile = engine.select_profile(shapes, self._profile)
        if self._generation != engine.generation:  # refit replaced weights: graphs hold the old runners
            if self._graphs is not None:
                self._graphs.clear()
            self._generation = engine.generation
        names = [s.name for s in engine.plan.outputs]
        with torch.inference_mode(), _on_stream(stream, engine.device):
            if not engine.plan.layers:
                results = run_graph(engine.plan.graph, tensors)
            else:
                executor = engine.executor_for(profile, shapes)
                if self._graphs is not None:
                    results = self._graphs.run(tensors, executor, self._arena)
                else:
                    results = executor.run(tensors, self._arena)
        return dict(zip(names, results))

    def run_numpy(self, feeds: Mapping[str, Any]) -> dict[str, np.ndarray]:
        """Convenience: numpy (or any tensors) in, numpy out; copies in and out and waits."""
        tensors = check_feeds(feeds, self.engine.plan.inputs)
        on_device = {n: t.to(self.engine.device) for n, t in tensors.items()}
        return {n: _to_numpy(t) for n, t in self._enqueue(on_device).items()}

    def __repr__(self) -> str:
        return f"<ExecutionContext profile={self._profile} of {self.engine!r}>"


class _on_stream:
    def __init__(self, stream, device: torch.device):
        self.ctx = torch.cuda.stream(stream) if stream is not None and device.type == "cuda" else None

    def __enter__(self):
        if self.ctx is not None:
            self.ctx.__enter__()

    def __exit__(self, *exc):
        if self.ctx is not None:
            return self.ctx.__exit__(*exc)
