"""triton.norm: normalizations, softmaxes and reductions with fused prologues and epilogues.

On a CPU the kernels run under TRITON_INTERPRET=1 at small shapes; the tests marked gpu run them
compiled on CUDA at model shapes.
"""

import os

import torch

if not torch.cuda.is_available():
    os.environ["TRITON_INTERPRET"] = "1"  # before triton is imported

import numpy as np  # noqa: E402
import pytest  # noqa: E402
from onnx import TensorProto, helper, numpy_helper  # noqa: E402

pytest.importorskip("triton")

from tensorsmith.testing.layers import check_tactic, layer_contexts  # noqa: E402
from tensorsmith.tactics.triton.norm import TRITON_NORM  # noqa: E402

DEVICE = "cuda" if torch.cuda.is_available() else "cpu"


def _model(nodes, inputs: dict, inits: dict | None = None, opset: int = 17, out: str = "out"):
    """A model computing `out` from float inputs; a Transpose after it keeps `out` inside the
    graph, so in fp16 builds the layer stores float16 (no output Cast fused into it)."""
    rng = np.random.default_rng(0)
    tensors = []
    for name, val in (inits or {}).items():
        arr = val if isinstance(val, np.ndarray) else rng.standard_normal(val).astype(np.float32)
        tensors.append(numpy_helper.from_array(arr, name))
    nodes = list(nodes) + [helper.make_node("Transpose", [out], ["final"])]
    g = helper.make_graph(
        nodes, "m", [helper.make_tensor_value_info(k, TensorProto.FLOAT, s) for k, s in inputs.items()],
        [helper.make_tensor_value_info("final", TensorProto.FLOAT, None)], initializer=tensors)
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", opset)])


def _layer(model, kind: str, precision: str = "fp32", device: str = DEVICE):
    lcs = [lc for lc in layer_contexts(model, device=device, precision=precision) if lc.layer.kind == kind]
    assert len(lcs) == 1, [lc.layer.kind for lc in layer_contexts(model, device=device, precision=precision)]
    return lcs[0]


def _check(model, kind, configs, precisions=("fp32", "fp16")):
    for precision in precisions:
        lc = _layer(model, kind, precision)
        assert TRITON_NORM.applies(lc), (precision, [n.op_type for n in lc.nodes])
        assert 1 <= len(TRITON_NORM.configs(lc)) <= 8
        for cfg in configs:
            assert check_tactic(TRITON_NORM, lc, cfg) <= 0, (precision, cfg)


ONE_PASS = {"BLOCK": 64, "ROWS": 2, "num_warps": 4}
LOOPED = {"BLOCK": 16, "ROWS": 4, "num_warps": 4}


# -- normalizations -----------------------------------------------------------------------


def _layernorm(d: int, rows=(3, 5), bias=True):
    shape = [*rows, d]
    nodes = [
        helper.make_node("Add", ["x", "res"], ["h"]),  # residual prologue
        helper.make_node("LayerNormalization", ["h", "g"] + (["b"] if bias else []), ["ln"], epsilon=1e-5),
        helper.make_node("Mul", ["ln", "s"], ["m"]),  # epilogue: per-column scale, gelu, residual
        helper.make_node("Gelu", ["m"], ["a"]),
        helper.make_node("Add", ["a", "res2"], ["out"]),
    ]
    inits = {"g": [d], "b": [d], "s": [d]} if bias else {"g": [d], "s": [d]}
    return _model(nodes, {"x": shape, "res": shape, "res2": shape}, inits, opset=20)


def test_layernorm_odd_row_with_prologue_and_epilogue():
    model = _layernorm(37)
    lc = _layer(model, "normalization")
    assert [n.op_type for n in lc.nodes] == ["Add", "LayerNormalization", "Mul", "Gelu", "Add"]
    _check(model, "normalization", [ONE_PASS, LOOPED])


