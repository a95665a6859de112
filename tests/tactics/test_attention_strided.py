"""Attention tactics on strided Q/K/V/mask (the views that head split/merge Transposes make), and
the flash kernel's [batch, seq, heads, size] output memory; under the Triton interpreter on the CPU."""

# tests/conftest.py turns on TRITON_INTERPRET when there is no GPU (before any kernel is imported).

import numpy as np
import pytest

pytest.importorskip("triton")

import torch

import tensorsmith
from tensorsmith.builder import plan_layers
from tensorsmith.engine import Plan
from tensorsmith.runtime import Engine
from tensorsmith.tactics import REFERENCE
from tensorsmith.tactics.triton import attention
from tensorsmith.tuner import max_violation
from tensorsmith.tuner.check import TOLERANCES

from ..conftest import assert_replay_matches_direct_call, ort_run
from .test_triton_attention import (
    BOOL,
    FLASH,
    SDPA,
    SMALL,
    _layer,
    attention_model,
    pattern_model,
)

B, H, D = 2, 2, 16


def _laid_out(shape, layout, dtype=torch.float32, device="cpu"):
    """A random tensor of logical `shape` [B, H, S, X] stored in `layout`."""
    b, h, s, x = shape
    make = lambda *dims: torch.randn(*dims).to(device=device, dtype=dtype)
    if layout == "contiguous":
        return make(b, h, s, x)
    if layout == "bshd":  # the head split of [B, S, H*X]: Reshape + Transpose(0, 2, 1, 3)
        return make(b, s, h, x).permute(0, 2, 1, 3)
    if layout == "sxbh":  # some other permutation: no axis is innermost where the kernel expects it
        return make(s, x, b, h).permute(2, 3, 0, 1)
    if layout == "every_other_row":
        return make(b, h, 2 * s, x)[:, :, ::2]
    if layout == "feature_stride_2":
        return make(b, h, s, x, 2)[..., 0]
    raise ValueError(layout)


def _fused(b, s, heads, d, dtype=torch.float32, device="cpu"):
    """Slices of one fused projection [B, S, sum(heads)*D], each split into [B, h, S, D] views."""
    qkv = torch.randn(b, s, sum(heads) * d).to(device=device, dtype=dtype)
    out, start = [], 0
    for h in heads:
        out.append(qkv[..., start:start + h * d].reshape(b, s, h, d).transpose(1, 2))
        start += h * d
    return out


def _check_strided(lc, tensors, tactic=FLASH, config=SMALL):
    """The tactic's result on `tensors` (by input name) as given against the reference's on
    contiguous copies."""
    assert tactic.applies(lc)
    inputs = [tensors[v.name] for v in lc.inputs]
    assert [t.dtype for t in inputs] == [v.type.dtype.torch for v in lc.inputs]
    assert not all(t.is_contiguous() for t in inputs)
    with torch.no_grad():
        want = REFERENCE.compile(lc, {})([t.contiguous() for t in inputs])
        got = tactic.build(lc, config)(inputs)
    rtol, atol = TOLERANCES[lc.dtype]
    assert max_violation(got, want, rtol, atol) <= 0
    return got


def _dtype(lc, name):
    """The dtype of the layer's input `name` (float32 for Q/K/V of an fp16 build: its Casts are fused in)."""
    return next(v.type.dtype.torch for v in lc.inputs if v.name == name)


def test_tactics_accept_strided_inputs():
    assert FLASH.accepts_strided and SDPA.accepts_strided


# ----------------------------------------------------------------------------- flash, 4-D

@pytest.mark.parametrize("precision", ["fp32", "fp16"])
@pytest.mark.parametrize("layout", ["bshd", "sxbh", "every_other_row", "feature_stride_2"])
def test_flash_strided_qkv_and_bshd_output(precision, layout):
    s = 37  # not a power of two: the tiles' row bounds matter
    lc = _layer(attention_model([B, H, s, D], [B, H, s, D], [B, H, s, D]), precision)
    qkv = {n: _laid_out((B, H, s, D), layout, _dtype(lc, n)) for n in "qkv"}
    (out,) = _check_strided(lc, qkv)
    assert out.shape == (B, H, s, D)
    assert out.transpose(1, 2).is_contiguous()  # [B, S, H, D] memory: merging the heads is a view
    merged = out.transpose(1, 2).reshape(B, s, H * D)
    assert merged.data_ptr() == out.data_ptr() and merged.is_contiguous()


