"""Compiling a plan's Layers into runners, at the graph's shapes or at new concrete shapes.

An engine stores, per Layer, a tactic name and a JSON config chosen by the tuner at the
profile's `opt` shapes. GPU tactics compile for static shapes, so for another shape inside
the profile the runtime *re-specializes*: it copies the optimized graph (sharing weights),
binds the inputs to the concrete shapes, infers every type again, and compiles the same
tactics with the same configs at those shapes. Nothing is re-tuned. The result is cached
per shape by the Engine. A tactic whose config cannot compile at a shape falls back to the
reference tactic for that Layer (logged), so every shape in range runs.
"""

from __future__ import annotations

import logging
from typing import Mapping

import torch

from ..engine.graph_codec import copy_graph
from ..errors import EngineTacticError, TensorsmithError
from ..ir import DType, Graph, TensorType
from ..ops.inference import infer_graph
from ..tactics import REFERENCE, TACTICS, LayerContext, Runner
from ..tactics.base import activation_layout_for, layer_dtype

log = logging.getLogger("tensorsmith.runtime")
_HALF = {"fp16": torch.float16, "bf16": torch.bfloat16}

ShapeKey = tuple  # tuple of (input name, shape) sorted by name


def shape_key(shapes: Mapping[str, tuple[int, ...]]) -> ShapeKey:
    return tuple(sorted((n, tuple(int(d) for d in s)) for n, s in shapes.items()))


def static_shapes(graph: Graph) -> dict[str, tuple[int, ...]] | None:
    """The graph's input shapes if all are static, else None."""
    out = {}
    for v in graph.inputs:
        if v.type is None or not v.type.is_static:
            return None
        out[v.name] = tuple(v.type.shape)
    return out


def specialize_graph(graph: Graph, shapes: Mapping[str, tuple[int, ...]]) -> Graph:
    """A copy of `graph` (same weights) with inputs bound to `shapes` and every type inferred again."""
    g = copy_graph(graph)
    for v in g.inputs:
        if v.name in shapes:
            v.type = TensorType(v.type.dtype if v.type is not None else None, tuple(shapes[v.name]))
    for n in g.nodes:
        for v in n.outputs:
            v.type = None
    infer_graph(g)
    return g


def compile_runners(graph: Graph, layer_plans: list, weights: dict[str, torch.Tensor], device: torch.device,
                    precision: str = "fp32", where: str = "<engine>", fallback: bool = False,
                    strict: bool = False) -> list[Runner]:
    """One runner per Layer of `graph`, from each LayerPlan's tactic and config.

    Each Layer compiles at the precision and strictness it was tuned with (builder.plan_layers
    asks tactics.base.layer_dtype too: overridden Layers of a half build are float32).

    `weights` are the engine's tensors on `device` by value name (shared by every runner).
    A tactic missing from this tensorsmith is an EngineTacticError; a config that fails to
    compile is one too, unless `fallback` (other shapes than the tuned ones) runs the reference."""
    layers = graph.layers or []
    if len(layers) != len(layer_plans) or any(lay.name != lp.name for lay, lp in zip(layers, layer_plans)):
        raise TensorsmithError(f"engine '{where}': its Layer plan does not match its graph's Layers; rebuild it")
    dtype = _HALF.get(precision, torch.float32)
    layout = activation_layout_for(graph, dtype)
    runners = []
    for layer, lp in zip(layers, layer_plans):
        tactic = TACTICS.get(lp.tactic)
        if tactic is None:
            raise EngineTacticError(where, f"Layer '{lp.name}' uses tactic '{lp.tactic}', which this tensorsmith does "
                                           f"not have (it has {sorted(TACTICS)})",
                                    "install the tensorsmith version that built the engine, or rebuild it")
        lc = LayerContext(layer, graph, {v.name: weights[v.name] for v in layer.weights(graph)}, device,
                          layer_dtype(layer, graph, dtype), activation_layout=layout, strict=strict)
        try:
            runners.append(tactic.build(lc, dict(lp.config)))
        except Exception as e:
            if not fallback or not REFERENCE.applies(lc):
                raise EngineTacticError(where, f"Layer '{lp.name}': tactic '{lp.tactic}' with config {lp.config} does "
                                               f"not compile here ({type(e).__name__}: {e})", "rebuild the engine") from e
            log.warning("Layer '%s': %s %s does not compile at these shapes (%s); running the reference",
                        lp.name, lp.tactic, lp.config, e)
            runners.append(REFERENCE.build(lc, {}))
    return runners


def weights_on(graph: Graph, device: torch.device) -> dict[str, torch.Tensor]:
    """The graph's weights on `device` (the same tensors when they are there already), except
    the shape-like ones that references read on the host."""
    from ..engine.weights import place_weights

    return place_weights(graph, device)


def dtype_name(t: torch.Tensor) -> str:
    return DType.from_torch(t.dtype).value
