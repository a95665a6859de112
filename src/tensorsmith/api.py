"""The one-call path: `tensorsmith.compile("model.onnx", precision="fp16")` -> Engine."""

from __future__ import annotations

import logging
from typing import Any

import torch

from .builder import build
from .runtime import Engine

log = logging.getLogger("tensorsmith.build")


def compile(model: Any, precision: str = "fp32", target: str | None = None, **options: Any) -> Engine:
    """Build an Engine for the best target here: the GPU if there is one, else the CPU.

    `model` is an ONNX path/bytes/ModelProto, an IR Graph or a `tensorsmith.Network`; other
    keyword arguments go to `tensorsmith.build` (profiles, opt_level, timing_cache, ...).
    On the CPU, which runs float32 only, a half `precision` falls back to "fp32" (logged).
    The engine is callable: `engine(x)`."""
    if target is None:
        target = "cuda" if torch.cuda.is_available() else "cpu"
    if target == "cpu" and precision != "fp32":
        log.warning("no CUDA GPU: building for the CPU in fp32 instead of %s", precision)
        precision = "fp32"
    return build(model, target=target, precision=precision, **options)
