"""Graph optimization passes, registered with the pass manager (importing registers them).

Registration order is pipeline order: cleanups, folding, recognition, then Layer grouping.
"""

from .manager import (
    DEFAULT_OPT_LEVEL,
    MAX_OPT_LEVEL,
    PASSES,
    PassInfo,
    PassRun,
    check_pass_options,
    describe_passes,
    enabled_passes,
    register_pass,
    run_passes,
)

from . import cleanup, constant_folding, shuffle, fold_linear, recognize, attention, layers  # noqa: E402,F401
from .layers import group_layers  # noqa: E402

__all__ = [
    "DEFAULT_OPT_LEVEL", "MAX_OPT_LEVEL", "PASSES", "PassInfo", "PassRun", "check_pass_options",
    "describe_passes", "enabled_passes", "group_layers", "register_pass", "run_passes",
]
