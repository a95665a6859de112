"""triton.flash_attention and torch.sdpa: Attention Layers, under the Triton interpreter on the CPU."""


# tests/conftest.py turns on TRITON_INTERPRET when there is no GPU (before any kernel is imported).

import math

import numpy as np
import pytest

pytest.importorskip("triton")

import torch
from onnx import TensorProto, helper, numpy_helper

from tensorsmith.tactics import REFERENCE, TACTICS
from tensorsmith.tactics.triton import attention, codegen  # noqa: F401
from tensorsmith.testing.layers import check_tactic, layer_contexts
from tensorsmith.tuner import max_violation, random_inputs

from ..conftest import assert_replay_matches_direct_call

FLASH = TACTICS["triton.flash_attention"]
SDPA = TACTICS["torch.sdpa"]
F, BOOL = TensorProto.FLOAT, TensorProto.BOOL
SMALL = {"BLOCK_M": 64, "BLOCK_N": 32, "num_warps": 4}


def _model(nodes, inputs, outputs, weights=None, opset=23):
    rng = np.random.default_rng(0)

    def array(w):  # a shape (random values) or the values (integers kept as int64)
        w = w if isinstance(w, np.ndarray) else rng.standard_normal(w)
        return w.astype(np.float32) if w.dtype.kind == "f" else w.astype(np.int64)

    inits = [numpy_helper.from_array(array(w), n) for n, w in (weights or {}).items()]
    g = helper.make_graph(
        nodes, "m",
        [helper.make_tensor_value_info(n, t, s) for n, (t, s) in inputs.items()],
        [helper.make_tensor_value_info(n, F, None) for n in outputs],
        initializer=inits)
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", opset)])


def _layer(model, precision="fp32", device="cpu"):
    lcs = [lc for lc in layer_contexts(model, device=device, precision=precision) if lc.layer.kind == "attention"]
    assert len(lcs) == 1, [lc.layer.name for lc in layer_contexts(model)]
    return lcs[0]


def pattern_model(b=2, h=2, s=20, d=16, mask=(2, 1, 1, 20), epilogue=None, bert_layout=False):
    """MatMul(Q, K^T) * scale (+ mask) -> Softmax -> MatMul(V) [-> epilogue], as exporters write it.

    With `bert_layout`, Q/K/V come in as [b, s, h, d] and are transposed to heads-first, and the
    mask comes in as [b, s] and is unsqueezed to [b, 1, 1, s], as in BERT: then the Attention
    reads values made by shuffle layers and has no prologue (not even the Casts of an fp16 build).
    """
    if bert_layout:
        nodes = [helper.make_node("Transpose", ["q_in"], ["q"], perm=[0, 2, 1, 3]),
                 helper.make_node("Transpose", ["k_in"], ["kt"], perm=[0, 2, 3, 1]),
                 helper.make_node("Transpose", ["v_in"], ["v"], perm=[0, 2, 1, 3])]
        inputs = {f"{n}_in": (F, [b, s, h, d]) for n in "qkv"}
    else:
        nodes = [helper.make_node("Transpose", ["k"], ["kt"], perm=[0, 1, 3, 2])]
        inputs = {n: (F, [b, h, s, d]) for n in "qkv"}
    nodes += [helper.make_node("MatMul", ["q", "kt"], ["qk"]),
              helper.make_node("Div", ["qk", "root_d"], ["sc"])]
    weights = {"root_d": np.array(math.sqrt(d))}
    if mask is not None and bert_layout:
        nodes.append(helper.make_node("Unsqueeze", ["mask_in", "axes"], ["mask"]))
        inputs["mask_in"] = (F, [b, s])
        weights["axes"] = np.array([1, 2])
    last = "sc"
    if mask is not None:
        nodes.append(helper.make_node("Add", ["sc", "mask"], ["scm"]))
        if not bert_layout:
            inputs["mask"] = (F, list(mask))
        last = "scm"
    nodes += [helper.make_node("Softmax", [last], ["p"], axis=-1), helper.make_node("MatMul", ["p", "v"], ["y"])]
    if epilogue == "bias":
        nodes.append(helper.make_node("Add", ["y", "bias"], ["out"]))
        weights["bias"] = (d,)
    elif epilogue == "residual":
        nodes.append(helper.make_node("Add", ["y", "r"], ["out"]))
        inputs["r"] = (F, [b, h, s, d])
    elif epilogue == "relu_scale":
        nodes += [helper.make_node("Relu", ["y"], ["y1"]), helper.make_node("Mul", ["y1", "two"], ["out"])]
        weights["two"] = np.array(2.0)
    elif epilogue:
        nodes.append(helper.make_node(epilogue, ["y"], ["out"]))
    elif bert_layout:  # back to [b, s, h, d]
        nodes.append(helper.make_node("Transpose", ["y"], ["out"], perm=[0, 2, 1, 3]))
        epilogue = "transpose"
    return _model(nodes, inputs, ["out" if epilogue else "y"], weights, opset=20)


