"""Refit: replace the weights of a built engine without rebuilding (TensorRT's IRefitter).

Weights are named by their original (ONNX initializer) names. The builder records which of
them reach the engine unchanged: those can be refit. A weight that a pass folded into another
constant (BatchNorm or a per-channel Mul/Add folded into a Conv's weights, a Transpose of a
weight evaluated by constant folding) no longer exists in the engine under its name; refitting
it would mean recomputing the fold, so it is reported as not refittable instead. Build with
`refittable=True` to keep the weight-changing folds (batchnorm_folding, scale_shift_folding)
out; disable `constant_folding` too if weights pass through ops such as Transpose or Cast.

A refit swaps the tensors and recompiles every Layer with its stored tactic and config (no
tuning); contexts drop their captured CUDA graphs on their next run.
"""

from __future__ import annotations

from typing import Any, Mapping

import torch

from ..errors import RefitError
from ..ir import DType, Graph
from .feeds import to_torch


def weight_record(graph: Graph, originals: Mapping[str, torch.Tensor]) -> dict:
    """What the builder stores for refit: the original weights still present unchanged (with the
    dtype and shape the model declared) and those folded away."""
    weights = {n: {"dtype": DType.from_torch(t.dtype).value, "shape": list(t.shape)}
               for n, t in originals.items() if graph.initializers.get(n) is t}
    return {"weights": weights, "folded": sorted(set(originals) - set(weights))}


class Refitter:
    """`Refitter(engine).set_weights({"name": array}); refitter.refit()`.

    `set_weights` checks each name, shape and dtype at once (RefitError otherwise); `refit`
    installs everything given so far in one step."""

    def __init__(self, engine):
        self.engine = engine
        self.record = engine.refittable or {"weights": {}, "folded": []}
        self.pending: dict[str, torch.Tensor] = {}

    @property
    def refittable(self) -> list[str]:
        return sorted(self.record["weights"])

    def set_weights(self, weights: Mapping[str, Any]) -> "Refitter":
        for name, value in weights.items():
            self.pending[name] = self._check(name, value)
        return self

    def refit(self) -> bool:
        """Install the weights given to `set_weights`; True when something changed."""
        if not self.pending:
            return False
        self.engine._replace_weights(self.pending)
        self.pending = {}
        return True

    def _check(self, name: str, value: Any) -> torch.Tensor:
        spec = self.record["weights"].get(name)
        if spec is None:
            if name in self.record["folded"]:
                raise RefitError(
                    f"weight '{name}' cannot be refit: the build folded it into other weights (or dropped it as "
                    "unused), so the engine has no tensor of that name; rebuild with refittable=True (and "
                    "disable_passes=['constant_folding'] if it passes through an op such as Transpose)")
            known = self.refittable
            raise RefitError(f"the engine has no weight named '{name}'; refittable weights: "
                             f"{known[:20]}{' ...' if len(known) > 20 else ''}")
        t = to_torch(value, name).detach()
        dtype = DType.from_torch(t.dtype).value
        if list(t.shape) != spec["shape"] or dtype != spec["dtype"]:
            raise RefitError(f"weight '{name}' is {dtype}{list(t.shape)}, the engine's is "
                             f"{spec['dtype']}{spec['shape']}; refit keeps shapes and dtypes (rebuild to change them)")
        current = self.engine.plan.graph.initializers[name]
        return t.to(dtype=current.dtype).clone().contiguous()  # the engine's precision (fp16 builds), owned copy
