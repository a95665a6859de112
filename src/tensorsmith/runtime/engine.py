"""The Engine a user runs: built once (or loaded from a file), then run many times.

An Engine owns what every execution shares: the optimized graph, the weights (once, on the
device), the per-Layer tactics and the compiled runners (cached per concrete input shape).
What one execution needs for itself (activation memory, captured CUDA graphs, the selected
optimization profile) lives in an ExecutionContext; `engine.run`/`engine(x)` use one
context per calling thread.
"""

from __future__ import annotations

import os
import threading
from collections import OrderedDict
from typing import Any, Mapping

import numpy as np
import torch

from ..engine import Plan
from ..engine.profile import OptimizationProfile, select_profile
from ..engine.weights import place_weight
from .arena import arena_enabled
from .feeds import check_feeds
from .specialize import ShapeKey, compile_runners, shape_key, specialize_graph, static_shapes, weights_on


class Engine:
    """A built model. `run` takes numpy arrays or torch tensors by input name and returns the same kind.

    - `create_execution_context()` for explicit control (streams, device tensors, profiles);
    - `save(path)` writes a `.tsmith` file that `tensorsmith.Runtime().load(path)` reads back;
    - `refit(weights)` replaces weights by their original names without rebuilding.
    """

    #: Concrete shapes whose compiled runners stay cached (per engine, least recently used dropped).
    max_specializations = 16

    def __init__(self, plan: Plan, runners=None, cuda_graphs: bool = True,
                 profiles: list[OptimizationProfile] | None = None, profile_layers: list | None = None,
                 refittable: dict | None = None, prebuilt: dict | None = None):
        self.plan = plan
        self.profiles = list(profiles or [])
        self.profile_layers = list(profile_layers or ([plan.layers] if plan.layers else []))
        self.refittable = refittable  # {"weights": {name: {dtype, shape}}, "folded": [names]}
        self.cuda_graphs = cuda_graphs and plan.target == "cuda"
        self.use_arena = arena_enabled()  # what new contexts do unless told (runtime/arena.py)
        self.device = torch.device("cuda") if plan.target == "cuda" else torch.device("cpu")
        self.generation = 0  # bumped by refit: contexts drop what they captured
        self.source = "<built engine>"  # the file it was loaded from, for error messages
        self._lock = threading.RLock()
        self._local = threading.local()
        self._executors: OrderedDict = OrderedDict()
        self._weights: dict[str, torch.Tensor] | None = None
        if plan.layers:
            self._weights = weights_on(plan.graph, self.device)
            if runners is not None:
                shapes = static_shapes(plan.graph)
                if shapes is not None:
                    self._remember((None, shape_key(shapes)), plan.layers, runners)
            for key, rs in (prebuilt or {}).items():
                self._remember(key, self.profile_layers[key[0] or 0], rs)

    # -- what the engine is ----------------------------------------------------------------
    @property
    def inputs(self):
        return list(self.plan.inputs)

    @property
    def outputs(self):
        return list(self.plan.outputs)

    @property
    def target(self) -> str:
        return self.plan.target

    @property
    def layers(self):
        return list(self.plan.graph.layers or [])

    @property
    def refittable_weights(self) -> list[str]:
        """Original weight names `refit` accepts."""
        return sorted((self.refittable or {}).get("weights", {}))

    def layer_report(self):
        """The Layers with the source nodes they absorbed, I/O types and tactics (see LayerReport)."""
        from ..engine import layer_report

        return layer_report(self.plan.graph, lambda layer: layer.attrs.get("tactic", "reference"))

    # -- contexts and running --------------------------------------------------------------
    def create_execution_context(self, device_memory=None, arena: bool | None = None):
        """A new ExecutionContext: shares this engine's weights, has its own activation memory
        (or `device_memory`, a `DeviceMemory` shared with contexts that never run concurrently).

        `arena` (default `engine.use_arena`): runners write activations into the context's arena
        where they can, at offsets planned by liveness; False lets every runner allocate."""
        from .context import ExecutionContext

        return ExecutionContext(self, device_memory, self.use_arena if arena is None else arena)

    def run(self, feeds: Mapping[str, Any]) -> dict[str, Any]:
        """Run on `feeds`; returns {output name: value}, numpy if any feed was numpy, else torch.

        Inputs are copied to the engine's device and outputs are fresh tensors (use a context's
        `execute` to avoid both). Blocks until the results are ready."""
        as_numpy = not feeds or any(not isinstance(v, torch.Tensor) for v in feeds.values()) \
            if isinstance(feeds, Mapping) else False
        ctx = getattr(self._local, "context", None)
        if ctx is None:
            ctx = self._local.context = self.create_execution_context()
        tensors = check_feeds(feeds, self.plan.inputs)
        on_device = {n: t.to(self.device, non_blocking=True) for n, t in tensors.items()}
        results = ctx._enqueue(on_device)  # the feeds were checked just above
        out = {}
        for name, t in results.items():
            # The context's buffers are reused by its next run; channels-last results come back contiguous.
            t = t.clone(memory_format=torch.contiguous_format) if self.cuda_graphs else t.contiguous()
            out[name] = _to_numpy(t) if as_numpy else t
        return out

    def __call__(self, *args, **kwargs):
        """engine(x) for a one-input engine, engine(a=..., b=...) by name; returns one output or a tuple."""
        feeds = dict(kwargs)
        for spec, a in zip(self.plan.inputs, args):
            feeds[spec.name] = a
        res = list(self.run(feeds).values())
        return res[0] if len(res) == 1 else tuple(res)

    def profile(self, feeds: Mapping[str, Any], repeats: int = 20) -> list[tuple[str, str, float]]:
        """Per-Layer median time in ms, as (layer, tactic, ms), measured without CUDA graphs."""
        if not self.plan.layers:
            raise RuntimeError("per-Layer profiles need a plan of Layers (target='cuda')")
        tensors = {n: t.to(self.device) for n, t in check_feeds(feeds, self.plan.inputs).items()}
        shapes = {n: tuple(t.shape) for n, t in tensors.items()}
        executor = self.executor_for(self.select_profile(shapes), shapes)
        with torch.inference_mode():
            return executor.profile(tensors, repeats)

    # -- shapes, profiles and compiled runners ---------------------------------------------
    def select_profile(self, shapes: Mapping[str, tuple[int, ...]], only: int | None = None) -> int | None:
        """The profile for these input shapes (`only` to insist on one); None without profiles."""
        if not self.profiles:
            return None
        return select_profile(self.profiles, shapes, only)

    def executor_for(self, profile: int | None, shapes: Mapping[str, tuple[int, ...]]):
        """The Executor for these concrete shapes: the build's runners at the tuned shapes, else the
        same tactics and configs compiled again at `shapes` (cached, see runtime/specialize.py)."""
        key = (profile, shape_key(shapes))
        with self._lock:
            hit = self._executors.get(key)
            if hit is not None:
                self._executors.move_to_end(key)
                return hit
            layer_plans = self.profile_layers[profile or 0]
            graph = self.plan.graph
            tuned = static_shapes(graph)
            if tuned is None or shape_key(tuned) != key[1]:
                graph = specialize_graph(graph, shapes)
            runners = compile_runners(graph, layer_plans, self._weights, self.device, self.plan.precision,
                                      where=self.source, fallback=tuned is None, strict=self.plan.strict)
            return self._remember(key, layer_plans, runners)

    def _remember(self, key: tuple[int | None, ShapeKey], layer_plans, runners):
        from .executor import Executor

        ex = Executor(layer_plans, runners, self._weights, [s.name for s in self.plan.inputs],
                      [s.name for s in self.plan.outputs], self.device)
        self._executors[key] = ex
        while len(self._executors) > self.max_specializations:
            self._executors.popitem(last=False)
        return ex

    # -- files and weights -----------------------------------------------------------------
    def serialize(self) -> bytes:
        """The engine file's bytes (see tensorsmith.engine.serialize for the format)."""
        from ..engine.serialize import EngineData, dump_engine

        return dump_engine(EngineData(self.plan, self.profiles, self.profile_layers if self.profiles else [],
                                      self.refittable))

    def save(self, path: str | os.PathLike) -> None:
        """Write the engine to `path` (e.g. "model.tsmith"); the file holds data only, no code."""
        blob = self.serialize()
        tmp = f"{os.fspath(path)}.tmp{os.getpid()}"
        with open(tmp, "wb") as f:
            f.write(blob)
        os.replace(tmp, path)  # never leave a half-written engine under the real name

    def refit(self, weights: Mapping[str, Any]) -> None:
        """Replace weights by their original (ONNX initializer) names; same shapes and dtypes.

        Not to be called while a context of this engine is running."""
        from .refit import Refitter

        r = Refitter(self)
        r.set_weights(weights)
        r.refit()

    def _replace_weights(self, new: dict[str, torch.Tensor]) -> None:
        """Install checked tensors (engine dtype) and drop every runner and captured graph built on the old."""
        with self._lock:
            for name, t in new.items():
                self.plan.graph.initializers[name] = t
                if self._weights is not None:
                    self._weights[name] = place_weight(self.plan.graph, name, t, self.device)
            self._executors.clear()  # tactics may have packed the old weights: compile again (no tuning)
            self.generation += 1

    def __repr__(self) -> str:
        ins = ", ".join(str(s) for s in self.plan.inputs)
        outs = ", ".join(str(s) for s in self.plan.outputs)
        prof = f" profiles={len(self.profiles)}" if self.profiles else ""
        return f"<Engine target={self.target}{prof} ({ins}) -> ({outs})>"


def _to_numpy(t: torch.Tensor) -> np.ndarray:
    t = t.detach().cpu()
    if t.dtype == torch.bfloat16:
        import ml_dtypes

        return t.view(torch.uint16).numpy().view(ml_dtypes.bfloat16)
    if t.dtype in _FP8:
        import ml_dtypes

        return t.view(torch.uint8).numpy().view(getattr(ml_dtypes, _FP8[t.dtype]))
    return t.numpy()


_FP8 = {
    torch.float8_e4m3fn: "float8_e4m3fn", torch.float8_e4m3fnuz: "float8_e4m3fnuz",
    torch.float8_e5m2: "float8_e5m2", torch.float8_e5m2fnuz: "float8_e5m2fnuz",
}