def attention_model(q, k, v, mask=None, mask_type=F, outputs=1, extra_inputs=(), opset=23, **attrs):
    """One ONNX Attention node (opset 23+) with the given input shapes and attributes."""
    names = ["q", "k", "v"]
    inputs = {"q": (F, q), "k": (F, k), "v": (F, v)}
    if mask is not None:
        names.append("mask")
        inputs["mask"] = (mask_type, mask)
    for name, shape in extra_inputs:
        names += [""] * (["q", "k", "v", "mask", "past_key", "past_value", "nonpad"].index(name) - len(names)) + [name]
        inputs[name] = (TensorProto.INT64 if name == "nonpad" else F, shape)
    outs = ["y", "present_key", "present_value", "qk"][:outputs]
    node = helper.make_node("Attention", names, outs, **attrs)
    return _model([node], inputs, outs, opset=opset)


def _check(lc, tactic=FLASH, configs=(SMALL,)):
    assert tactic.applies(lc)
    for config in configs:
        assert check_tactic(tactic, lc, config) <= 0, config


# ----------------------------------------------------------------------------- flash, correct results

@pytest.mark.parametrize("precision", ["fp32", "fp16"])
@pytest.mark.parametrize("epilogue", [None, "Relu", "bias", "residual", "Gelu", "relu_scale"])
def test_pattern_with_padding_mask_and_epilogue(precision, epilogue):
    lc = _layer(pattern_model(epilogue=epilogue), precision)
    assert lc.anchor.op_type == "Attention"
    # (fp16 builds also fuse the Casts from/to the float32 graph inputs and outputs.)
    assert len([n for n in lc.nodes if n.op_type != "Cast"]) == 1 + {None: 0, "relu_scale": 2}.get(epilogue, 1)
    _check(lc)


def test_configs_pruned_and_all_correct():
    lc = _layer(pattern_model(b=1, s=40, d=8, mask=None))
    configs = FLASH.configs(lc)
    assert 1 <= len(configs) <= 8
    assert all(c["BLOCK_M"] == 64 for c in configs)  # 40 queries: a 128-row tile is waste
    _check(lc, configs=configs[:2] + [{"BLOCK_M": 128, "BLOCK_N": 64, "num_warps": 8}])


def test_config_space_at_bert_shapes():
    lc = _layer(pattern_model(b=16, h=12, s=128, d=64, mask=(16, 1, 1, 128)), "fp16")
    configs = FLASH.configs(lc)
    assert len(configs) == 8
    assert {(c["BLOCK_M"], c["BLOCK_N"], c["num_warps"]) for c in configs} == {
        (m, n, w) for m in (64, 128) for n in (32, 64) for w in (4, 8)}
    big = _layer(attention_model([1, 2, 40, 256], [1, 2, 40, 256], [1, 2, 40, 256]))
    assert 1 <= len(FLASH.configs(big)) < 8


@pytest.mark.parametrize("precision", ["fp32", "fp16"])
def test_causal_longer_keys_and_head_dim_not_pow2(precision):
    # 24 queries over 40 keys, top-left aligned as ONNX does without past; head 48, value head 24.
    lc = _layer(attention_model([1, 2, 24, 48], [1, 2, 40, 48], [1, 2, 40, 24], is_causal=1), precision)
    _check(lc, configs=[SMALL, {"BLOCK_M": 64, "BLOCK_N": 64, "num_warps": 4}])


def test_grouped_query_attention_with_full_mask():
    lc = _layer(attention_model([2, 4, 17, 16], [2, 2, 33, 16], [2, 2, 33, 16], mask=[2, 4, 17, 33], scale=0.3))
    _check(lc)


def test_3d_inputs_with_heads_and_2d_mask():
    lc = _layer(attention_model([2, 18, 2 * 32], [2, 30, 2 * 32], [2, 30, 2 * 32], mask=[18, 30],
                                q_num_heads=2, kv_num_heads=2))
    _check(lc)


def test_3d_single_head_pattern():
    nodes = [helper.make_node("Transpose", ["k"], ["kt"], perm=[0, 2, 1]),
             helper.make_node("MatMul", ["q", "kt"], ["qk"]),
             helper.make_node("Mul", ["qk", "s"], ["sc"]),
             helper.make_node("Softmax", ["sc"], ["p"], axis=-1), helper.make_node("MatMul", ["p", "v"], ["y"])]
    model = _model(nodes, {n: (F, [2, 21, 24]) for n in "qkv"}, ["y"], {"s": np.array(0.2)}, opset=18)
    lc = _layer(model, "fp16")
    assert lc.anchor.attrs.get("q_num_heads") == 1
    _check(lc)


