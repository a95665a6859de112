"""Fused attention tactics for Layers anchored on the ONNX `Attention` op.

- "triton.flash_attention": a flash-attention forward kernel generated per layer structure:
  tiles of BLOCK_M queries x BLOCK_N keys, online softmax in float32, the head dim padded to a
  power of two; an optional additive (or boolean) mask read through its broadcast strides,
  is_causal, grouped-query attention, and the layer's elementwise prologue/epilogue fused in
  through codegen.
- "torch.sdpa": torch.nn.functional.scaled_dot_product_attention on the same layers (no
  prologue/epilogue), which competes with the kernel on the GPU and also runs on the CPU.

Both read Q, K, V and the mask in whatever layout they arrive: exporters split heads with
Reshape + Transpose, which are views, so the kernel takes each input's strides at run time
rather than have it copied. The kernel writes a rank-4 output [batch, heads, seq, size] into
[batch, seq, heads, size] memory (as torch's flash attention does), so the Transpose + Reshape
that merges the heads back is a view too.

Both compute what ops/attention.py computes for the cases they accept and decline the rest:
past_key/past_value, nonpad_kv_seqlen, softcap, sliding windows, qk_matmul_output_mode != 0,
softmax_precision, extra outputs that are read, and masks shorter than the keys (ONNX pads
those with -inf instead of broadcasting them).
"""

from __future__ import annotations

import importlib.util
import math
import os
from dataclasses import dataclass, field
from typing import Any

import torch

from ...ir import DType, Node, Value
from ..base import LayerContext, Runner, Tactic, register_tactic
from .codegen import TL_DTYPE, emit_elementwise, register_dtype
from .compile import load_kernel

_Q, _K, _V, _MASK = 0, 1, 2, 3
_MAX_HEAD = 256


class _Decline(Exception):
    """The layer has something these tactics do not handle."""


# How one index axis of a tile reads a tensor: (tensor dim, multiplier of its stride). A
# multiplier of 0 marks an axis the tensor broadcasts over: its stride is 0 whatever the tensor's.
_Pick = tuple[int, int]


@dataclass
class _Slot:
    """One tensor the kernel loads: its tile role and how its strides map to the role's index space.

    Index spaces: q, y -> (batch, q head, query, feature); k, v -> (batch, kv head, key, feature);
    mask -> (batch, q head, query, key).
    """

    value: Value
    role: str  # "q" | "k" | "v" | "mask" | "y" (an epilogue operand, over the output tile)
    picks: tuple[_Pick, _Pick, _Pick, _Pick]
    source: tuple[str, Any]  # ("input", index in lc.inputs) or ("weight", tensor)


@dataclass
class _Plan:
    """What the layer computes, in the terms the kernel and the sdpa call need."""

    batch: int
    q_heads: int
    kv_heads: int
    q_len: int
    kv_len: int
    head: int
    head_v: int
    scale: float
    causal: bool
    rank: int  # 3 ([batch, seq, heads*size]) or 4 ([batch, heads, seq, size])
    dtype: torch.dtype  # of Q, K, V
    operands: dict[int, Value]  # anchor input index -> value read by the anchor
    prologue: dict[int, Node] = field(default_factory=dict)  # anchor input index -> fused producer
    epilogue: list[Node] = field(default_factory=list)
    output: Value | None = None
    y_shape: tuple[int, ...] = ()


def _broadcast_dims(shape: tuple[int, ...], target: tuple[int, ...]) -> list[int | None]:
    """For each dim of `target`, the dim of `shape` that indexes it when `shape` is broadcast to
    `target` (right-aligned), or None where it broadcasts."""
    if len(shape) > len(target):
        raise _Decline(f"shape {shape} has more dims than {target}")
    pad = len(target) - len(shape)
    out: list[int | None] = [None] * pad
    for i, (d, t) in enumerate(zip(shape, target[pad:])):
        if d == 1:
            out.append(None)
        elif d == t:
            out.append(i)
        else:
            raise _Decline(f"shape {shape} does not broadcast to {target}")
    return out


