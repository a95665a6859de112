"""Frontends: ways to get a model into the IR."""

from .onnx_import import import_onnx, load_model_proto

__all__ = ["import_onnx", "load_model_proto"]
