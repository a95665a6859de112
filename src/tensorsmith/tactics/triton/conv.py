"""Triton convolution tactic: a 2-D Conv Layer as an implicit GEMM with its epilogue fused.

Rows of the GEMM are output pixels (M = N*OH*OW), columns are output channels (N = OC), and
the reduction runs over (kh, kw, input-channel block), K = KH*KW*C, in one flat loop so that
Triton pipelines it across kernel taps. The input is read in place, NCHW: for one tap a tile
gathers BLOCK_M pixels (consecutive along the output row, so coalesced for stride 1: Triton
puts threads along dim 0, the pixels, when it cannot prove contiguity) by BLOCK_K channels;
padding and dilation become load masks. A 1x1 stride-1 conv instead runs through the GEMM
kernel as W[OC, C] @ x[n][C, H*W] per image, whose pixel rows are contiguous (vector loads). The weight is packed at compile
time to [KH, KW, C, OC] (OC contiguous), which the kernel reads as a [K, N] matrix. The
output is stored NCHW after the bias and the Layer's epilogue (activations, residual Add).
"""

from __future__ import annotations

from typing import Any

import torch

from ...ir import Value
from ...ops import RunContext
from ...ops.nn import _window_geometry
from ..base import LayerContext, Runner, Tactic, register_tactic
from .compile import load_kernel
from .gemm import MM_POOL, MM_TEMPLATE
from .tiles import (
    DOT_DTYPES,
    INT32_LIMIT,
    Binding,
    Decline,
    broadcast_strides,
    check_operand_types,
    dot_call,
    emit_epilogue,
    external_operands,
    fp32_configs,
    load_line,
    loop_count,
    make_runner,
    on_triton_device,
    padded_shape,
    pick_configs,
    scalar_reader,
    split_layer,
    triton_cdiv,
)

# (BLOCK_M, BLOCK_N, BLOCK_K, num_stages, num_warps), after Inductor's conv configs; BLOCK_N
# shrinks to the output channels and BLOCK_K to the input channels (pick_configs).
_CONV_POOL = [
    (128, 128, 32, 3, 8), (128, 64, 32, 3, 4), (64, 128, 32, 3, 4), (256, 64, 32, 3, 8),
    (64, 64, 32, 4, 4), (128, 128, 64, 3, 8),
]

_CONV_TEMPLATE = '''
import triton
import triton.language as tl


@triton.jit
def {name}(
    {pointers},
    NB, C, H, W, OC, OH, OW, stride_h, stride_w, pad_h, pad_w, dil_h, dil_w,
    {strides}
    KH: tl.constexpr, KW: tl.constexpr,
    BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr, GROUP_M: tl.constexpr,
    EVEN_C: tl.constexpr,{k_param}
):
    pid = tl.program_id(0)
    OHW = OH * OW
    M = NB * OHW
    num_pid_m = tl.cdiv(M, BLOCK_M)
    num_pid_n = tl.cdiv(OC, BLOCK_N)
    width = GROUP_M * num_pid_n
    first_m = (pid // width) * GROUP_M
    group_size = tl.minimum(num_pid_m - first_m, GROUP_M)
    pid_m = first_m + (pid % width) % group_size
    pid_n = (pid % width) // group_size
    offs_m = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)
    offs_n = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
    offs_k = tl.arange(0, BLOCK_K)
    rm = offs_m % M
    n_idx = rm // OHW
    rem = rm % OHW
    oh = rem // OW
    ow = rem % OW
    ih0 = oh * stride_h - pad_h
    iw0 = ow * stride_w - pad_w
    x_rows = x_ptr + n_idx * (C * H * W)
    rn = offs_n % OC
    c_tiles = tl.cdiv(C, BLOCK_K)
    acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
    for t in range(0, {k_tiles}):
        r = t // c_tiles
        cs = (t % c_tiles) * BLOCK_K + offs_k
        ih = ih0 + (r // KW) * dil_h
        iw = iw0 + (r % KW) * dil_w
        valid = (ih >= 0) & (ih < H) & (iw >= 0) & (iw < W)
        a_ptrs = (x_rows + ih * W + iw)[:, None] + cs[None, :] * (H * W)
        b_ptrs = w_ptr + (r * C + cs)[:, None] * OC + rn[None, :]
        if EVEN_C:
            a = tl.load(a_ptrs, mask=valid[:, None], other=0.0)
            b = tl.load(b_ptrs)
        else:
            a = tl.load(a_ptrs, mask=valid[:, None] & (cs < C)[None, :], other=0.0)
            b = tl.load(b_ptrs, mask=(cs < C)[:, None], other=0.0)
        acc = {dot}
    m_mask = offs_m < M
    n_mask = offs_n < OC
    mask = m_mask[:, None] & n_mask[None, :]
{epilogue}
'''