def _index_picks(shape: tuple[int, ...], target: tuple[int, ...], per_head: int | None) -> tuple[_Pick, ...]:
    """How the (batch, head, seq, feature) strides of a tensor broadcast to `target` follow from its strides.

    `per_head` is None for a 4-D target [B, H, S, X]; for a 3-D target [B, S, H*X] it is X, and
    the last axis splits into head and feature: element (b, s, h*X + f) lies at
    b*st0 + s*st1 + (h*X + f)*st2, whatever the strides, so the head stride is X*st2.
    """
    picks = [(0, 0) if d is None else (d, 1) for d in _broadcast_dims(shape, target)]
    if per_head is None:
        return tuple(picks)
    batch, seq, (dim, m) = picks
    return batch, (dim, m * per_head), seq, (dim, m)


def _strides(picks: tuple[_Pick, ...], stride: tuple[int, ...]) -> list[int]:
    """The index strides of a tensor with element strides `stride`."""
    return [stride[d] * m if m else 0 for d, m in picks]


def _fits_int32(t: torch.Tensor) -> bool:
    """Whether every offset into `t` fits the kernel's 32-bit index arithmetic."""
    return sum((n - 1) * st for n, st in zip(t.shape, t.stride())) < 2**31


def _slot_args(slot: _Slot):
    """A function from the runner's inputs to the kernel arguments of `slot`: its tensor, then
    its four index strides. Weights keep the strides they had at compile time; inputs are read
    in the layout they arrive in."""
    kind, src = slot.source
    picks = slot.picks
    if kind == "weight":
        fixed = [src, *_strides(picks, src.stride())]
        return lambda inputs: fixed

    def args(inputs: list[torch.Tensor]) -> list[Any]:
        t = inputs[src]
        # A view into a larger buffer (a slice of a fused QKV projection) can span more than the
        # 2**31 elements that `applies` bounds the layer's tensors by: copy that one.
        if not _fits_int32(t):
            t = t.contiguous()
        return [t, *_strides(picks, t.stride())]

    return args


