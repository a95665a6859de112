"""build(): model in, Engine out. The stages of DESIGN.md, in order."""

from __future__ import annotations

from typing import Any

from .engine import Plan
from .errors import TensorsmithError
from .frontends import import_onnx
from .ir import Graph, verify
from .runtime import Engine

TARGETS = ("cpu",)


def build(model: Any, target: str = "cpu") -> Engine:
    """Build an Engine from an ONNX path, bytes, onnx.ModelProto or an IR Graph.

    `target` is "cpu" (the op-by-op PyTorch reference); the GPU target slots in here.
    """
    if target not in TARGETS:
        raise TensorsmithError(f"unknown target '{target}'; choose one of {list(TARGETS)}")
    graph = model if isinstance(model, Graph) else import_onnx(model)
    verify(graph)
    return Engine(Plan.from_graph(graph, target))
