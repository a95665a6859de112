"""Running engines: Engine, ExecutionContext, Runtime (load), Refitter."""

from .context import DeviceMemory, ExecutionContext
from .engine import Engine
from .refit import Refitter
from .runtime import Runtime, load

__all__ = ["DeviceMemory", "Engine", "ExecutionContext", "Refitter", "Runtime", "load"]