@pytest.mark.parametrize("mask", [None, "float", "bool"])
@pytest.mark.parametrize("heads", [(H, H, H), (4, 2, 2)], ids=["mha", "gqa"])
def test_flash_fused_qkv_slices(mask, heads):
    s = 29
    hq, hk, _ = heads
    masks = {None: {}, "float": {"mask": [B, 1, s, s]}, "bool": {"mask": [B, 1, s, s], "mask_type": BOOL}}
    lc = _layer(attention_model([B, hq, s, D], [B, hk, s, D], [B, hk, s, D], **masks[mask]))
    inputs = dict(zip("qkv", _fused(B, s, heads, D)))
    if mask == "float":
        inputs["mask"] = torch.randn(B, s, s).transpose(1, 2)[:, None]  # keys not innermost
    elif mask == "bool":
        inputs["mask"] = (torch.rand(s, B, s) > 0.3).permute(1, 0, 2)[:, None]
    (out,) = _check_strided(lc, inputs)
    assert out.transpose(1, 2).is_contiguous()


@pytest.mark.parametrize("mask", ["size1_dims_with_strides", "expanded", "2d_transposed"])
def test_flash_strided_masks_broadcast(mask):
    # Cross attention (20 queries, 33 keys) with the mask in layouts torch views make. A size-1
    # dim broadcasts (stride 0 in the kernel) whatever stride the view gives it; an expanded dim
    # has stride 0 from torch itself.
    s, n = 20, 33
    shapes = {"size1_dims_with_strides": [B, 1, 1, n], "expanded": [B, H, s, n], "2d_transposed": [s, n]}
    lc = _layer(attention_model([B, H, s, D], [B, H, n, D], [B, H, n, D], mask=shapes[mask]))
    q = _laid_out((B, H, s, D), "bshd")
    k, v = (_laid_out((B, H, n, D), "bshd") for _ in "kv")
    m = {"size1_dims_with_strides": lambda: torch.randn(B, 3, 5, n)[:, 1:2, 2:3, :],
         "expanded": lambda: torch.randn(B, 1, s, n).expand(B, H, s, n),
         "2d_transposed": lambda: torch.randn(n, s).t()}[mask]()
    assert list(m.shape) == shapes[mask] and not m.is_contiguous()
    _check_strided(lc, {"q": q, "k": k, "v": v, "mask": m})


def test_flash_causal_strided_with_longer_keys():
    lc = _layer(attention_model([B, H, 24, D], [B, H, 40, D], [B, H, 40, 24], is_causal=1))
    q = _laid_out((B, H, 24, D), "bshd")
    k = _laid_out((B, H, 40, D), "sxbh")
    v = _laid_out((B, H, 40, 24), "every_other_row")
    (out,) = _check_strided(lc, {"q": q, "k": k, "v": v}, config={"BLOCK_M": 64, "BLOCK_N": 64, "num_warps": 4})
    assert out.transpose(1, 2).is_contiguous()


@pytest.mark.parametrize("precision", ["fp32", "fp16"])
def test_flash_strided_epilogue_operand_and_prologue_casts(precision):
    # An Add of a residual [B, H, S, D] fused after the attention reads it through its strides too
    # (and the fp16 build's Casts are fused in front of Q, K, V and the mask).
    lc = _layer(pattern_model(b=B, h=H, s=20, d=D, mask=(B, 1, 1, 20), epilogue="residual"), precision)
    assert len(lc.inputs) == 5 and "Add" in [n.op_type for n in lc.nodes]
    inputs = {v.name: _laid_out((B, H, 20, D), "bshd", v.type.dtype.torch) for v in lc.inputs if v.name != "mask"}
    inputs["mask"] = torch.randn(B, 4, 3, 20)[:, 1:2, 2:3]
    (out,) = _check_strided(lc, inputs)
    assert out.transpose(1, 2).is_contiguous()