class _ConvProblem:
    """The geometry of a 2-D Conv Layer and the operands of its epilogue."""

    def __init__(self, lc: LayerContext):
        if not on_triton_device(lc):
            raise Decline("not a CUDA device nor the interpreter")
        prologue, anchor, epilogue = split_layer(lc)
        if anchor.op_type != "Conv" or anchor.domain or prologue:
            raise Decline("anchor is not a plain Conv")
        if anchor.attrs.get("group", 1) != 1:
            raise Decline("grouped/depthwise convolution")
        self.anchor, self.epilogue = anchor, epilogue
        self.scalar_of = scalar_reader(lc)
        x, w = anchor.inputs[0], anchor.inputs[1]
        self.bias = anchor.inputs[2] if len(anchor.inputs) > 2 else None
        if lc.is_weight(x) or not lc.is_weight(w) or (self.bias is not None and not lc.is_weight(self.bias)):
            raise Decline("the input must be an activation and the weight and bias constants")
        self.dtype = x.type.dtype if x.type is not None else None
        if self.dtype not in DOT_DTYPES or w.type is None or w.type.dtype != self.dtype:
            raise Decline("input and weight are not both float16, bfloat16 or float32")
        xs, ws, out = lc.shape(x), tuple(lc.weight(w).shape), anchor.outputs[0]
        self.out_shape = lc.shape(out)
        if len(xs) != 4 or len(ws) != 4 or len(self.out_shape) != 4:
            raise Decline("not a 2-D convolution")
        self.NB, self.C, self.H, self.W = xs
        self.OC, c, self.KH, self.KW = ws
        if c != self.C or (self.bias is not None and lc.weight(self.bias).numel() != self.OC):
            raise Decline("weight/bias shapes do not match the input")
        outs, begin, _, _, strides, dilations = _window_geometry(RunContext(anchor), [self.H, self.W],
                                                                 [self.KH, self.KW])
        if tuple(self.out_shape) != (self.NB, self.OC, *outs):
            raise Decline("output shape differs from the conv geometry")
        self.OH, self.OW = outs
        self.geometry = [*strides, *begin, *dilations]  # stride h/w, pad h/w, dilation h/w
        self.M = self.NB * self.OH * self.OW
        produced = {out.name} | {n.outputs[0].name for n in epilogue}
        self.operands = external_operands(epilogue, produced, self.scalar_of)
        check_operand_types(lc, self.operands)
        for v in [x, out, *self.operands, *lc.outputs]:
            if lc.numel(v) > INT32_LIMIT:
                raise Decline("tensor too large for 32-bit offsets")
        for v in lc.outputs:
            if lc.shape(v) != self.out_shape:
                raise Decline("an output does not have the conv's shape")
        for v in self.operands:
            padded_shape(lc, v, self.out_shape)
        # A 1x1, stride-1, unpadded conv is a GEMM per image: out[n] = W[OC, C] @ x[n][C, H*W],
        # read with contiguous pixel rows (vector loads that Triton can pipeline).
        self.pointwise = (self.KH == self.KW == 1 and strides == [1, 1] and begin == [0, 0] and self.NB <= 65535
                          and (self.OH, self.OW) == (self.H, self.W)
                          and all(self._pointwise_operand(lc, v) is not None for v in self.operands))

    def _pointwise_operand(self, lc: LayerContext, v: Value) -> tuple[list[int], bool] | None:
        """(n, c, pixel) strides of an epilogue operand in the per-image GEMM, and whether it varies
        along pixels; None if it broadcasts along only one of H and W."""
        p = padded_shape(lc, v, self.out_shape)
        sn, sc, sh, sw = broadcast_strides(p)
        if self.OH > 1 and self.OW > 1 and (p[2] == 1) != (p[3] == 1):
            return None
        return [sn, sc, sw or sh], bool(sh or sw)

    def pack_weight(self, t: torch.Tensor) -> torch.Tensor:
        """[OC, C, KH, KW] -> [KH, KW, C, OC]: row (kh*KW + kw)*C + c of a [K, OC] matrix."""
        return t.to(self.dtype.torch).permute(2, 3, 1, 0).contiguous()

    def operand_offsets(self, lc: LayerContext, v: Value, i: int):
        """(strides over n, c, h, w as kernel args; row and column offset expressions)."""
        p = padded_shape(lc, v, self.out_shape)
        sn, sc, sh, sw = broadcast_strides(p)
        terms = [f"n_idx * x{i}_sn"] if sn else []
        if sh and sw:
            terms.append(f"rem * x{i}_sw")  # a full plane: (oh*OW + ow) * sw
        else:
            terms += ([f"oh * x{i}_sh"] if sh else []) + ([f"ow * x{i}_sw"] if sw else [])
        col = f"offs_n * x{i}_sc" if sc else None
        return [sn, sc, sh, sw], " + ".join(terms) or None, col


