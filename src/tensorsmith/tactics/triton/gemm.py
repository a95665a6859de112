"""Triton GEMM tactic: MatMul/Gemm Layers as one tiled kernel with their epilogue fused.

The kernel is the classic one (Triton's matmul tutorial, Inductor's mm template): programs in
grouped order (GROUP_M rows of tiles share the B panel in L2), a K loop of `tl.dot` into a
float32 accumulator, then the Layer's epilogue (bias, activations, residual Add, scale Mul)
computed by codegen on the accumulator tile and stored once. An elementwise prologue on an
activation operand (e.g. the Cast of a graph input in a half build) runs on each loaded tile.

Batch dims: when B has none (a weight [K, N]), A's batch folds into M and the layer is one
GEMM; otherwise the batch is the grid's second axis (equal batch dims or a broadcast operand).
Weights are packed at compile time into the layout the kernel reads ([K, N], N contiguous).

Layer anatomy, operand loads, stores, config pools and the runner live in tiles.py, shared
with conv.py, whose implicit GEMM ends with the same epilogue.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import torch

from ...ir import Node, Value
from ..base import LayerContext, Runner, Tactic, register_tactic
from .codegen import TL_DTYPE, emit_elementwise, register_dtype
from .compile import load_kernel
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
    literal,
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

MM_POOL = [
    (128, 256, 64, 3, 8), (256, 128, 64, 3, 8), (128, 128, 64, 4, 8), (128, 128, 64, 3, 4),
    (128, 128, 32, 4, 4), (64, 128, 64, 4, 4), (128, 64, 32, 4, 4), (64, 64, 64, 4, 4),
    (64, 32, 32, 5, 2), (32, 64, 32, 5, 2),
]
# Few rows (decode-like, small batch): narrow M tiles, wide N and K.
MM_POOL_SMALL_M = [
    (16, 64, 128, 4, 4), (16, 128, 64, 4, 4), (32, 64, 64, 4, 4), (32, 128, 64, 4, 4),
    (64, 64, 64, 4, 4), (64, 128, 32, 4, 4),
]

MM_TEMPLATE = '''
import triton
import triton.language as tl


@triton.jit
def {name}(
    {pointers},
    M, N, K, MI, stride_ab, stride_am, stride_ak, stride_bb, stride_bk, stride_bn, stride_ob,
    {strides}
    BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr, GROUP_M: tl.constexpr,
    EVEN_K: tl.constexpr,{k_param}
):
    pid = tl.program_id(0)
    bid = tl.program_id(1)
    num_pid_m = tl.cdiv(M, BLOCK_M)
    num_pid_n = tl.cdiv(N, BLOCK_N)
    width = GROUP_M * num_pid_n
    first_m = (pid // width) * GROUP_M
    group_size = tl.minimum(num_pid_m - first_m, GROUP_M)
    pid_m = first_m + (pid % width) % group_size
    pid_n = (pid % width) // group_size
    offs_m = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)
    offs_n = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
    offs_k = tl.arange(0, BLOCK_K)
    a_ptrs = a_ptr + bid * stride_ab + (offs_m % M)[:, None] * stride_am + offs_k[None, :] * stride_ak
    b_ptrs = b_ptr + bid * stride_bb + offs_k[:, None] * stride_bk + (offs_n % N)[None, :] * stride_bn
    acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
    for k in range(0, {k_tiles}):
        if EVEN_K:
            a = tl.load(a_ptrs)
            b = tl.load(b_ptrs)
        else:
            a = tl.load(a_ptrs, mask=offs_k[None, :] < K - k * BLOCK_K, other=0.0)
            b = tl.load(b_ptrs, mask=offs_k[:, None] < K - k * BLOCK_K, other=0.0)
{prologue}
        acc = {dot}
        a_ptrs += BLOCK_K * stride_ak
        b_ptrs += BLOCK_K * stride_bk
    m_mask = offs_m < M
    n_mask = offs_n < N
    mask = m_mask[:, None] & n_mask[None, :]
{epilogue}
'''


@dataclass
class _Side:
    """One factor of the product as the kernel reads it."""

    value: Value          # what is loaded (the prologue's source, if any)
    prologue: Node | None
    batch_stride: int
    row_stride: int       # along M for A, along K for B
    col_stride: int       # along K for A, along N for B
    pack: Callable[[torch.Tensor], torch.Tensor] | None = None


class _MatmulProblem:
    """The geometry of a MatMul/Gemm Layer: sizes, strides, batch mode, epilogue operands."""

    def __init__(self, lc: LayerContext):
        if not on_triton_device(lc):
            raise Decline("not a CUDA device nor the interpreter")
        prologue, anchor, epilogue = split_layer(lc)
        if anchor.op_type not in ("MatMul", "Gemm") or anchor.domain:
            raise Decline("anchor is not MatMul/Gemm")
        self.anchor, self.epilogue = anchor, epilogue
        self.scalar_of = scalar_reader(lc)
        a, b = anchor.inputs[0], anchor.inputs[1]
        self.dot_dtype = a.type.dtype if a.type is not None else None
        if self.dot_dtype not in DOT_DTYPES or b.type is None or b.type.dtype != self.dot_dtype:
            raise Decline("operands are not both float16, bfloat16 or float32")
        out = anchor.outputs[0]
        self.out_shape = lc.shape(out)
        sa, sb = lc.shape(a), lc.shape(b)
        if len(sa) < 2 or len(sb) < 2 or len(self.out_shape) < 2:
            raise Decline("1-D MatMul operand")
        trans_a = anchor.op_type == "Gemm" and bool(anchor.attrs.get("transA", 0))
        trans_b = anchor.op_type == "Gemm" and bool(anchor.attrs.get("transB", 0))
        self.alpha = float(anchor.attrs.get("alpha", 1.0)) if anchor.op_type == "Gemm" else 1.0
        self.beta = float(anchor.attrs.get("beta", 1.0)) if anchor.op_type == "Gemm" else 1.0
        self.M, self.N = self.out_shape[-2:]
        self.K = sa[-2] if trans_a else sa[-1]
        batch = self.out_shape[:-2]
        self.batch = math.prod(batch)
        self.c = anchor.inputs[2] if anchor.op_type == "Gemm" and len(anchor.inputs) > 2 else None
        pro = {p.outputs[0].name: p for p in prologue}
        # A prologue on Gemm's C (the Cast of an activation bias) runs with the epilogue.
        self.c_prologue = [p for p in prologue if self.c is not None and p.outputs[0] is self.c]
        if len(pro) != len(prologue) or any(
                name not in (a.name, b.name) and not (self.c is not None and name == self.c.name) for name in pro):
            raise Decline("prologue does not feed the product's operands")
        self.a = self._side(lc, a, pro.get(a.name), batch, trans_a)
        self.b = self._side(lc, b, pro.get(b.name), batch, trans_b)
        # B shared by the whole batch and A one contiguous block: fold the batch into M.
        self.fold = self.b.batch_stride == 0 and (self.batch == 1 or (
            not trans_a and self.a.batch_stride == self.M * self.K and self.a.row_stride == self.K))
        self.rows = self.M * self.batch if self.fold else self.M
        self.grid_batch = 1 if self.fold else self.batch
        if self.grid_batch > 65535:
            raise Decline("batch too large for the grid")
        produced = {out.name} | {n.outputs[0].name for n in epilogue + self.c_prologue}
        if self.c is not None and self.beta == 0.0:
            self.c, self.c_prologue = None, []
        self.operands = external_operands(self.c_prologue, produced, self.scalar_of)
        if self.c is not None and not self.c_prologue and self.scalar_of(self.c) is None:
            self.operands.append(self.c)
        self.operands += [v for v in external_operands(epilogue, produced, self.scalar_of)
                          if not any(v is o for o in self.operands)]
        check_operand_types(lc, self.operands)
        for v in [a, b, out, *self.operands, *lc.outputs]:
            if lc.numel(v) > INT32_LIMIT:
                raise Decline("tensor too large for 32-bit offsets")
        for v in lc.outputs:
            if lc.shape(v) != self.out_shape:
                raise Decline("an output does not have the product's shape")

    def _side(self, lc: LayerContext, v: Value, prologue: Node | None, batch: tuple[int, ...], trans: bool) -> _Side:
        """How the kernel reads operand `v` (stored [..., rows, cols]; transposed when `trans`)."""
        src = v
        if prologue is not None:
            others = [x for x in prologue.inputs if x is not None and self.scalar_of(x) is None]
            if len(others) != 1 or lc.is_weight(others[0]) or lc.shape(others[0]) != lc.shape(v):
                raise Decline("prologue is not elementwise on one activation with scalars")
            src = others[0]
            if src.type is None or src.type.dtype not in DOT_DTYPES:
                raise Decline("prologue source is not a float tensor")
        shape = lc.shape(v)
        rows, cols = shape[-2:]
        pb = (1,) * (len(batch) - len(shape[:-2])) + tuple(shape[:-2])
        if len(pb) > len(batch):
            raise Decline("operand rank above the output's")
        if all(d == 1 for d in pb):
            batch_stride, packed_batch = 0, ()
        elif pb == tuple(batch):
            batch_stride, packed_batch = rows * cols, tuple(batch)
        else:
            raise Decline("partially broadcast batch dims")
        # The kernel's view of A is [M, K] and of B is [K, N]. A weight is packed into it
        # contiguously (K-contiguous A, N-contiguous B, the layouts the tutorial kernel streams).
        if lc.is_weight(v):
            dtype = self.dot_dtype.torch

            def pack(t: torch.Tensor) -> torch.Tensor:
                t = t.reshape(*packed_batch, rows, cols)
                return (t.transpose(-1, -2) if trans else t).to(dtype).contiguous()
            return _Side(v, None, batch_stride, rows if trans else cols, 1, pack)
        # Activations are read in place (contiguous [..., rows, cols]) through strides.
        if trans:
            return _Side(src, prologue, batch_stride, 1, cols)
        return _Side(src, prologue, batch_stride, cols, 1)

    def operand_offsets(self, lc: LayerContext, v: Value) -> tuple[list[int], str, str | None, str | None]:
        """(strides sb, sf, sm, sn as kernel args; base, row and column offset expressions)."""
        p = padded_shape(lc, v, self.out_shape)
        strides = broadcast_strides(p)
        pb, sm, sn = p[:-2], strides[-2], strides[-1]
        if all(d == 1 for d in pb):
            sb = 0
        elif pb == self.out_shape[:-2]:
            sb = p[-2] * p[-1]
        else:
            raise Decline(f"operand {v.name}: partially broadcast batch dims")
        i = self.operands.index(v)
        col = f"offs_n * x{i}_sn" if sn else None
        if not self.fold or self.batch == 1 or sb == self.M * sm:
            row = f"offs_m * x{i}_sm" if sm else None
            base = f" + bid * x{i}_sb" if sb and not self.fold else ""
            return [sb, 0, sm, sn], base, row, col
        # Folded batch that the operand does not follow row by row: split the row index.
        terms = ([f"(offs_m // MI) * x{i}_sf"] if sb else []) + ([f"(offs_m % MI) * x{i}_sm"] if sm else [])
        return [0, sb, sm, sn], "", " + ".join(terms) or None, col


def _prologue_lines(side: _Side, var: str, dot: str, scalar_of) -> list[str]:
    if side.prologue is None:
        return []
    env = {side.value.name: var}
    lines = [f"{var} = {var}.to({register_dtype(side.value.type.dtype)})"]
    try:
        lines += emit_elementwise([side.prologue], env, scalar_of, prefix=f"p{var}")
    except ValueError as e:
        raise Decline(str(e)) from None
    res = env[side.prologue.outputs[0].name]
    mask = "offs_k[None, :]" if var == "a" else "offs_k[:, None]"
    # Masked-off K elements must stay 0 whatever the prologue makes of a 0 (exp(0) = 1).
    lines += ["if EVEN_K:", f"    {var} = ({res}).to({dot})", "else:",
              f"    {var} = tl.where({mask} < K - k * BLOCK_K, {res}, 0.0).to({dot})"]
    return lines


def _gemm_source(lc: LayerContext, p: _MatmulProblem, name: str, config: dict[str, Any]) -> tuple[str, Binding]:
    binding = Binding()
    pointers = [f"out{i}_ptr" for i in range(len(lc.outputs))] + ["a_ptr", "b_ptr"]
    binding.value(lc, p.a.value, p.a.pack)
    binding.value(lc, p.b.value, p.b.pack)
    dot = TL_DTYPE[p.dot_dtype]
    pro = _prologue_lines(p.a, "a", dot, p.scalar_of) + _prologue_lines(p.b, "b", dot, p.scalar_of)
    env = {p.anchor.outputs[0].name: "acc"}
    lines, strides, stride_ints = [], [], []
    for i, v in enumerate(p.operands):
        pointers.append(f"x{i}_ptr")
        binding.value(lc, v)
        s, base, row, col = p.operand_offsets(lc, v)
        strides.append(f"x{i}_sb, x{i}_sf, x{i}_sm, x{i}_sn,")
        stride_ints += s
        lines.append(load_line(f"x{i}", f"x{i}_ptr", base, row, col, v))
        env[v.name] = f"x{i}"
    if p.alpha != 1.0:
        lines.append(f"acc = acc * {literal(p.alpha)}")
    if p.c_prologue:
        try:
            lines += emit_elementwise(p.c_prologue, env, p.scalar_of, prefix="c")
        except ValueError as e:
            raise Decline(str(e)) from None
    if p.c is not None:
        c = env.get(p.c.name) or literal(p.scalar_of(p.c))
        lines.append(f"acc = acc + {c}" if p.beta == 1.0 else f"acc = acc + {literal(p.beta)} * {c}")
    lines += emit_epilogue(lc, p.epilogue, env, p.scalar_of, "bid * stride_ob + offs_m[:, None] * N + offs_n[None, :]")
    k_tiles, k_param = loop_count(lc, "tl.cdiv(K, BLOCK_K)", "K_TILES")
    src = MM_TEMPLATE.format(
        name=name, k_tiles=k_tiles, k_param=k_param, pointers=", ".join(pointers), strides=" ".join(strides),
        prologue="\n".join("        " + ln for ln in pro), dot=dot_call(lc, p.dot_dtype, config, "a", "b"),
        epilogue="\n".join("    " + ln for ln in lines))
    binding.ints = [p.rows, p.N, p.K, p.M,
                    0 if p.fold else p.a.batch_stride, p.a.row_stride, p.a.col_stride,
                    0 if p.fold else p.b.batch_stride, p.b.row_stride, p.b.col_stride,
                    0 if p.fold else p.M * p.N, *stride_ints]
    return src, binding


class TritonGemm(Tactic):
    name = "triton.gemm"

    def applies(self, lc: LayerContext) -> bool:
        try:
            _gemm_source(lc, _MatmulProblem(lc), "probe", {})
        except (Decline, ValueError, KeyError):
            return False
        return True

    def configs(self, lc: LayerContext) -> list[dict[str, Any]]:
        p = _MatmulProblem(lc)
        pool = MM_POOL_SMALL_M if p.rows <= 64 else MM_POOL
        # Large problems: the 8-warp 256/128-wide tiles (what wgmma wants on Hopper) come first.
        configs = pick_configs(pool, p.rows, p.N, p.K, p.dot_dtype.itemsize, limit=8)
        return fp32_configs(lc, p.dot_dtype, configs, torch.backends.cuda.matmul.allow_tf32)

    def compile(self, lc: LayerContext, config: dict[str, Any]) -> Runner:
        p = _MatmulProblem(lc)
        src, binding = _gemm_source(lc, p, "gemm_kernel", config)
        kernel = load_kernel(src, "gemm_kernel")
        bm, bn, bk = config["BLOCK_M"], config["BLOCK_N"], config["BLOCK_K"]
        grid = (triton_cdiv(p.rows, bm) * triton_cdiv(p.N, bn), p.grid_batch)
        consts = {"BLOCK_M": bm, "BLOCK_N": bn, "BLOCK_K": bk, "GROUP_M": config.get("GROUP_M", 8),
                      "EVEN_K": p.K % bk == 0, "num_warps": config.get("num_warps", 4),
                      "num_stages": config.get("num_stages", 3)}
        if lc.device.type != "cuda":
            consts["K_TILES"] = triton_cdiv(p.K, bk)
        return make_runner(lc, kernel, binding, grid, consts)


TRITON_GEMM = register_tactic(TritonGemm())
