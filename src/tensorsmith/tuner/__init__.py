"""The tuner: timing, correctness checks, tactic choice and the timing cache."""

from .cache import TimingCache, layer_signature
from .check import TOLERANCES, max_violation, outputs_match, random_inputs
from .select import Choice, Trial, choose_tactic
from .timing import time_runner

__all__ = [
    "Choice", "TOLERANCES", "TimingCache", "Trial", "choose_tactic", "layer_signature", "max_violation",
    "outputs_match", "random_inputs", "time_runner",
]