def _pointwise_source(lc: LayerContext, p: _ConvProblem, name: str, config: dict[str, Any]) -> tuple[str, Binding]:
    """The 1x1 conv through the GEMM kernel: M = OC, N = H*W, K = C, batch = images."""
    binding = Binding()
    pointers = [f"out{i}_ptr" for i in range(len(lc.outputs))] + ["a_ptr", "b_ptr"]
    binding.value(lc, p.anchor.inputs[1], lambda t: t.reshape(p.OC, p.C).to(p.dtype.torch))
    binding.value(lc, p.anchor.inputs[0])
    env = {p.anchor.outputs[0].name: "acc"}
    lines, strides, stride_ints = [], [], []
    if p.bias is not None:
        pointers.append("bias_ptr")
        binding.value(lc, p.bias, lambda t: t.reshape(-1).to(p.dtype.torch))
        lines.append("acc = acc + tl.load(bias_ptr + offs_m, mask=m_mask, other=0).to(tl.float32)[:, None]")
    for i, v in enumerate(p.operands):
        pointers.append(f"x{i}_ptr")
        binding.value(lc, v)
        (sn, sc, spix), along_pixels = p._pointwise_operand(lc, v)
        strides.append(f"x{i}_sb, x{i}_sm, x{i}_sn,")
        stride_ints += [sn, sc, spix]
        base = f" + bid * x{i}_sb" if sn else ""
        lines.append(load_line(f"x{i}", f"x{i}_ptr", base, f"offs_m * x{i}_sm" if sc else None,
                               f"offs_n * x{i}_sn" if along_pixels else None, v))
        env[v.name] = f"x{i}"
    lines += emit_epilogue(lc, p.epilogue, env, p.scalar_of, "bid * stride_ob + offs_m[:, None] * N + offs_n[None, :]")
    k_tiles, k_param = loop_count(lc, "tl.cdiv(K, BLOCK_K)", "K_TILES")
    src = MM_TEMPLATE.format(
        name=name, pointers=", ".join(pointers), strides=" ".join(strides), k_tiles=k_tiles, k_param=k_param,
        prologue="", dot=dot_call(lc, p.dtype, config, "a", "b"), epilogue="\n".join("    " + ln for ln in lines))
    hw = p.H * p.W
    binding.ints = [p.OC, hw, p.C, p.OC, 0, p.C, 1, p.C * hw, hw, 1, p.OC * hw, *stride_ints]
    return src, binding