def test_layernorm_768_plus_3_looped_and_single_pass():
    _check(_layernorm(771, rows=(3,), bias=False), "normalization",
           [{"BLOCK": 1024, "ROWS": 1, "num_warps": 4}, {"BLOCK": 256, "ROWS": 2, "num_warps": 4}])


def test_layernorm_over_two_axes_and_one_row():
    nodes = [helper.make_node("LayerNormalization", ["x", "g", "b"], ["n"], axis=-2),
             helper.make_node("Relu", ["n"], ["out"])]
    model = _model(nodes, {"x": [2, 3, 5]}, {"g": [3, 5], "b": [5]})
    _check(model, "normalization", [ONE_PASS, {"BLOCK": 8, "ROWS": 2, "num_warps": 2}], ("fp32",))
    one_row = _model(nodes, {"x": [1, 3, 5]}, {"g": [3, 5], "b": [5]})
    _check(one_row, "normalization", [{"BLOCK": 16, "ROWS": 4, "num_warps": 2}], ("fp32",))


def test_rmsnorm():
    nodes = [helper.make_node("Mul", ["x", "k"], ["h"]),  # prologue with a scalar weight
             helper.make_node("RMSNormalization", ["h", "g"], ["n"], epsilon=1e-6),
             helper.make_node("Mul", ["n", "x2"], ["out"])]
    model = _model(nodes, {"x": [4, 19], "x2": [4, 19]}, {"k": np.array(1.5, np.float32), "g": [19]}, opset=23)
    _check(model, "normalization", [ONE_PASS, {"BLOCK": 8, "ROWS": 1, "num_warps": 2}])


def test_groupnorm_per_channel_and_per_group_scale():
    nodes = [helper.make_node("GroupNormalization", ["x", "g", "b"], ["n"], num_groups=2),
             helper.make_node("Sigmoid", ["n"], ["sg"]),
             helper.make_node("Mul", ["n", "sg"], ["out"])]  # SiLU reads the anchor twice
    per_channel = _model(nodes, {"x": [2, 6, 3, 3]}, {"g": [6], "b": [6]}, opset=21)
    _check(per_channel, "normalization", [ONE_PASS, LOOPED])
    per_group = _model(nodes, {"x": [2, 6, 3, 3]}, {"g": [2], "b": [2]}, opset=18)
    _check(per_group, "normalization", [ONE_PASS], ("fp32",))


def test_groupnorm_rank2():
    model = _model([helper.make_node("GroupNormalization", ["x", "g", "b"], ["out"], num_groups=3)],
                   {"x": [4, 6]}, {"g": [6], "b": [6]}, opset=21)
    _check(model, "normalization", [{"BLOCK": 2, "ROWS": 2, "num_warps": 2}], ("fp32",))


def test_instancenorm_with_channel_bias_epilogue():
    nodes = [helper.make_node("InstanceNormalization", ["x", "g", "b"], ["n"]),
             helper.make_node("Add", ["n", "cb"], ["out"])]
    model = _model(nodes, {"x": [2, 3, 5, 3]}, {"g": [3], "b": [3], "cb": [3, 1, 1]})
    _check(model, "normalization", [ONE_PASS, LOOPED])


# -- softmax ---------------------------------------------------------------------------------


def test_softmax_last_axis_with_scale_prologue():
    nodes = [helper.make_node("Div", ["x", "t"], ["h"]),
             helper.make_node("Add", ["h", "mask"], ["h2"]),  # a broadcast attention mask
             helper.make_node("Softmax", ["h2"], ["out"], axis=-1)]
    model = _model(nodes, {"x": [2, 3, 37], "mask": [2, 1, 37]}, {"t": np.array(8.0, np.float32)}, opset=13)
    lc = _layer(model, "normalization")
    assert [n.op_type for n in lc.nodes] == ["Add", "Softmax"]  # the prologue is one node deep: Div is apart
    _check(model, "normalization", [ONE_PASS, LOOPED])


