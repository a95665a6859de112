"""tensorsmith: an inference optimizer and runtime for NVIDIA GPUs (and the CPU)."""

from . import errors
from .builder import build
from .frontends import import_onnx
from .runtime import Engine

__version__ = "0.1.0"

__all__ = ["build", "import_onnx", "Engine", "errors", "__version__"]
