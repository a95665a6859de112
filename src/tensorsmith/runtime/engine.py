"""The Engine a user runs: built once, then run many times on feeds."""

from __future__ import annotations

from typing import Any, Mapping

import numpy as np
import torch

from ..engine import Plan
from ..ops.interpreter import run_graph
from .feeds import check_feeds


class Engine:
    """A built model. `run` takes numpy arrays or torch tensors by input name and returns the same kind."""

    def __init__(self, plan: Plan, runners=None, cuda_graphs: bool = True):
        self.plan = plan
        self._executor = None
        self._graphs = None
        if plan.layers:
            from .executor import CudaGraphRunner, Executor

            weights = {n: t for n, t in plan.graph.initializers.items()}
            self._executor = Executor(plan.layers, runners, weights, [s.name for s in plan.inputs],
                                      [s.name for s in plan.outputs])
            if cuda_graphs and plan.target == "cuda":
                self._graphs = CudaGraphRunner(self._executor)
        self.device = torch.device("cuda") if plan.target == "cuda" else torch.device("cpu")

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

    def layer_report(self):
        """The Layers with the source nodes they absorbed, I/O types and tactics (see LayerReport)."""
        from ..engine import layer_report

        return layer_report(self.plan.graph, lambda layer: layer.attrs.get("tactic", "reference"))

    def run(self, feeds: Mapping[str, Any]) -> dict[str, Any]:
        """Run on `feeds`; returns {output name: value}, numpy if any feed was numpy, else torch."""
        tensors = check_feeds(feeds, self.plan.inputs)
        as_numpy = any(not isinstance(v, torch.Tensor) for v in feeds.values()) or not feeds
        with torch.inference_mode():
            results = self._run(tensors)
        out = {}
        for spec, t in zip(self.plan.outputs, results):
            out[spec.name] = _to_numpy(t) if as_numpy else t
        return out

    def _run(self, tensors: dict[str, torch.Tensor]) -> list[torch.Tensor]:
        if self._executor is None:
            return run_graph(self.plan.graph, tensors)
        on_device = {n: t.to(self.device, non_blocking=True) for n, t in tensors.items()}
        if self._graphs is not None:
            # Outputs live in the graph's static buffers: hand out copies that the next run won't overwrite.
            return [t.clone() for t in self._graphs.run(on_device)]
        return self._executor.run(on_device)

    def profile(self, feeds: Mapping[str, Any], repeats: int = 20) -> list[tuple[str, str, float]]:
        """Per-Layer median time in ms, as (layer, tactic, ms), measured without CUDA graphs."""
        if self._executor is None:
            raise RuntimeError("per-Layer profiles need a plan of Layers (target='cuda')")
        tensors = {n: t.to(self.device) for n, t in check_feeds(feeds, self.plan.inputs).items()}
        with torch.inference_mode():
            return self._executor.profile(tensors, repeats)

    def __call__(self, *args, **kwargs):
        """engine(x) for a one-input engine, engine(a=..., b=...) by name; returns one output or a tuple."""
        feeds = dict(kwargs)
        for spec, a in zip(self.plan.inputs, args):
            feeds[spec.name] = a
        res = list(self.run(feeds).values())
        return res[0] if len(res) == 1 else tuple(res)

    def __repr__(self) -> str:
        ins = ", ".join(str(s) for s in self.plan.inputs)
        outs = ", ".join(str(s) for s in self.plan.outputs)
        return f"<Engine target={self.target} ({ins}) -> ({outs})>"


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