def test_bool_mask_and_fully_masked_rows_give_zeros():
    lc = _layer(attention_model([1, 2, 19, 8], [1, 2, 23, 8], [1, 2, 23, 8], mask=[1, 1, 19, 23], mask_type=BOOL))
    assert FLASH.applies(lc) and not SDPA.applies(lc)
    q, k, v, mask = random_inputs(lc)
    mask[..., 3, :] = False  # row 3 sees no key
    inputs = [q, k, v, mask]
    want = REFERENCE.compile(lc, {})(inputs)
    got = FLASH.compile(lc, SMALL)(inputs)
    assert torch.all(got[0][:, :, 3] == 0)
    assert max_violation(got, want, 1e-3, 1e-4) <= 0


def test_float_mask_with_inf_rows():
    lc = _layer(attention_model([1, 2, 19, 8], [1, 2, 23, 8], [1, 2, 23, 8], mask=[1, 2, 19, 23]))
    q, k, v, mask = random_inputs(lc)
    mask[0, 1, 5, :] = -math.inf
    mask[0, 0, :, 7:] = -math.inf
    want = REFERENCE.compile(lc, {})(inputs := [q, k, v, mask])
    got = FLASH.compile(lc, SMALL)(inputs)
    assert max_violation(got, want, 1e-3, 1e-4) <= 0


def test_mask_and_query_prologues():
    # The mask is computed from a 0/1 padding flag (Mul by a large negative number) and Q is
    # scaled by an elementwise Mul: both nodes are fused in front of the Attention.
    nodes = [helper.make_node("Mul", ["flag", "neg"], ["mask"]),
             helper.make_node("Add", ["x", "qb"], ["q"]),
             helper.make_node("Attention", ["q", "k", "v", "mask"], ["y"])]
    model = _model(nodes, {"x": (F, [2, 2, 20, 16]), "k": (F, [2, 2, 20, 16]), "v": (F, [2, 2, 20, 16]),
                           "flag": (F, [2, 1, 1, 20])}, ["y"], {"neg": np.array(-3.0), "qb": (16,)})
    lc = _layer(model)
    assert [n.op_type for n in lc.nodes] == ["Mul", "Add", "Attention"]
    _check(lc)
    assert not SDPA.applies(lc)


# ----------------------------------------------------------------------------- declined layers

@pytest.mark.parametrize("case", [
    {"extra_inputs": [("past_key", [1, 2, 4, 8]), ("past_value", [1, 2, 4, 8])]},
    {"softcap": 30.0},
    {"qk_matmul_output_mode": 1, "outputs": 4},
    {"outputs": 2},
    {"softmax_precision": 1},
    {"mask": [1, 2, 16, 10]},  # shorter than the 20 keys: ONNX pads it with -inf
    {"mask": [1, 2, 16, 1]},
    {"extra_inputs": [("nonpad", [1])], "opset": 24},
])
def test_declines(case):
    case = dict(case)
    model = attention_model([1, 2, 16, 8], [1, 2, 20, 8], [1, 2, 20, 8], **case)
    lc = _layer(model)
    assert not FLASH.applies(lc)
    assert not SDPA.applies(lc)


def test_declines_other_layers_devices_and_epilogues(monkeypatch):
    matmul = _model([helper.make_node("MatMul", ["a", "b"], ["y"])], {"a": (F, [4, 8]), "b": (F, [8, 4])}, ["y"])
    lc = layer_contexts(matmul)[0]
    assert not FLASH.applies(lc) and not SDPA.applies(lc)
    # An epilogue op codegen cannot write (integer-style Mod) and an epilogue that sdpa cannot fuse.
    nodes = [helper.make_node("Attention", ["q", "k", "v"], ["y"]), helper.make_node("Asin", ["y"], ["z"])]
    lc = _layer(_model(nodes, {n: (F, [1, 2, 16, 8]) for n in "qkv"}, ["z"]))
    assert not SDPA.applies(lc)
    assert FLASH.applies(lc) == codegen.can_emit(lc.nodes[-1])
    # Causal together with a mask: the kernel takes it, torch rejects attn_mask with is_causal.
    lc = _layer(attention_model([1, 2, 16, 8], [1, 2, 16, 8], [1, 2, 16, 8], mask=[16, 16], is_causal=1))
    assert not SDPA.applies(lc)
    _check(lc)
    monkeypatch.delenv("TRITON_INTERPRET")
    assert not FLASH.applies(lc)  # a CPU layer runs only under the interpreter


