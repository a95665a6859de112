"""A plan of Layers on the CPU (reference tactic): the GPU target's runtime path, testable here.

It builds exactly as the builder does for target='cuda' (tune each profile at opt on a
specialized copy, keep the symbolic graph), with the CPU as the device and no timing."""

from __future__ import annotations

import torch

import tensorsmith
from tensorsmith.builder import _plan_profiles, plan_layers
from tensorsmith.engine import Plan
from tensorsmith.runtime import Engine
from tensorsmith.tactics import TACTICS

CPU = torch.device("cpu")
# Triton kernels run under Triton's interpreter on the CPU, which is not thread-safe (and slow).
NOT_TRITON = {name for name in TACTICS if not name.startswith("triton")}


def build_layered(model, profiles=None, allowed=NOT_TRITON, **options) -> Engine:
    """`allowed`: the tactics to choose from (the first that runs correctly wins)."""
    base = tensorsmith.build(model, target="cpu", profiles=profiles, **options)
    graph = base.plan.graph
    plan = Plan(graph, "cpu", base.plan.inputs, base.plan.outputs, precision="fp32")
    if base.profiles:
        _, profile_layers, prebuilt = _plan_profiles(graph, plan, base.profiles, "fp32", None, None, False,
                                                   device=CPU, allowed=allowed)
        plan.layers = profile_layers[0]
        return Engine(plan, profiles=base.profiles, profile_layers=profile_layers, prebuilt=prebuilt,
                      refittable=base.refittable)
    plan.layers, runners = plan_layers(graph, CPU, "fp32", None, None, False, allowed)
    return Engine(plan, runners=runners, refittable=base.refittable)
