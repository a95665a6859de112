"""Test helpers for tactics: LayerContexts of a small model, and a tactic's check against the reference."""

from __future__ import annotations

from typing import Any, Mapping

import torch

from ..builder import PRECISIONS, specialize_shapes
from ..engine.weights import place_weights
from ..frontends import import_onnx
from ..passes import group_layers, run_passes
from ..passes.precision import convert_precision
from ..tactics import REFERENCE, LayerContext, Tactic
from ..tuner import max_violation, random_inputs
from ..tuner.check import TOLERANCES


def layer_contexts(model: Any, input_shapes: Mapping[str, tuple] | None = None, device: str = "cpu",
                   precision: str = "fp32", opt_level: int = 3) -> list[LayerContext]:
    """The Layers of `model` as the GPU builder groups them, ready to hand to a tactic."""
    graph = import_onnx(model)
    if input_shapes:
        specialize_shapes(graph, input_shapes)
    run_passes(graph, opt_level)
    half = PRECISIONS[precision]
    if half is not None:
        convert_precision(graph, half)
        group_layers(graph, fuse=opt_level >= 3)
    dtype = half.torch if half is not None else torch.float32
    dev = torch.device(device)
    placed = place_weights(graph, dev)
    out = []
    for layer in graph.layers:
        weights = {v.name: placed[v.name] for v in layer.weights(graph)}
        out.append(LayerContext(layer, graph, weights, dev, dtype))
    return out


def check_tactic(tactic: Tactic, lc: LayerContext, config: dict | None = None, seed: int = 0) -> float:
    """Run the tactic and the reference on the same random inputs; returns the worst violation of
    the precision's tolerance (<= 0 means the tactic is correct)."""
    inputs = random_inputs(lc, seed)
    with torch.no_grad():
        want = REFERENCE.build(lc, {})(inputs)
        got = tactic.build(lc, config if config is not None else tactic.configs(lc)[0])(inputs)
    rtol, atol = TOLERANCES[lc.dtype]
    return max_violation(got, want, rtol, atol)