def _analyze(lc: LayerContext) -> _Plan:
    """The plan of an Attention layer, or _Decline saying what is not handled."""
    anchor = lc.anchor
    if anchor is None or anchor.op_type != "Attention" or anchor.domain:
        raise _Decline("not an Attention layer")
    ins = list(anchor.inputs) + [None] * (7 - len(anchor.inputs))
    if ins[4] is not None or ins[5] is not None or ins[6] is not None:
        raise _Decline("past_key/past_value/nonpad_kv_seqlen")
    a = anchor.attrs
    if a.get("softcap", 0.0) or a.get("qk_matmul_output_mode", 0) or a.get("softmax_precision") is not None:
        raise _Decline("softcap, qk_matmul_output_mode or softmax_precision")
    if a.get("left_window_size", -1) != -1 or a.get("right_window_size", -1) != -1:
        raise _Decline("sliding window")
    if any(o.users for o in anchor.outputs[1:]) or any(o in lc.outputs for o in anchor.outputs[1:]):
        raise _Decline("present_key/present_value/qk output is read")
    q, k, v, mask = ins[:4]
    if q is None or k is None or v is None:
        raise _Decline("missing Q, K or V")
    qs, ks, vs = lc.shape(q), lc.shape(k), lc.shape(v)
    dtypes = {x.type.dtype for x in (q, k, v)}
    if len(dtypes) != 1:
        raise _Decline("Q, K, V of different dtypes")
    dtype = next(iter(dtypes)).torch
    if not len(qs) == len(ks) == len(vs) or len(qs) not in (3, 4):
        raise _Decline("Q, K, V must all be 3-D or all 4-D")
    rank = len(qs)
    if rank == 4:
        (b, hq, s, d), (bk, hk, l, dk), (bv, hv, lv, dv) = qs, ks, vs
    else:
        hq, hk = a.get("q_num_heads"), a.get("kv_num_heads")
        if not hq or not hk or qs[2] % hq or ks[2] % hk or vs[2] % hk:
            raise _Decline("3-D inputs without matching q_num_heads/kv_num_heads")
        (b, s, d), (bk, l, dk), (bv, lv, dv) = (qs[0], qs[1], qs[2] // hq), (ks[0], ks[1], ks[2] // hk), (vs[0], vs[1], vs[2] // hk)
        hv = hk
    if not (b == bk == bv and hk == hv and l == lv and d == dk) or hq % hk:
        raise _Decline(f"incompatible shapes Q{qs} K{ks} V{vs}")
    if min(b, hq, s, l, d, dv) <= 0:
        raise _Decline("empty tensor")
    y_shape = (b, hq, s, dv) if rank == 4 else (b, s, hq * dv)
    if lc.shape(anchor.outputs[0]) != y_shape:
        raise _Decline("unexpected output shape")
    operands = {_Q: q, _K: k, _V: v}
    if mask is not None:
        ms = lc.shape(mask)
        mdt = mask.type.dtype
        if not (mdt == DType.BOOL or mdt.is_float) or len(ms) > 4:
            raise _Decline("mask must be float or bool, rank <= 4")
        if ms and ms[-1] != l:
            raise _Decline("mask shorter than the keys (ONNX pads it with -inf)")
        _broadcast_dims(ms, (b, hq, s, l))
        operands[_MASK] = mask
    scale = a.get("scale")
    plan = _Plan(b, hq, hk, s, l, d, dv, 1.0 / math.sqrt(d) if scale is None else float(scale),
                 bool(a.get("is_causal", 0)), rank, dtype, operands, y_shape=y_shape)
    pos = lc.nodes.index(anchor)
    for n in lc.nodes[:pos]:
        users = [i for i, x in enumerate(anchor.inputs) if x is not None and x is n.outputs[0]]
        if len(n.outputs) != 1 or len(users) != 1 or users[0] not in operands:
            raise _Decline(f"prologue node '{n.name}' does not feed one of Q, K, V, mask")
        plan.prologue[users[0]] = n
    plan.epilogue = lc.nodes[pos + 1:]
    last = plan.epilogue[-1].outputs[0] if plan.epilogue else anchor.outputs[0]
    if len(lc.outputs) != 1 or lc.outputs[0] is not last or lc.shape(last) != y_shape:
        raise _Decline("the layer's output is not the attention result (after its epilogue)")
    if any(len(n.outputs) != 1 for n in plan.epilogue):
        raise _Decline("epilogue node with several outputs")
    plan.output = last
    return plan


def _interpreted() -> bool:
    return os.environ.get("TRITON_INTERPRET") == "1"


# ----------------------------------------------------------------------------- flash kernel

_ROLE = {  # role -> (head index, row offsets, row bound, column offsets, column bound), as in the kernel
    "q": ("h", "offs_m[:, None]", "in_m[:, None]", "offs_d[None, :]", "in_d[None, :]"),
    "k": ("hk", "offs_n[None, :]", "in_n[None, :]", "offs_d[:, None]", "in_d[:, None]"),  # loaded transposed
    "v": ("hk", "offs_n[:, None]", "in_n[:, None]", "offs_dv[None, :]", "in_dv[None, :]"),
    "mask": ("h", "offs_m[:, None]", "in_m[:, None]", "offs_n[None, :]", "in_n[None, :]"),
    "y": ("h", "offs_m[:, None]", "in_m[:, None]", "offs_dv[None, :]", "in_dv[None, :]"),
}
_ROLE_OF = {_Q: "q", _K: "k", _V: "v", _MASK: "mask"}

# Keys after a block's last query are masked in all its rows: a causal loop stops before them.
# (Not under the interpreter, which cannot take a run-time loop bound, nor even a constexpr
# bound assigned to a variable: there the loop runs to S_K and the causal mask alone hides them.)
_CAUSAL_END = "tl.minimum(S_K, (pid_m + 1) * BLOCK_M)"

_TEMPLATE = '''\
import triton
import triton.language as tl


@triton.jit
def attention_kernel(
    {params}
    Out, so_b, so_h, so_s, so_d,
    H, S_Q, scale, S_K: tl.constexpr,
    GROUP: tl.constexpr, D: tl.constexpr, DV: tl.constexpr, BLOCK_D: tl.constexpr, BLOCK_DV: tl.constexpr,
    BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, IS_CAUSAL: tl.constexpr,
):
    LOG2E: tl.constexpr = 1.4426950408889634
    pid_m = tl.program_id(0)
    pid_bh = tl.program_id(1)
    b = pid_bh // H
    h = pid_bh % H
    hk = h // GROUP
    offs_m = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)
    offs_d = tl.arange(0, BLOCK_D)
    offs_dv = tl.arange(0, BLOCK_DV)
    in_m = offs_m < S_Q
    in_d = offs_d < D
    in_dv = offs_dv < DV
    {q_lines}
    m_i = tl.full([BLOCK_M], float("-inf"), tl.float32)
    l_i = tl.zeros([BLOCK_M], tl.float32)
    acc = tl.zeros([BLOCK_M, BLOCK_DV], tl.float32)
    for start_n in range(0, {kv_end}, BLOCK_N):
        offs_n = start_n + tl.arange(0, BLOCK_N)
        in_n = offs_n < S_K
        {k_lines}
        s = tl.dot(q, kt{dot_kw}) * scale
        {mask_lines}
        keep = in_n[None, :]
        if IS_CAUSAL:
            keep = keep & (offs_n[None, :] <= offs_m[:, None])
        s = tl.where(keep, s, float("-inf"))
        m_new = tl.maximum(m_i, tl.max(s, 1))
        # A row with nothing to attend to so far keeps m = -inf; subtract 0 there instead (no NaN).
        m_use = tl.where(m_new == float("-inf"), 0.0, m_new)
        alpha = tl.math.exp2((m_i - m_use) * LOG2E)
        p = tl.math.exp2((s - m_use[:, None]) * LOG2E)
        l_i = l_i * alpha + tl.sum(p, 1)
        {v_lines}
        acc = acc * alpha[:, None] + tl.dot(p.to(vt.dtype), vt{dot_kw})
        m_i = m_new
    # A fully masked row gives zeros, as ONNX specifies.
    y = acc / tl.where(l_i == 0.0, 1.0, l_i)[:, None]
    y = y.to({y_storage}).to(tl.float32)
    {epilogue_lines}
    tl.store(Out + b * so_b + h * so_h + offs_m[:, None] * so_s + offs_dv[None, :] * so_d,
             {result}.to({out_storage}), mask=in_m[:, None] & in_dv[None, :])
'''


def _scalar_of(lc: LayerContext):
    def scalar_of(v: Value) -> float | None:
        if lc.is_weight(v) and lc.weight(v).numel() == 1:
            return float(lc.weight(v).reshape(-1)[0])
        return None

    return scalar_of


class _KernelBuilder:
    """Kernel source and the slots (tensors) it loads, for one plan."""

    def __init__(self, lc: LayerContext, plan: _Plan):
        self.lc, self.plan = lc, plan
        self.scalar_of = _scalar_of(lc)
        self.slots: list[_Slot] = []
        self.keys: dict[tuple[str, str], int] = {}
        self.input_index = {v.name: i for i, v in enumerate(lc.inputs)}

    def _target(self, role: str) -> tuple[tuple[int, ...], int | None]:
        """The shape a tile of `role` indexes (3-D or 4-D), and the per-head size of a 3-D one."""
        p = self.plan
        if role == "mask":
            return (p.batch, p.q_heads, p.q_len, p.kv_len), None
        shape = p.y_shape if role == "y" else self.lc.shape(p.operands[{"q": _Q, "k": _K, "v": _V}[role]])
        return shape, None if p.rank == 4 else (p.head_v if role in ("v", "y") else p.head)

    def load(self, v: Value, role: str, cast: str | None = None) -> str:
        """An expression loading `v`, broadcast to the tile of `role`."""
        key = (v.name, role)
        if key not in self.keys:
            target, per_head = self._target(role)
            picks = _index_picks(self.lc.shape(v), target, per_head)
            if self.lc.is_weight(v):
                source = ("weight", self.lc.weight(v))
            elif v.name in self.input_index:
                source = ("input", self.input_index[v.name])
            else:
                raise _Decline(f"value '{v.name}' is neither a layer input nor a weight")
            self.keys[key] = len(self.slots)
            self.slots.append(_Slot(v, role, picks, source))
        i = self.keys[key]
        head, rows, rmask, cols, cmask = _ROLE[role]
        ptr = f"X{i} + b * x{i}_b + {head} * x{i}_h + {rows} * x{i}_s + {cols} * x{i}_d"
        load = f"tl.load({ptr}, mask={rmask} & {cmask}, other=0)"
        return f"{load}.to({cast})" if cast else load

    def operand(self, index: int, var: str) -> list[str]:
        """Lines setting `var` to the tile of anchor input `index` (in storage dtype for Q/K/V)."""
        role = _ROLE_OF[index]
        v = self.plan.operands[index]
        node = self.plan.prologue.get(index)
        storage = TL_DTYPE[v.type.dtype] if index != _MASK else None
        if node is None:
            cast = "tl.float32" if index == _MASK and v.type.dtype != DType.BOOL else None
            return [f"{var} = {self.load(v, role, cast=cast)}"]
        env: dict[str, str] = {}
        lines = []
        for j, x in enumerate(node.inputs):
            if x is None or x.name in env or self.scalar_of(x) is not None:
                continue
            _broadcast_dims(self.lc.shape(x), self.lc.shape(v))  # within the operand's shape
            name = f"{var}_in{j}"
            lines.append(f"{name} = {self.load(x, role, cast=register_dtype(x.type.dtype))}")
            env[x.name] = name
        try:
            lines += emit_elementwise([node], env, self.scalar_of, prefix=f"{var}_p")
        except ValueError as e:
            raise _Decline(str(e)) from None
        result = env[node.outputs[0].name]
        lines.append(f"{var} = {result}.to({storage})" if storage else f"{var} = {result}")
        return lines

    def source(self, dot_kw: str, causal_bound: bool) -> str:
        p = self.plan
        q_lines = self.operand(_Q, "q")
        k_lines = self.operand(_K, "kt")
        v_lines = self.operand(_V, "vt")
        mask_lines: list[str] = []
        if _MASK in p.operands:
            mask_lines = self.operand(_MASK, "bias")
            if p.operands[_MASK].type.dtype == DType.BOOL:
                mask_lines.append('bias = tl.where(bias != 0, 0.0, float("-inf"))')
            mask_lines.append("s = s + bias")
        y_value = self.lc.anchor.outputs[0]
        env = {y_value.name: "y"}
        epi: list[str] = []
        computed = {y_value.name} | {n.outputs[0].name for n in p.epilogue}
        for n in p.epilogue:
            for x in n.inputs:
                if x is None or x.name in env or x.name in computed or self.scalar_of(x) is not None:
                    continue
                if any(x is o for m in self.lc.nodes for o in m.outputs):
                    raise _Decline(f"epilogue reads '{x.name}', computed inside the layer before the attention")
                name = f"e{len(env)}"
                epi.append(f"{name} = {self.load(x, 'y', cast=register_dtype(x.type.dtype))}")
                env[x.name] = name
        try:
            epi += emit_elementwise(p.epilogue, env, self.scalar_of, prefix="ep")
        except ValueError as e:
            raise _Decline(str(e)) from None
        out_storage = TL_DTYPE.get(p.output.type.dtype)
        if out_storage is None or not p.output.type.dtype.is_float:
            raise _Decline("non-float output")
        params = "".join(f"X{i}, x{i}_b, x{i}_h, x{i}_s, x{i}_d,\n    " for i in range(len(self.slots)))
        return _TEMPLATE.format(
            params=params,
            q_lines="\n    ".join(q_lines), k_lines="\n        ".join(k_lines), v_lines="\n        ".join(v_lines),
            mask_lines="\n        ".join(mask_lines) or "pass", epilogue_lines="\n    ".join(epi) or "pass",
            dot_kw=dot_kw, kv_end=_CAUSAL_END if causal_bound and self.plan.causal else "S_K", y_storage=TL_DTYPE[y_value.type.dtype], result=env[p.output.name], out_storage=out_storage,
        )


def _next_pow2(n: int) -> int:
    return 1 << max(0, (n - 1).bit_length())


class FlashAttention(Tactic):
    name = "triton.flash_attention"
    accepts_strided = True  # the kernel reads each input through its run-time strides

    def applies(self, lc: LayerContext) -> bool:
        if lc.device.type != "cuda" and not _interpreted() or importlib.util.find_spec("triton") is None:
            return False
        try:
            plan = _analyze(lc)
            allowed = (torch.float16, torch.float32) + ((torch.bfloat16,) if lc.device.type == "cuda" else ())
            if plan.dtype not in allowed or max(plan.head, plan.head_v) > _MAX_HEAD:
                return False
            if any(lc.numel(x) >= 2**31 for x in lc.inputs + lc.outputs):
                return False
            _KernelBuilder(lc, plan).source("", False)
        except _Decline:
            return False
        return True

    def configs(self, lc: LayerContext) -> list[dict[str, Any]]:
        plan = _analyze(lc)
        bd, bdv = max(16, _next_pow2(plan.head)), max(16, _next_pow2(plan.head_v))
        elt = plan.dtype.itemsize
        out = []
        for bm in (64, 128):
            if bm == 128 and plan.q_len <= 64:
                continue
            for bn in (32, 64):
                if bn == 64 and plan.kv_len <= 32:
                    continue
                for warps in (4, 8):
                    # q tile + accumulator per thread: beyond ~64 float registers each, it spills.
                    if bm * max(bd, bdv) // (32 * warps) > 64:
                        continue
                    # Triton needs about twice this estimate (layout conversions of the dot
                    # operands): a 160 KB budget asked for 240 KB at head dim 128 on the H200.
                    stages = next((st for st in (3, 2, 1)
                                   if (bm * bd + st * bn * (bd + bdv)) * elt <= 100 * 1024), None)
                    if stages is not None:
                        out.append({"BLOCK_M": bm, "BLOCK_N": bn, "num_warps": warps, "num_stages": stages})
        return out or [{"BLOCK_M": 64, "BLOCK_N": 32, "num_warps": 8, "num_stages": 1}]

    def compile(self, lc: LayerContext, config: dict[str, Any]) -> Runner:
        plan = _analyze(lc)
        builder = _KernelBuilder(lc, plan)
        dot_kw = ""
        if plan.dtype == torch.float32 and not _interpreted():
            tf32 = torch.backends.cuda.matmul.allow_tf32
            dot_kw = f', input_precision="{"tf32" if tf32 else "ieee"}"'
        kernel = load_kernel(builder.source(dot_kw, causal_bound=not _interpreted()), "attention_kernel")
        bm, bn = int(config["BLOCK_M"]), int(config["BLOCK_N"])
        grid = (_cdiv(plan.q_len, bm), plan.batch * plan.q_heads)
        new_output = _output_allocator(plan, lc.device)
        tail = (*_out_strides(plan), plan.q_heads, plan.q_len, plan.scale)
        constexprs = {
            "GROUP": plan.q_heads // plan.kv_heads, "D": plan.head, "DV": plan.head_v,
            "BLOCK_D": max(16, _next_pow2(plan.head)), "BLOCK_DV": max(16, _next_pow2(plan.head_v)),
            "BLOCK_M": bm, "BLOCK_N": bn, "IS_CAUSAL": plan.causal, "S_K": plan.kv_len,
            "num_warps": int(config.get("num_warps", 4)), "num_stages": int(config.get("num_stages", 2)),
        }
        # Strides are plain int arguments, so one compiled kernel serves every layout; working
        # them out per call is host work that a CUDA graph capture does once.
        slot_args = [_slot_args(s) for s in builder.slots]
        launch = kernel[grid]

        def run(inputs: list[torch.Tensor]) -> list[torch.Tensor]:
            args: list[Any] = []
            for slot in slot_args:
                args.extend(slot(inputs))
            out = new_output()
            launch(*args, out, *tail, **constexprs)
            return [out]

        return run


def _out_strides(plan: _Plan) -> tuple[int, int, int, int]:
    """(batch, head, query, feature) strides of the output: [batch, seq, heads, size] memory for both ranks."""
    return plan.q_len * plan.q_heads * plan.head_v, plan.head_v, plan.q_heads * plan.head_v, 1


def _output_allocator(plan: _Plan, device: torch.device):
    """A function allocating the output, laid out as _out_strides says.

    A rank-4 output [B, H, S, Dv] is a permuted view of [B, S, H, Dv] memory, as torch's flash
    attention returns it: the Transpose(0, 2, 1, 3) + Reshape [B, S, H*Dv] that exporters merge
    the heads with is then a view, not a copy. A rank-3 output [B, S, H*Dv] is that memory already.
    """
    b, h, s, dv = plan.batch, plan.q_heads, plan.q_len, plan.head_v
    dtype = plan.output.type.dtype.torch
    if plan.rank == 4:
        return lambda: torch.empty(b, s, h, dv, dtype=dtype, device=device).permute(0, 2, 1, 3)
    return lambda: torch.empty(b, s, h * dv, dtype=dtype, device=device)


def _cdiv(a: int, b: int) -> int:
    return -(-a // b)


# ----------------------------------------------------------------------------- torch sdpa


class TorchSdpa(Tactic):
    """torch's fused attention (flash / memory-efficient / cuDNN / math backends, its choice)."""

    name = "torch.sdpa"
    accepts_strided = True  # torch's attention takes any layout (its backends copy where they must)

    def applies(self, lc: LayerContext) -> bool:
        try:
            plan = _analyze(lc)
        except _Decline:
            return False
        if plan.prologue or plan.epilogue or plan.dtype not in (torch.float16, torch.bfloat16, torch.float32):
            return False
        mask = plan.operands.get(_MASK)
        # torch rejects attn_mask together with is_causal, and a float mask of another dtype than
        # Q. Where a mask hides a whole row ONNX wants zeros, which torch's CUDA attention does
        # not promise, and the tuner's random masks never hide a whole row (so it could not
        # tell): on CUDA, masked layers go to the kernel.
        if mask is not None and lc.device.type == "cuda":
            return False
        return mask is None or not plan.causal and mask.type.dtype.torch == plan.dtype

    def compile(self, lc: LayerContext, config: dict[str, Any]) -> Runner:
        plan = _analyze(lc)
        index = {v.name: i for i, v in enumerate(lc.inputs)}

        def getter(v: Value | None):
            if v is None:
                return lambda inputs: None
            if lc.is_weight(v):
                w = lc.weight(v)
                return lambda inputs: w
            i = index[v.name]
            return lambda inputs: inputs[i]

        get_q, get_k, get_v, get_mask = (getter(plan.operands.get(i)) for i in (_Q, _K, _V, _MASK))
        b, s, l, hq, hk = plan.batch, plan.q_len, plan.kv_len, plan.q_heads, plan.kv_heads
        d, dv, rank = plan.head, plan.head_v, plan.rank
        kw = {"is_causal": plan.causal, "scale": plan.scale, "enable_gqa": hq != hk}
        sdpa = torch.nn.functional.scaled_dot_product_attention

        def run(inputs: list[torch.Tensor]) -> list[torch.Tensor]:
            q, k, v, mask = get_q(inputs), get_k(inputs), get_v(inputs), get_mask(inputs)
            if rank == 3:  # (reshape: the inputs may be views in any layout)
                q = q.reshape(b, s, hq, d).transpose(1, 2)
                k = k.reshape(b, l, hk, d).transpose(1, 2)
                v = v.reshape(b, l, hk, dv).transpose(1, 2)
            y = sdpa(q, k, v, attn_mask=mask, **kw)
            if rank == 3:
                y = y.transpose(1, 2).reshape(b, s, hq * dv)
            return [y]

        return run


FLASH_ATTENTION = register_tactic(FlashAttention())
TORCH_SDPA = register_tactic(TorchSdpa())
