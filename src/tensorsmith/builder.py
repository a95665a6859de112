"""build(): model in, Engine out. The stages of DESIGN.md, in order."""

from __future__ import annotations

import logging
from typing import Any, Iterable

from .engine import Plan
from .errors import TensorsmithError
from .frontends import import_onnx
from .ir import Graph, verify
from .passes import DEFAULT_OPT_LEVEL, check_pass_options, group_layers, run_passes
from .runtime import Engine

TARGETS = ("cpu",)
log = logging.getLogger("tensorsmith.build")


def build(
    model: Any,
    target: str = "cpu",
    opt_level: int = DEFAULT_OPT_LEVEL,
    disable_passes: Iterable[str] = (),
) -> Engine:
    """Build an Engine from an ONNX path, bytes, onnx.ModelProto or an IR Graph.

    `opt_level` (0..5) selects the graph passes (0 changes nothing numerically); any pass can
    be switched off by name with `disable_passes` (see `tensorsmith.passes.describe_passes()`).
    `target` is "cpu" (the op-by-op PyTorch reference); the GPU target slots in here.
    """
    if target not in TARGETS:
        raise TensorsmithError(f"unknown target '{target}'; choose one of {list(TARGETS)}")
    disable_passes = list(disable_passes)
    check_pass_options(opt_level, disable_passes)
    graph = model if isinstance(model, Graph) else import_onnx(model)
    verify(graph)
    nodes_before = len(graph.nodes)
    for run in run_passes(graph, opt_level, disable_passes):
        log.debug("pass %-34s %3d changes %7.1f ms", run.name, run.changes, run.seconds * 1e3)
    if graph.layers is None:
        group_layers(graph, fuse=False)
    verify(graph)
    log.info("optimized %d nodes into %d nodes in %d layers", nodes_before, len(graph.nodes), len(graph.layers))
    return Engine(Plan.from_graph(graph, target))
