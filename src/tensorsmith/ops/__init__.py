"""The op registry and the op definitions (importing this package registers every op)."""

# Each module registers a family of ops.
from . import (  # noqa: E402,F401
    activations,
    attention,
    basic,
    cast,
    control_flow,
    elementwise,
    indexing,
    linear,
    loss,
    misc,
    nn,
    normalization,
    quantize,
    recurrent,
    reduce,
    signal,
    tensor_shape,
    tensor_build,
    vision,
)
from .registry import (
    REGISTRY,
    InferContext,
    OpDef,
    RunContext,
    broadcast,
    is_supported,
    lookup,
    register,
    same_as,
)


def supported_ops(domain: str = "") -> list[str]:
    """Names of the registered ops of a domain ('' is the default ONNX domain)."""
    return sorted(name for d, name in REGISTRY if d == domain)


__all__ = [
    "REGISTRY", "InferContext", "OpDef", "RunContext", "broadcast", "is_supported", "lookup",
    "register", "same_as", "supported_ops",
]