def test_flash_launch_reads_the_views_without_copies(monkeypatch):
    """The kernel gets each input view itself, followed by its strides in the tile's index space."""
    launches = []

    def spy_load(source, name):
        kernel = real_load(source, name)

        class Spy:
            def __getitem__(self, grid):
                launch = kernel[grid]

                def call(*args, **kwargs):
                    launches.append(args)
                    return launch(*args, **kwargs)

                return call

        return Spy()

    real_load = attention.load_kernel
    monkeypatch.setattr(attention, "load_kernel", spy_load)
    s = 20
    lc = _layer(attention_model([B, H, s, D], [B, H, s, D], [B, H, s, D], mask=[B, 1, 1, s]))
    q, k, v = _fused(B, s, (H, H, H), D)
    mask = torch.randn(B, 3, 2, s)[:, 1:2, :1]  # size-1 dims with non-zero strides
    out = _check_strided(lc, {"q": q, "k": k, "v": v, "mask": mask})[0]
    (args,) = launches
    hd3 = 3 * H * D
    # (batch, head, seq, feature) strides of the QKV slices: head stride D, seq stride 3*H*D.
    for t in (q, k, v):
        i = next(i for i, a in enumerate(args) if a is t)
        assert list(args[i + 1:i + 5]) == [s * hd3, D, hd3, 1]
    i = next(i for i, a in enumerate(args) if a is mask)
    assert list(args[i + 1:i + 5]) == [mask.stride(0), 0, 0, 1]  # broadcast over heads and queries
    i = next(i for i, a in enumerate(args) if a is out)  # the output view itself
    assert list(args[i + 1:i + 5]) == [s * H * D, D, H * D, 1]


def test_a_view_spanning_more_than_int32_offsets_is_copied():
    # The kernel indexes in 32 bits: a view into a buffer past 2**31 elements is handed over copied.
    big = torch.empty(2, 2**31, device="meta")[:, :4]
    assert not attention._fits_int32(big) and attention._fits_int32(big.contiguous())
    slot = attention._Slot(None, "q", ((0, 1), (0, 0), (1, 1), (1, 0)), ("input", 0))
    t, *strides = attention._slot_args(slot)([big])
    assert t.is_contiguous() and strides == [4, 0, 1, 0]


# ----------------------------------------------------------------------------- flash, 3-D

@pytest.mark.parametrize("heads", [(2, 2, 2), (4, 2, 2)], ids=["mha", "gqa"])
def test_flash_3d_fused_slices_and_transposed_mask(heads):
    # [B, S, heads*D] inputs (heads folded into the hidden axis) sliced from one fused projection.
    s = 27
    hq, hk, _ = heads
    lc = _layer(attention_model([B, s, hq * D], [B, s, hk * D], [B, s, hk * D], mask=[s, s],
                                q_num_heads=hq, kv_num_heads=hk))
    qkv = torch.randn(B, s, (hq + 2 * hk) * D)
    q, k, v = qkv.split([hq * D, hk * D, hk * D], dim=-1)
    mask = torch.randn(s, s).t()
    (out,) = _check_strided(lc, {"q": q, "k": k, "v": v, "mask": mask})
    assert out.shape == (B, s, hq * D) and out.is_contiguous()


def test_flash_3d_sequence_major_inputs():
    s, n = 19, 31
    lc = _layer(attention_model([B, s, H * D], [B, n, H * D], [B, n, H * 8], q_num_heads=H, kv_num_heads=H), "fp16")
    q = torch.randn(s, B, H * D).to(_dtype(lc, "q")).transpose(0, 1)
    k = torch.randn(n, B, H * D).to(_dtype(lc, "k")).transpose(0, 1)
    v = torch.randn(B, n, H * 8, 2).to(_dtype(lc, "v"))[..., 1]
    _check_strided(lc, {"q": q, "k": k, "v": v})


# ----------------------------------------------------------------------------- torch.sdpa

@pytest.mark.parametrize("mask", [False, True])
def test_sdpa_strided_4d(mask):
    s = 21
    lc = _layer(attention_model([B, H, s, D], [B, H, s, D], [B, H, s, D], **({"mask": [B, 1, s, s]} if mask else {})))
    inputs = dict(zip("qkv", _fused(B, s, (H, H, H), D)))
    if mask:
        inputs["mask"] = torch.randn(B, s, s).transpose(1, 2)[:, None]
    _check_strided(lc, inputs, SDPA, {})


def test_sdpa_strided_3d():
    # reshape, not view, splits the heads: the inputs may be views of any layout.
    s = 18
    lc = _layer(attention_model([B, s, 4 * D], [B, s, 2 * D], [B, s, 2 * D], q_num_heads=4, kv_num_heads=2))
    q, k, v = torch.randn(B, s, 8 * D).split([4 * D, 2 * D, 2 * D], dim=-1)
    _check_strided(lc, {"q": q, "k": k, "v": v}, SDPA, {})
    _check_strided(lc, {"q": torch.randn(s, B, 4 * D).transpose(0, 1), "k": k.contiguous(), "v": v}, SDPA, {})


