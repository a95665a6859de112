"""Typed errors. Every error names what is wrong (file, node, input, field) and how to fix it."""

from __future__ import annotations


class TensorsmithError(Exception):
    """Base class of every error tensorsmith raises on purpose."""


class ModelLoadError(TensorsmithError):
    """A model file could not be read or parsed."""

    def __init__(self, path: str, reason: str, fix: str = "check that the file is a complete ONNX model"):
        self.path = path
        super().__init__(f"cannot load model '{path}': {reason}; {fix}")


class InvalidGraphError(TensorsmithError):
    """The graph breaks an IR invariant (undefined input, double assignment, type mismatch...)."""

    def __init__(self, message: str, node: str | None = None, fix: str | None = None):
        self.node = node
        where = f"node '{node}': " if node else ""
        tail = f"; {fix}" if fix else ""
        super().__init__(f"invalid graph: {where}{message}{tail}")


class UnsupportedOperatorError(TensorsmithError):
    """No registered implementation for an operator (in this domain and opset)."""

    def __init__(self, op_type: str, domain: str, opset: int, node: str):
        self.op_type, self.domain, self.opset, self.node = op_type, domain, opset, node
        dom = domain or "ai.onnx"
        super().__init__(
            f"unsupported operator {dom}::{op_type} (opset {opset}) at node '{node}'; "
            "tensorsmith has no implementation of it: replace the op in the model, "
            "or register a plugin for it"
        )


class UnsupportedOpsetError(TensorsmithError):
    """The model imports an opset version tensorsmith does not know."""

    def __init__(self, domain: str, version: int, supported: str):
        self.domain, self.version = domain, version
        super().__init__(
            f"unsupported opset {domain or 'ai.onnx'} version {version}; supported: {supported}; "
            "re-export the model with a supported opset (e.g. torch.onnx.export(..., opset_version=17))"
        )


class UnsupportedDTypeError(TensorsmithError):
    """A tensor has an element type that tensorsmith cannot represent."""

    def __init__(self, dtype: str, where: str):
        self.dtype = dtype
        super().__init__(
            f"unsupported element type {dtype} for {where}; "
            "convert the tensor to a numeric type tensorsmith supports (float32, float16, int64, ...)"
        )


class ShapeInferenceError(TensorsmithError):
    """Shapes or dtypes of a node's inputs are inconsistent with the op."""

    def __init__(self, node: str, op_type: str, message: str):
        self.node = node
        super().__init__(f"node '{node}' ({op_type}): {message}")


class InputError(TensorsmithError):
    """A feed given to Engine.run does not match the engine's inputs."""

    def __init__(self, message: str, name: str | None = None):
        self.name = name
        super().__init__(message)


class ExecutionError(TensorsmithError):
    """A node failed while running (bad data for the op, out-of-range index, ...)."""

    def __init__(self, node: str, op_type: str, reason: str):
        self.node, self.op_type = node, op_type
        super().__init__(f"node '{node}' ({op_type}) failed at run time: {reason}")


class EngineFormatError(TensorsmithError):
    """An engine file cannot be loaded: not an engine, corrupt, or from an incompatible build.

    Subclasses say which; `path` names the file ("<bytes>" when loaded from memory)."""

    def __init__(self, path: str, reason: str, fix: str):
        self.path, self.reason, self.fix = path, reason, fix
        super().__init__(f"cannot load engine '{path}': {reason}; {fix}")


class EngineVersionError(EngineFormatError):
    """The file was written in another engine format version."""


class EngineCorruptError(EngineFormatError):
    """The file is truncated, or its body does not match its checksum or does not decode."""


class EngineTargetError(EngineFormatError):
    """The engine was built for another device (GPU architecture, or a GPU where none is present)."""


class EngineTacticError(EngineFormatError):
    """A Layer's tactic is not in this tensorsmith, or cannot be compiled from its stored config."""


class ProfileError(TensorsmithError):
    """An optimization profile given to the builder is malformed (names, ranks, min <= opt <= max)."""


class ShapeOutOfProfileError(InputError):
    """An input shape lies outside every optimization profile of the engine (or the selected one)."""

    def __init__(self, name: str, shape: tuple, ranges: str, fix: str):
        self.shape = tuple(shape)
        super().__init__(f"input '{name}' has shape {list(shape)}, outside {ranges}; {fix}", name)


class PrecisionError(TensorsmithError):
    """A precision the build cannot honor: an unknown name, half precision on the CPU target, or a
    per-Layer override (layer_precisions, `--layer-precision`) whose pattern matches no node."""


class RefitError(TensorsmithError):
    """New weights cannot replace the engine's (unknown or folded name, other shape or dtype)."""
