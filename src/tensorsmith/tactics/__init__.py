"""Tactics: ways to run a Layer (reference, PyTorch/cuDNN/cuBLAS calls, generated Triton kernels).

Importing this package registers every tactic. The Triton families need the triton package;
on a machine without it only the reference and PyTorch tactics exist.
"""

import importlib

from .base import TACTICS, LayerContext, Runner, Tactic, get_tactic, register_tactic
from .reference import REFERENCE  # registered first: the fallback every other tactic is checked against
from . import torch_ops  # noqa: E402,F401,I001  (registers the cuDNN/cuBLAS tactics)
from . import views  # noqa: E402,F401,I001  (constant-index Gather as a view)

# elementwise chains, norms/softmax/reductions, flash attention (+ torch.sdpa), GEMM, conv, pooling
for _family in ("elementwise", "norm", "attention", "conv", "gemm", "pool"):
    try:
        importlib.import_module(f".triton.{_family}", __name__)
    except ImportError:
        pass

from . import float32  # noqa: E402,F401,I001  (half Layers timed in float32 too; registered last)

__all__ = ["LayerContext", "REFERENCE", "Runner", "TACTICS", "Tactic", "get_tactic", "register_tactic"]
