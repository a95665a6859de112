"""Tactics: ways to run a Layer (reference, PyTorch/cuDNN/cuBLAS calls, generated Triton kernels)."""

from .base import TACTICS, LayerContext, Runner, Tactic, get_tactic, register_tactic
from .reference import REFERENCE
from . import torch_ops  # noqa: E402,F401  (registers the cuDNN/cuBLAS tactics)

__all__ = ["TACTICS", "LayerContext", "REFERENCE", "Runner", "Tactic", "get_tactic", "register_tactic"]
