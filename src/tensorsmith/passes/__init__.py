"""Graph optimization passes, registered with the pass manager (importing registers them).

PIPELINE gives their order: cleanups, folding, recognition, then Layer grouping. A pass
registered elsewhere (a plugin) runs after these, before the final ones.
"""

from . import (  # noqa: E402,F401
    attention,
    cleanup,
    constant_folding,
    fold_linear,
    horizontal,
    layers,
    recognize,
    shuffle,
    shuffle_chains,
)
from .layers import group_layers  # noqa: E402
from .manager import (
    DEFAULT_OPT_LEVEL,
    MAX_OPT_LEVEL,
    PASSES,
    PIPELINE,
    PassInfo,
    PassRun,
    check_pass_options,
    describe_passes,
    enabled_passes,
    register_pass,
    run_passes,
)

PIPELINE[:] = [
    "dead_code_elimination", "identity_elimination", "common_subexpression_elimination",
    "constant_folding", "shape_folding", "shape_inference",
    "transpose_cancellation", "transpose_into_gemm", "concat_slice_elimination",
    "gemm_to_matmul", "rowwise_shuffle_sinking", "shuffle_chain_simplification",
    "batchnorm_folding", "scale_shift_folding", "residual_bias_merging",
    "gelu_recognition", "silu_recognition", "softmax_recognition", "layernorm_recognition",
    "rmsnorm_recognition", "attention_recognition", "attention_scale_folding", "matmul_horizontal_fusion",
    "layer_fusion",
]

__all__ = [
    "DEFAULT_OPT_LEVEL", "MAX_OPT_LEVEL", "PASSES", "PIPELINE", "PassInfo", "PassRun", "check_pass_options",
    "describe_passes", "enabled_passes", "group_layers", "register_pass", "run_passes",
]