def test_softmax_with_bool_operand_in_epilogue_and_its_own_configs():
    nodes = [helper.make_node("Softmax", ["x"], ["s"]), helper.make_node("Where", ["c", "s", "z"], ["out"])]
    model = _model(nodes, {"x": [3, 10]}, {"z": [10]})
    model.graph.input.append(helper.make_tensor_value_info("c", TensorProto.BOOL, [3, 10]))
    _check(model, "normalization", [LOOPED])
    lc = _layer(model, "normalization")
    for cfg in TRITON_NORM.configs(lc):
        assert check_tactic(TRITON_NORM, lc, cfg) <= 0, cfg


def test_softmax_middle_axis_and_logsoftmax_legacy_axis():
    middle = _model([helper.make_node("Softmax", ["x"], ["out"], axis=1)], {"x": [2, 7, 5]}, opset=13)
    _check(middle, "normalization", [{"BLOCK": 8, "ROWS": 4, "num_warps": 4}, {"BLOCK": 4, "ROWS": 8, "num_warps": 4}])
    legacy = _model([helper.make_node("LogSoftmax", ["x"], ["out"], axis=1)], {"x": [2, 3, 5]}, opset=11)
    _check(legacy, "normalization", [ONE_PASS, LOOPED])


# -- reductions ------------------------------------------------------------------------------


def _const(name, values):
    return numpy_helper.from_array(np.array(values, np.int64), name)


def test_global_pools_with_epilogue():
    for op in ("GlobalAveragePool", "GlobalMaxPool"):
        nodes = [helper.make_node(op, ["x"], ["p"]), helper.make_node("Relu", ["p"], ["out"])]
        model = _model(nodes, {"x": [2, 3, 7, 7]})
        _check(model, "reduction", [{"BLOCK": 64, "ROWS": 4, "num_warps": 2}, {"BLOCK": 16, "ROWS": 8, "num_warps": 2}])


@pytest.mark.parametrize("op,axes,keepdims", [
    ("ReduceMean", [2, 3], 0),   # trailing axes, then a per-channel bias
    ("ReduceSum", [1], 1),       # a middle axis
    ("ReduceMax", [0, 2], 1),    # axes that are not adjacent
    ("ReduceL2", [-1], 1),
])
def test_reduce(op, axes, keepdims):
    nodes = [helper.make_node("Mul", ["x", "x2"], ["h"]),
             helper.make_node(op, ["h", "axes"], ["r"], keepdims=keepdims),
             helper.make_node("Add", ["r", "c"], ["out"])]
    shape = [2, 3, 5, 6]
    out_shape = [d if i not in axes else 1 for i, d in enumerate(shape)]
    if not keepdims:
        out_shape = [d for i, d in enumerate(shape) if i not in axes]
    model = _model(nodes, {"x": shape, "x2": shape}, {"c": out_shape[-1:]}, opset=18)
    model.graph.initializer.append(_const("axes", axes))
    _check(model, "reduction", [{"BLOCK": 32, "ROWS": 4, "num_warps": 4}, {"BLOCK": 4, "ROWS": 2, "num_warps": 2}])


def test_reduce_all_axes_legacy_attribute():
    model = _model([helper.make_node("ReduceSum", ["x"], ["out"], keepdims=0)], {"x": [3, 11]}, opset=11)
    _check(model, "reduction", [{"BLOCK": 64, "ROWS": 1, "num_warps": 2}, {"BLOCK": 8, "ROWS": 1, "num_warps": 2}])


# -- what the tactic declines ---------------------------------------------------------------


def _applies(model, kind, precision="fp32"):
    return TRITON_NORM.applies(_layer(model, kind, precision))


def test_declines_layernorm_statistics_outputs():
    nodes = [helper.make_node("LayerNormalization", ["x", "g", "b"], ["n", "mean"]),
             helper.make_node("Add", ["n", "mean"], ["out"])]
    assert not _applies(_model(nodes, {"x": [2, 8]}, {"g": [8], "b": [8]}), "normalization")


