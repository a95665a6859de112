"""Tactics: ways to run a Layer (reference, PyTorch/cuDNN/cuBLAS calls, generated Triton kernels)."""

from .base import TACTICS, LayerContext, Runner, Tactic, get_tactic, register_tactic
from .reference import REFERENCE
from . import torch_ops  # noqa: E402,F401  (registers the cuDNN/cuBLAS tactics)
try:
    from .triton import elementwise  # noqa: F401  (registers triton.elementwise)
except ImportError:
    pass

try:
    from .triton import norm  # noqa: F401  (registers triton.norm)
except ImportError:
    pass

try:
    from .triton import attention  # noqa: F401  (registers triton.flash_attention, torch.sdpa)
except ImportError:
    pass

try:
    from .triton import conv, gemm  # noqa: F401  (registers triton.gemm, triton.conv)
except ImportError:
    pass

__all__ = ["TACTICS", "LayerContext", "REFERENCE", "Runner", "Tactic", "get_tactic", "register_tactic"]