def _conv_source(lc: LayerContext, p: _ConvProblem, name: str, config: dict[str, Any]) -> tuple[str, Binding]:
    if p.pointwise:
        return _pointwise_source(lc, p, name, config)
    binding = Binding()
    pointers = [f"out{i}_ptr" for i in range(len(lc.outputs))] + ["x_ptr", "w_ptr"]
    binding.value(lc, p.anchor.inputs[0])
    binding.value(lc, p.anchor.inputs[1], p.pack_weight)
    env = {p.anchor.outputs[0].name: "acc"}
    lines, strides, stride_ints = [], [], []
    if p.bias is not None:
        pointers.append("bias_ptr")
        binding.value(lc, p.bias, lambda t: t.reshape(-1).to(p.dtype.torch))
        lines.append("acc = acc + tl.load(bias_ptr + offs_n, mask=n_mask, other=0).to(tl.float32)[None, :]")
    for i, v in enumerate(p.operands):
        pointers.append(f"x{i}_ptr")
        binding.value(lc, v)
        s, row, col = p.operand_offsets(lc, v, i)
        strides.append(f"x{i}_sn, x{i}_sc, x{i}_sh, x{i}_sw,")
        stride_ints += s
        lines.append(load_line(f"x{i}", f"x{i}_ptr", "", row, col, v))
        env[v.name] = f"x{i}"
    lines += emit_epilogue(lc, p.epilogue, env, p.scalar_of,
                           "(n_idx * (OC * OHW) + rem)[:, None] + (offs_n * OHW)[None, :]")
    k_tiles, k_param = loop_count(lc, "KH * KW * c_tiles", "K_TILES")
    src = _CONV_TEMPLATE.format(
        name=name, pointers=", ".join(pointers), strides=" ".join(strides), k_tiles=k_tiles, k_param=k_param,
        dot=dot_call(lc, p.dtype, config, "a", "b"), epilogue="\n".join("    " + ln for ln in lines))
    binding.ints = [p.NB, p.C, p.H, p.W, p.OC, p.OH, p.OW, *p.geometry, *stride_ints]
    return src, binding


class TritonConv(Tactic):
    name = "triton.conv"

    def applies(self, lc: LayerContext) -> bool:
        if lc.activation_layout == "channels_last":
            return False  # NCHW kernels between channels-last convs cost two layout conversions
        try:
            _conv_source(lc, _ConvProblem(lc), "probe", {})
        except (Decline, ValueError, KeyError):
            return False
        return True

    def configs(self, lc: LayerContext) -> list[dict[str, Any]]:
        p = _ConvProblem(lc)
        if p.pointwise:
            configs = pick_configs(MM_POOL, p.OC, p.H * p.W, p.C, p.dtype.itemsize)
        else:
            configs = pick_configs(_CONV_POOL, p.M, p.OC, p.C, p.dtype.itemsize)
        return fp32_configs(lc, p.dtype, configs, torch.backends.cudnn.allow_tf32)

    def compile(self, lc: LayerContext, config: dict[str, Any]) -> Runner:
        p = _ConvProblem(lc)
        src, binding = _conv_source(lc, p, "conv_kernel", config)
        kernel = load_kernel(src, "conv_kernel")
        bm, bn, bk = config["BLOCK_M"], config["BLOCK_N"], config["BLOCK_K"]
        consts = {"BLOCK_M": bm, "BLOCK_N": bn, "BLOCK_K": bk, "GROUP_M": config.get("GROUP_M", 8),
                      "num_warps": config.get("num_warps", 4), "num_stages": config.get("num_stages", 3)}
        if p.pointwise:
            grid = (triton_cdiv(p.OC, bm) * triton_cdiv(p.H * p.W, bn), p.NB)
            consts.update(EVEN_K=p.C % bk == 0)
        else:
            grid = (triton_cdiv(p.M, bm) * triton_cdiv(p.OC, bn),)
            consts.update(KH=p.KH, KW=p.KW, EVEN_C=p.C % bk == 0)
        if lc.device.type != "cuda":
            consts["K_TILES"] = p.KH * p.KW * triton_cdiv(p.C, bk)
        return make_runner(lc, kernel, binding, grid, consts)


TRITON_CONV = register_tactic(TritonConv())
