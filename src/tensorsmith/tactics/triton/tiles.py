"""What the tiled matrix-product templates (gemm.py, conv.py) share: which layers they decline,
tf32/ieee dot settings, operand loads with broadcast strides, fused epilogues through
codegen, config pools and the runner that launches a compiled kernel."""

from __future__ import annotations

import math
import os
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import torch

from ...ir import DType, Node, Value
from ..base import LayerContext, Runner, binds_outputs, output_or_empty
from .codegen import TL_DTYPE, emit_elementwise, register_dtype

DOT_DTYPES = {DType.FLOAT16, DType.BFLOAT16, DType.FLOAT32}
INT32_LIMIT = 2**31 - 1


class Decline(Exception):
    """The layer has something this kernel does not handle (`applies` says False)."""


def on_triton_device(lc: LayerContext) -> bool:
    if lc.device.type == "cuda":
        return True
    return lc.device.type == "cpu" and os.environ.get("TRITON_INTERPRET") == "1"


def fp32_configs(lc: LayerContext, dtype: DType, configs: list[dict[str, Any]], tf32: bool) -> list[dict[str, Any]]:
    """Float32 configs carry the `tl.dot` precision: TF32 where the build allows it (precision
    'tf32' sets torch's allow_tf32 while tuning), else 3xTF32 (near-float32 accuracy on tensor
    cores), so that an engine loaded later compiles the kernel that was checked."""
    if dtype != DType.FLOAT32 or lc.device.type != "cuda":
        return configs
    return [{**c, "input_precision": "tf32" if tf32 else "tf32x3"} for c in configs]


def dot_call(lc: LayerContext, dtype: DType, config: dict[str, Any], a: str, b: str) -> str:
    """The `tl.dot` accumulating `a @ b` into `acc`, with the precision of the operand dtype."""
    if lc.device.type != "cuda":
        # The interpreter multiplies bfloat16 wrongly (numpy has no bfloat16): widen first.
        if dtype == DType.BFLOAT16:
            a, b = f"{a}.to(tl.float32)", f"{b}.to(tl.float32)"
        prec = "" if dtype == DType.FLOAT16 else ', input_precision="ieee"'
        return f"tl.dot({a}, {b}, acc{prec})"
    if dtype != DType.FLOAT32:
        return f"tl.dot({a}, {b}, acc)"
    prec = config.get("input_precision", "tf32x3")
    if prec not in ("tf32", "tf32x3", "ieee"):
        raise ValueError(f"unknown input_precision {prec!r}")
    return f'tl.dot({a}, {b}, acc, input_precision="{prec}")'


def loop_count(lc: LayerContext, expr: str, name: str) -> tuple[str, str]:
    """(loop bound, extra constexpr parameter) for a loop whose trip count is `expr`.

    The interpreter cannot take a runtime bound (with numpy 2 it fails to turn the 1-element
    argument array into an int), so there the count is a constexpr `name` the runner passes;
    a GPU kernel keeps it a runtime value so that one compiled kernel serves every size.
    """
    if lc.device.type == "cuda":
        return expr, ""
    return name, f" {name}: tl.constexpr,"


def literal(x: float) -> str:
    """A float as Triton source (inf and nan have no literal)."""
    x = float(x)
    return repr(x) if math.isfinite(x) else f"float('{x}')"


def split_layer(lc: LayerContext) -> tuple[list[Node], Node, list[Node]]:
    """(prologue nodes, anchor, epilogue nodes) of an anchored Layer."""
    anchor = lc.anchor
    if anchor is None or anchor not in lc.nodes:
        raise Decline("no anchor")
    i = lc.nodes.index(anchor)
    return lc.nodes[:i], anchor, lc.nodes[i + 1:]


def scalar_reader(lc: LayerContext) -> Callable[[Value], float | None]:
    """Scalar (one-element) float weights are inlined into the kernel as literals."""
    def scalar_of(v: Value) -> float | None:
        t = lc.weights.get(v.name)
        if t is None or t.numel() != 1 or not (t.dtype.is_floating_point or t.dtype == torch.bool):
            return None
        return float(t.reshape(-1)[0])
    return scalar_of


def external_operands(nodes: list[Node], produced: set[str], scalar_of) -> list[Value]:
    """Tensors the epilogue reads besides the chain: residuals, biases, scales (scalars inlined)."""
    out: list[Value] = []
    for n in nodes:
        for v in n.inputs:
            if v is None or v.name in produced or scalar_of(v) is not None or any(o is v for o in out):
                continue
            out.append(v)
    return out


def padded_shape(lc: LayerContext, v: Value, out_shape: tuple[int, ...]) -> tuple[int, ...]:
    """The shape of `v` right-aligned to `out_shape` (ones in front); Decline if it does not broadcast."""
    s = lc.shape(v)
    if len(s) > len(out_shape):
        raise Decline(f"operand {v.name} has a higher rank than the output")
    p = (1,) * (len(out_shape) - len(s)) + tuple(s)
    if any(a not in (1, b) for a, b in zip(p, out_shape)):
        raise Decline(f"operand {v.name} {s} does not broadcast to {out_shape}")
    return p


def contiguous_strides(shape: tuple[int, ...]) -> list[int]:
    strides, acc = [], 1
    for d in reversed(shape):
        strides.append(acc)
        acc *= d
    return strides[::-1]


def broadcast_strides(shape: tuple[int, ...]) -> list[int]:
    """Strides of a contiguous tensor of `shape`, 0 along its size-1 (broadcast) dims."""
    return [0 if d == 1 else s for d, s in zip(shape, contiguous_strides(shape))]


