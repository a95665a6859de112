"""tensorsmith: an inference optimizer and runtime for NVIDIA GPUs (and the CPU)."""

from . import errors
from .api import compile
from .builder import build
from .engine.profile import OptimizationProfile
from .frontends import import_onnx
from .frontends.network import Network
from .runtime import DeviceMemory, Engine, ExecutionContext, Refitter, Runtime, load

__version__ = "0.1.0"

__all__ = [
    "DeviceMemory", "Engine", "ExecutionContext", "Network", "OptimizationProfile", "Refitter", "Runtime",
    "build", "compile", "errors", "import_onnx", "load", "__version__",
]
