"""The reference tactic: the Layer's nodes run op by op with the registry's PyTorch references.

It applies to every Layer on every device, so a plan always exists, and it is what every other
tactic is checked against.
"""

from __future__ import annotations

import torch

from ..ops import RunContext, lookup
from ..ops.interpreter import run_graph
from .base import LayerContext, Runner, Tactic, register_tactic


class ReferenceTactic(Tactic):
    name = "reference"
    accepts_strided = True  # PyTorch ops take any layout

    def applies(self, lc: LayerContext) -> bool:
        return True

    def compile(self, lc: LayerContext, config: dict) -> Runner:
        steps = [(lookup(n.op_type, n.domain, n.opset, n.name).reference, n, any(n.subgraphs()), not n.inputs)
                 for n in lc.nodes]
        contexts = {id(n): RunContext(n) for n in lc.nodes}
        in_names = [v.name for v in lc.inputs]
        out_names = [v.name for v in lc.outputs]
        weights = dict(lc.weights)
        device = lc.device

        def run(inputs: list[torch.Tensor]) -> list[torch.Tensor]:
            env = dict(weights)
            env.update(zip(in_names, inputs))
            for ref, node, has_subgraphs, no_inputs in steps:
                ctx = contexts[id(node)]
                if has_subgraphs:  # If/Loop/Scan bodies read the enclosing values by name
                    ctx = RunContext(node, lambda g, ins, env=env: run_graph(
                        g, {v.name: t for v, t in zip(g.inputs, ins)}, outer=env, device=device))
                res = ref(ctx, *[env[v.name] if v is not None else None for v in node.inputs])
                res = res if isinstance(res, (tuple, list)) else (res,)
                if no_inputs:  # Constant and friends create their tensors on the CPU
                    res = [r.to(device) if isinstance(r, torch.Tensor) else r for r in res]
                env.update((v.name, t) for v, t in zip(node.outputs, res))
            return [env[n] for n in out_names]

        return run


REFERENCE = register_tactic(ReferenceTactic())