def load_line(var: str, ptr: str, base: str, row: str | None, col: str | None, v: Value) -> str:
    """`var = tl.load(...)` of an operand tile: a scalar, a column, a row or a full 2-D tile."""
    reg = register_dtype(v.type.dtype)
    base = f"{ptr}{base}"
    if row and col:
        expr = f"tl.load({base} + ({row})[:, None] + ({col})[None, :], mask=mask, other=0)"
    elif row:
        expr = f"tl.load({base} + ({row}), mask=m_mask, other=0)[:, None]"
    elif col:
        expr = f"tl.load({base} + ({col}), mask=n_mask, other=0)[None, :]"
    else:
        expr = f"tl.load({base})"
    return f"{var} = {expr}.to({reg})"


def check_operand_types(lc: LayerContext, operands: list[Value]) -> None:
    for v in operands:
        if v.type is None or v.type.dtype is None or register_dtype(v.type.dtype) is None:
            raise Decline(f"operand {v.name} has no Triton type")
        if v.type.dtype == DType.FLOAT64:
            raise Decline("float64 operand")
    for v in lc.outputs:
        if v.type is None or v.type.dtype not in DOT_DTYPES:
            raise Decline(f"output {v.name} is not float16/bfloat16/float32")


def emit_epilogue(lc: LayerContext, epilogue: list[Node], env: dict[str, str], scalar_of, out_off: str) -> list[str]:
    """Epilogue math (codegen) and the stores of every Layer output at `out_off` (a [BLOCK_M, BLOCK_N] offset)."""
    try:
        lines = emit_elementwise(epilogue, env, scalar_of, prefix="e")
    except ValueError as e:
        raise Decline(str(e)) from None
    for i, v in enumerate(lc.outputs):
        if v.name not in env:
            raise Decline(f"output {v.name} is not computed by the epilogue")
        lines.append(f"tl.store(out{i}_ptr + {out_off}, ({env[v.name]}).to({TL_DTYPE[v.type.dtype]}), mask=mask)")
    return lines


@dataclass
class Binding:
    """How to build the kernel's arguments at run time: pointers then integers."""

    # ("in", index into the runner's inputs) or ("w", a thunk giving the packed weight)
    pointers: list[tuple[str, Any]] = field(default_factory=list)
    ints: list[int] = field(default_factory=list)

    def value(self, lc: LayerContext, v: Value, pack: Callable[[torch.Tensor], torch.Tensor] | None = None):
        if lc.is_weight(v):
            t = lc.weight(v)
            self.pointers.append(("w", lambda: (pack(t) if pack else t).contiguous()))
        else:
            self.pointers.append(("in", [x.name for x in lc.inputs].index(v.name)))


def make_runner(lc: LayerContext, kernel, binding: Binding, grid: tuple[int, ...], consts: dict[str, Any]) -> Runner:
    """The runner of a compiled kernel; it writes its (contiguous) outputs into given `out` tensors."""
    out_specs = list(enumerate((lc.shape(v), v.type.dtype.torch) for v in lc.outputs))
    device = lc.device
    slots = [("out", i) for i in range(len(out_specs))]
    slots += [(kind, x() if kind == "w" else x) for kind, x in binding.pointers]
    ints = list(binding.ints)
    launch = kernel[grid]

    def run(inputs: list[torch.Tensor], out: list | None = None) -> list[torch.Tensor]:
        outs = [output_or_empty(out, i, shape, dt, device) for i, (shape, dt) in out_specs]
        args = [outs[x] if kind == "out" else inputs[x] if kind == "in" else x for kind, x in slots]
        launch(*args, *ints, **consts)
        return outs

    return binds_outputs(run, [True] * len(out_specs))


def fit_block(block: int, size: int) -> int:
    """A block no larger than the dimension needs (powers of two, at least 16 for tl.dot)."""
    return min(block, max(16, triton_next_pow2(size)))


def triton_next_pow2(n: int) -> int:
    return 1 << max(0, (n - 1).bit_length())


def pick_configs(pool, m: int, n: int, k: int, itemsize: int, limit: int = 6) -> list[dict[str, Any]]:
    """Configs of `pool` (BLOCK_M, BLOCK_N, BLOCK_K, num_stages, num_warps) shrunk to the problem,
    deduplicated, and kept within shared memory (~200 KB on H100/H200)."""
    out: list[dict[str, Any]] = []
    for bm, bn, bk, stages, warps in pool:
        bm, bn, bk = fit_block(bm, m), fit_block(bn, n), fit_block(bk, k)
        if itemsize == 4:
            bk, stages = min(bk, 32), min(stages, 3)
        while stages > 2 and stages * (bm * bk + bk * bn) * itemsize > 200 * 1024:
            stages -= 1
        if bm * bn <= 64 * 64:
            warps = min(warps, 4)
        c = {"BLOCK_M": bm, "BLOCK_N": bn, "BLOCK_K": bk, "GROUP_M": 8, "num_warps": warps, "num_stages": stages}
        if c not in out:
            out.append(c)
    return out[:limit]


# == GEMM ==================================================================================

# (BLOCK_M, BLOCK_N, BLOCK_K, num_stages, num_warps): Triton's matmul tutorial and Inductor's mm
# configs; large tiles first, shrunk to the problem by pick_configs.


def triton_cdiv(a: int, b: int) -> int:
    return -(-a // b)