# ----------------------------------------------------------------------------- in a plan

def test_bert_layout_plan_hands_views_to_the_kernel():
    # Q/K/V come in [B, S, H, D] and Transposes (shuffle layers, views) make them heads-first;
    # the kernel reads the views and its output goes back through a Transpose.
    model = pattern_model(b=B, h=H, s=20, d=D, bert_layout=True)
    base = tensorsmith.build(model, target="cpu")
    graph = base.plan.graph
    plan = Plan(graph, "cpu", base.plan.inputs, base.plan.outputs, precision="fp32")
    plan.layers, runners = plan_layers(graph, torch.device("cpu"), "fp32", None, None, False,
                                       {"triton.flash_attention"})
    assert "triton.flash_attention" in [lp.tactic for lp in plan.layers]
    engine = Engine(plan, runners=runners)
    rng = np.random.default_rng(1)
    feeds = {f"{n}_in": rng.standard_normal((B, 20, H, D)).astype(np.float32) for n in "qkv"}
    feeds["mask_in"] = rng.standard_normal((B, 20)).astype(np.float32)
    (want,) = ort_run(model, feeds)
    got = engine.run(feeds)["out"]
    np.testing.assert_allclose(got, want, rtol=1e-3, atol=1e-4)


# ----------------------------------------------------------------------------- GPU

@pytest.mark.gpu
@pytest.mark.parametrize("precision", ["fp16", "fp32"])
def test_gpu_bert_fused_qkv_views(precision):
    b, h, s, d = 16, 12, 128, 64
    lc = _layer(attention_model([b, h, s, d], [b, h, s, d], [b, h, s, d], mask=[b, 1, 1, s]), precision, device="cuda")
    inputs = dict(zip("qkv", _fused(b, s, (h, h, h), d, _dtype(lc, "q"), "cuda")))
    inputs["mask"] = torch.randn(b, 2, 1, s, device="cuda").to(_dtype(lc, "mask"))[:, :1]
    for tactic in (FLASH, SDPA):
        if not tactic.applies(lc):
            assert tactic is SDPA  # masked layers (and fp16 Cast prologues) go to the kernel on CUDA
            continue
        for config in tactic.configs(lc):
            (out,) = _check_strided(lc, inputs, tactic, config)
            if tactic is FLASH:
                assert out.transpose(1, 2).is_contiguous()


@pytest.mark.gpu
@pytest.mark.parametrize("precision", ["fp16", "fp32"])
def test_gpu_strided_layouts_and_3d(precision):
    b, h, s, d = 8, 8, 200, 64
    lc = _layer(attention_model([b, h, s, d], [b, h, s, d], [b, h, s, d], is_causal=1), precision, device="cuda")
    for layout in ("bshd", "sxbh", "feature_stride_2"):
        inputs = {n: _laid_out((b, h, s, d), layout, _dtype(lc, n), "cuda") for n in "qkv"}
        for tactic in (FLASH, SDPA):
            if tactic.applies(lc):
                _check_strided(lc, inputs, tactic, tactic.configs(lc)[0])
    lc = _layer(attention_model([b, s, h * d], [b, s, h * d], [b, s, h * d], q_num_heads=h, kv_num_heads=h),
                precision, device="cuda")
    qkv = torch.randn(b, s, 3 * h * d, device="cuda").to(_dtype(lc, "q"))
    for tactic in (FLASH, SDPA):
        if tactic.applies(lc):
            _check_strided(lc, dict(zip("qkv", qkv.split(h * d, dim=-1))), tactic, tactic.configs(lc)[0])


@pytest.mark.gpu
def test_gpu_strided_runner_survives_cuda_graph_capture():
    b, h, s, d = 16, 12, 128, 64
    lc = _layer(attention_model([b, h, s, d], [b, h, s, d], [b, h, s, d]), "fp16", device="cuda")
    by_name = dict(zip("qkv", _fused(b, s, (h, h, h), d, _dtype(lc, "q"), "cuda")))
    inputs = [by_name[v.name] for v in lc.inputs]
    runner = FLASH.build(lc, FLASH.configs(lc)[0])
    out = assert_replay_matches_direct_call(runner, inputs)
    assert out[0].transpose(1, 2).is_contiguous()