def test_declines_unsupported():
    noop = _model([helper.make_node("ReduceMean", ["x"], ["out"], noop_with_empty_axes=1)], {"x": [2, 8]}, opset=18)
    assert not _applies(noop, "reduction")
    prod = _model([helper.make_node("ReduceProd", ["x"], ["out"])], {"x": [2, 8]}, opset=18)
    assert not _applies(prod, "reduction")
    stash = _model([helper.make_node("LayerNormalization", ["x", "g"], ["out"], stash_type=11)],
                   {"x": [2, 8]}, {"g": [8]})
    assert not _applies(stash, "normalization")
    power = _model([helper.make_node("Softmax", ["x"], ["s"]), helper.make_node("Pow", ["s", "k"], ["out"])],
                   {"x": [2, 8]}, {"k": [2, 8]})
    assert not _applies(power, "normalization")  # codegen writes Pow for scalar exponents only
    bn = _model([helper.make_node("BatchNormalization", ["x", "g", "b", "mu", "var"], ["out"])],
                {"x": [2, 3, 4]}, {"g": [3], "b": [3], "mu": [3], "var": np.ones(3, np.float32)})
    assert not _applies(bn, "normalization")


def test_declines_without_gpu_or_interpreter(monkeypatch):
    model = _model([helper.make_node("Softmax", ["x"], ["out"])], {"x": [2, 8]})
    monkeypatch.setenv("TRITON_INTERPRET", "0")
    assert not TRITON_NORM.applies(_layer(model, "normalization", device="cpu"))


# -- on the GPU, at model shapes --------------------------------------------------------------


def _all_configs(model, kind, precision):
    lc = _layer(model, kind, precision, device="cuda")
    assert TRITON_NORM.applies(lc)
    for cfg in TRITON_NORM.configs(lc):
        assert check_tactic(TRITON_NORM, lc, cfg) <= 0, (precision, cfg)


@pytest.mark.gpu
@pytest.mark.parametrize("precision", ["fp32", "fp16"])
def test_gpu_transformer_layernorm_and_softmax(precision):
    _all_configs(_layernorm(768, rows=(8, 128)), "normalization", precision)
    _all_configs(_layernorm(4096 + 3, rows=(16,)), "normalization", precision)
    nodes = [helper.make_node("Add", ["x", "mask"], ["h"]), helper.make_node("Softmax", ["h"], ["out"], axis=-1)]
    _all_configs(_model(nodes, {"x": [8, 12, 128, 128], "mask": [8, 1, 1, 128]}, opset=13), "normalization", precision)
    big = _model([helper.make_node("Softmax", ["x"], ["out"], axis=1)], {"x": [4, 1000, 64]}, opset=13)
    _all_configs(big, "normalization", precision)


@pytest.mark.gpu
@pytest.mark.parametrize("precision", ["fp32", "fp16"])
def test_gpu_convnet_norms_and_pools(precision):
    gap = _model([helper.make_node("GlobalAveragePool", ["x"], ["out"])], {"x": [8, 2048, 7, 7]})
    _all_configs(gap, "reduction", precision)
    gn = _model([helper.make_node("GroupNormalization", ["x", "g", "b"], ["n"], num_groups=32),
                 helper.make_node("Sigmoid", ["n"], ["sg"]), helper.make_node("Mul", ["n", "sg"], ["out"])],
                {"x": [2, 128, 64, 64]}, {"g": [128], "b": [128]}, opset=21)
    _all_configs(gn, "normalization", precision)
    inorm = _model([helper.make_node("InstanceNormalization", ["x", "g", "b"], ["out"])],
                   {"x": [2, 64, 128, 128]}, {"g": [64], "b": [64]})
    _all_configs(inorm, "normalization", precision)
    rms = _model([helper.make_node("RMSNormalization", ["x", "g"], ["out"])], {"x": [4, 256, 4096]}, {"g": [4096]},
                 opset=23)
    _all_configs(rms, "normalization", precision)
