"""The op registry and the op definitions (importing this package registers every op)."""

from .registry import REGISTRY, InferContext, OpDef, RunContext, broadcast, is_supported, lookup, register, same_as

# Each module registers a family of ops.
from . import (  # noqa: E402,F401
    basic,
    elementwise,
    tensor_shape,
    indexing,
    nn,
    normalization,
    reduce,
    recurrent,
    attention,
    quantize,
    loss,
    control_flow,
    signal,
    vision,
    misc,
)


def supported_ops(domain: str = "") -> list[str]:
    """Names of the registered ops of a domain ('' is the default ONNX domain)."""
    return sorted(name for d, name in REGISTRY if d == domain)


__all__ = [
    "REGISTRY", "InferContext", "OpDef", "RunContext", "broadcast", "is_supported", "lookup",
    "register", "same_as", "supported_ops",
]