# ----------------------------------------------------------------------------- torch.sdpa on the CPU

@pytest.mark.parametrize("precision", ["fp32", "fp16"])
def test_sdpa_pattern_with_padding_mask(precision):
    lc = _layer(pattern_model(bert_layout=True), precision)
    assert [n.op_type for n in lc.nodes] == ["Attention"]
    _check(lc, SDPA, [{}])
    _check(lc)


@pytest.mark.parametrize("model", [
    attention_model([1, 2, 24, 48], [1, 2, 40, 48], [1, 2, 40, 24], is_causal=1),
    attention_model([2, 4, 17, 16], [2, 2, 33, 16], [2, 2, 33, 16], mask=[2, 4, 17, 33], scale=0.3),
    attention_model([2, 18, 64], [2, 30, 64], [2, 30, 64], mask=[18, 30], q_num_heads=2, kv_num_heads=2),
    attention_model([2, 18, 64], [2, 30, 32], [2, 30, 32], q_num_heads=4, kv_num_heads=2),
], ids=["causal", "gqa_mask", "3d", "3d_gqa"])
def test_sdpa_attention_ops(model):
    _check(_layer(model), SDPA, [{}])


def test_flash_3d_gqa():
    _check(_layer(attention_model([2, 18, 64], [2, 30, 32], [2, 30, 32], q_num_heads=4, kv_num_heads=2)))


# ----------------------------------------------------------------------------- GPU

def _gpu_all(model, precision, tactics=(FLASH, SDPA)):
    lc = _layer(model, precision, device="cuda")
    assert FLASH.applies(lc)
    for tactic in tactics:
        if not tactic.applies(lc):
            assert tactic is SDPA  # it declines layers with a prologue (the Casts of an fp16 build)
            continue
        for config in tactic.configs(lc):
            assert check_tactic(tactic, lc, config) <= 0, (tactic.name, config)


@pytest.mark.gpu
@pytest.mark.parametrize("precision", ["fp16", "fp32"])
def test_gpu_bert_shapes(precision):
    _gpu_all(pattern_model(b=16, h=12, s=128, d=64, mask=(16, 1, 1, 128), bert_layout=True), precision)


@pytest.mark.gpu
@pytest.mark.parametrize("precision", ["fp16", "fp32"])
def test_gpu_vit_shapes(precision):
    _gpu_all(pattern_model(b=32, h=12, s=197, d=64, mask=None), precision)


@pytest.mark.gpu
def test_gpu_bert_with_residual_epilogue_and_bf16():
    _gpu_all(pattern_model(b=16, h=12, s=128, d=64, mask=(16, 1, 1, 128), epilogue="residual"), "fp16", (FLASH,))
    _gpu_all(pattern_model(b=16, h=12, s=128, d=64, mask=(16, 1, 1, 128), bert_layout=True), "bf16")


@pytest.mark.gpu
@pytest.mark.parametrize("precision", ["fp16", "fp32"])
def test_gpu_causal_gqa_and_3d(precision):
    _gpu_all(attention_model([4, 16, 300, 128], [4, 4, 300, 128], [4, 4, 300, 128], is_causal=1), precision)
    _gpu_all(attention_model([8, 100, 8 * 80], [8, 100, 8 * 80], [8, 100, 8 * 80], mask=[8, 1, 100, 100],
                             q_num_heads=8, kv_num_heads=8), precision)


@pytest.mark.gpu
def test_gpu_runner_survives_cuda_graph_capture():
    lc = _layer(pattern_model(b=16, h=12, s=128, d=64, mask=(16, 1, 1, 128), bert_layout=True), "fp16", device="cuda")
    inputs = random_inputs(lc)
    for tactic in (FLASH, SDPA):
        runner = tactic.compile(lc, tactic.configs(lc)[0])
        assert_replay_matches_direct_call(runner, inputs)


@pytest.mark.gpu
def test_gpu_rows_hidden_by_the_mask_give_zeros():
    lc = _layer(attention_model([4, 8, 128, 64], [4, 8, 128, 64], [4, 8, 128, 64], mask=[4, 1, 128, 128]),
                "fp16", device="cuda")
    q, k, v, mask = random_inputs(lc)
    mask[1, 0, 7, :] = -math.inf
    mask[2, 0, :, 100:] = -math.inf
    inputs = [q, k, v, mask]
    want = REFERENCE.compile(lc, {})(inputs)
    assert not SDPA.applies(lc)  # torch's CUDA attention does not zero hidden rows
    for tactic in (FLASH,):
        got = tactic.compile(lc, tactic.configs(lc)[0])(inputs)
        assert torch.all(got[0][1, :, 7] == 0), tactic.name
        assert max_violation(got, want, 2e-2, 2e-2) <= 0, tactic.name
