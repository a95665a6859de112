"""triton.elementwise: a whole elementwise Layer (a DAG of elementwise nodes) as ONE kernel.

One pass over memory: each program handles BLOCK consecutive elements of the iteration shape
(the broadcast of every value in the layer, normally the largest output's shape), loads each
input once, computes every node in registers (float math in float32, see codegen.py) and
stores every layer output.

Broadcasting is index math from the flat output index, with all sizes baked into the source:
the iteration shape's dims are coalesced where every operand broadcasts alike, so a [C,1,1]
bias against [N,C,H,W] becomes dims (N, C, H*W) and its offset `(offs // HW) % C`; operands of
the full shape use `offs` directly, and an operand broadcast everywhere is one scalar load.
Outputs smaller than the iteration shape (a multi-output layer) are stored where their
broadcast indices are 0, so each of their elements is written once.

Scalar float weights are inlined as literals; other weights are loaded like inputs (bound at
compile time). Bool tensors are `*i1` pointers (Triton stores them as bytes).
"""

from __future__ import annotations

import math
import os
from dataclasses import dataclass
from typing import Any

import torch
import triton  # noqa: F401  (no triton, no tactic: tactics/__init__ skips this module)

from ...ir import DType, Value
from ..base import LayerContext, Runner, Tactic, register_tactic
from .codegen import TL_DTYPE, emit_elementwise, register_dtype
from .compile import load_kernel

KERNEL_NAME = "ts_elementwise"

# Element types this kernel loads and stores (float64 and the fp8/wide-unsigned types are left
# to other tactics).
_SUPPORTED = {DType.FLOAT32, DType.FLOAT16, DType.BFLOAT16, DType.INT8, DType.INT16, DType.INT32, DType.INT64,
              DType.UINT8, DType.BOOL}

_I32_LIMIT = 2**31 - 8192  # flat offsets (plus one BLOCK) beyond this need int64 index math


class Unsupported(Exception):
    pass


@dataclass
class _Plan:
    source: str
    numel: int
    in_names: list[str]                 # lc.inputs order
    weights: list[torch.Tensor]         # loaded weights, in kernel-argument order
    out_shapes: list[tuple[int, ...]]
    out_dtypes: list[torch.dtype]


def _device_ok(lc: LayerContext) -> bool:
    if lc.device.type == "cuda":
        return True
    return os.environ.get("TRITON_INTERPRET") == "1"


def _pad(shape: tuple[int, ...], rank: int) -> tuple[int, ...]:
    return (1,) * (rank - len(shape)) + tuple(shape)


def _coalesce(full: tuple[int, ...], shapes: list[tuple[int, ...]]) -> tuple[list[int], list[list[bool]]]:
    """Dims of `full` (size-1 dims dropped, neighbours merged where every operand broadcasts
    alike) and, per operand, whether it broadcasts along each of those dims."""
    rank = len(full)
    padded = [_pad(s, rank) for s in shapes]
    dims: list[int] = []
    flags: list[list[bool]] = [[] for _ in shapes]
    for d in range(rank):
        if full[d] == 1:
            continue
        f = [p[d] == 1 for p in padded]
        if dims and all(flags[k][-1] == f[k] for k in range(len(shapes))):
            dims[-1] *= full[d]
            continue
        dims.append(full[d])
        for k in range(len(shapes)):
            flags[k].append(f[k])
    return dims, flags


class _Index:
    """Index expressions over the flat iteration offset `offs`, shared between operands."""

    def __init__(self, dims: list[int]):
        self.dims = dims
        self.inner = [math.prod(dims[j + 1:]) for j in range(len(dims))]
        self.lines: list[str] = []
        self._vars: dict[str, str] = {}

    def run(self, j0: int, j1: int) -> str:
        """The index of dims j0..j1 (consecutive) taken together, as a variable."""
        expr = "offs"
        if self.inner[j1] != 1:
            expr = f"({expr} // {self.inner[j1]})"
        if j0 != 0:
            expr = f"({expr} % {math.prod(self.dims[j0:j1 + 1])})"
        if expr == "offs":
            return expr
        if expr not in self._vars:
            name = f"i{len(self._vars)}"
            self._vars[expr] = name
            self.lines.append(f"{name} = {expr}")
        return self._vars[expr]

    @staticmethod
    def _runs(flags: list[bool], want: bool) -> list[tuple[int, int]]:
        runs, j = [], 0
        while j < len(flags):
            if flags[j] == want:
                k = j
                while k + 1 < len(flags) and flags[k + 1] == want:
                    k += 1
                runs.append((j, k))
                j = k + 1
            else:
                j += 1
        return runs

    def offset(self, flags: list[bool]) -> str | None:
        """The operand's element offset, or None when it broadcasts along every dim (a scalar)."""
        if not any(flags):
            return "offs"
        runs = self._runs(flags, False)
        if not runs:
            return None
        terms = []
        for j0, j1 in runs:
            stride = math.prod(self.dims[m] for m in range(j1 + 1, len(self.dims)) if not flags[m])
            idx = self.run(j0, j1)
            terms.append(idx if stride == 1 else f"{idx} * {stride}")
        return " + ".join(terms)

    def first_of_broadcast(self, flags: list[bool]) -> list[str]:
        """Conditions that the operand's broadcast indices are all 0 (where a smaller output is stored)."""
        return [f"({self.run(j0, j1)} == 0)" for j0, j1 in self._runs(flags, True)]


def _scalar_weight(lc: LayerContext, v: Value) -> float | None:
    if not lc.is_weight(v):
        return None
    t = lc.weight(v)
    if t.numel() != 1 or not t.dtype.is_floating_point:
        return None
    return float(t.reshape(()).item())


def build_plan(lc: LayerContext) -> _Plan:
    """The kernel source and launch data for the layer; raises Unsupported (or ValueError)."""
    if lc.layer.kind != "elementwise" or not lc.nodes:
        raise Unsupported("not an elementwise layer")
    for n in lc.nodes:
        if n.domain or any(True for _ in n.subgraphs()) or len(n.outputs) != 1:
            raise Unsupported(f"node {n.name}")

    values: dict[str, Value] = {}
    for n in lc.nodes:
        for v in list(n.inputs) + list(n.outputs):
            if v is not None:
                values.setdefault(v.name, v)
    for v in values.values():
        dt = v.type.dtype if v.type is not None else None
        if dt not in _SUPPORTED:
            raise Unsupported(f"dtype {dt} of {v.name}")
    shapes = {name: lc.shape(v) for name, v in values.items()}
    try:
        full = tuple(torch.broadcast_shapes(*shapes.values()))
    except RuntimeError as e:
        raise Unsupported(str(e)) from None
    numel = math.prod(full)

    scalars = {name: s for name, v in values.items() if (s := _scalar_weight(lc, v)) is not None}
    weight_vals = [v for v in lc.layer.weights(lc.graph) if v.name not in scalars]
    loads = list(lc.inputs) + weight_vals
    outs = list(lc.outputs)
    if not outs:
        raise Unsupported("layer has no outputs")

    dims, flags = _coalesce(full, [shapes[v.name] for v in loads] + [shapes[v.name] for v in outs])
    index = _Index(dims)

    body: list[str] = []
    env: dict[str, str] = {}
    for k, v in enumerate(loads):
        ptr = f"in{k}" if k < len(lc.inputs) else f"w{k - len(lc.inputs)}"
        off = index.offset(flags[k])
        reg = register_dtype(v.type.dtype)
        conv = "" if reg == TL_DTYPE[v.type.dtype] else f".to({reg})"
        if off is None:
            body.append(f"x{k} = tl.load({ptr}){conv}")
        else:
            body.append(f"x{k} = tl.load({ptr} + {off if off == 'offs' else '(' + off + ')'}, mask=m){conv}")
        env[v.name] = f"x{k}"
    body += emit_elementwise(lc.nodes, env, lambda v: scalars.get(v.name))
    for k, v in enumerate(outs):
        fl = flags[len(loads) + k]
        off = index.offset(fl)
        off = "offs * 0" if off is None else off
        mask = " & ".join(["m"] + index.first_of_broadcast(fl))
        store = TL_DTYPE[v.type.dtype]
        body.append(f"tl.store(out{k} + ({off}), {env[v.name]}.to({store}), mask={mask})")

    params = ([f"in{k}" for k in range(len(lc.inputs))] + [f"w{k}" for k in range(len(weight_vals))]
              + [f"out{k}" for k in range(len(outs))] + ["BLOCK: tl.constexpr"])
    pid = "tl.program_id(0).to(tl.int64)" if numel > _I32_LIMIT else "tl.program_id(0)"
    lines = [
        "import triton",
        "import triton.language as tl",
        "",
        "",
        "@triton.jit",
        f"def {KERNEL_NAME}({', '.join(params)}):",
        f"    offs = {pid} * BLOCK + tl.arange(0, BLOCK)",
        f"    m = offs < {numel}",
    ]
    lines += ["    " + l for l in index.lines + body]
    source = "\n".join(lines) + "\n"

    weights = []
    for v in weight_vals:
        t = lc.weight(v)
        t = t.to(device=lc.device, dtype=v.type.dtype.torch).contiguous()
        weights.append(t)
    return _Plan(source, numel, [v.name for v in lc.inputs], weights,
                 [shapes[v.name] for v in outs], [v.type.dtype.torch for v in outs])


def _configs_for(numel: int) -> list[dict[str, Any]]:
    if numel <= 2048:
        pairs = [(512, 4), (1024, 4)]
    elif numel <= 1 << 18:
        pairs = [(512, 4), (1024, 4), (2048, 8)]
    else:
        pairs = [(1024, 4), (2048, 4), (2048, 8), (4096, 8)]
    cap = max(512, 1 << max(0, (numel - 1).bit_length()))
    return [{"BLOCK": b, "num_warps": w} for b, w in pairs if b <= cap]


class TritonElementwise(Tactic):
    """One kernel for an elementwise layer; the tuner decides whether it beats the reference."""

    name = "triton.elementwise"

    def applies(self, lc: LayerContext) -> bool:
        if lc.layer.kind != "elementwise" or not _device_ok(lc):
            return False
        try:
            build_plan(lc)
        except (Unsupported, ValueError):
            return False
        return True

    def configs(self, lc: LayerContext) -> list[dict[str, Any]]:
        try:
            numel = math.prod(torch.broadcast_shapes(*(lc.shape(v) for n in lc.nodes for v in n.outputs)))
        except (ValueError, RuntimeError):
            numel = 1 << 20
        return _configs_for(numel)

    def compile(self, lc: LayerContext, config: dict[str, Any]) -> Runner:
        plan = build_plan(lc)
        kernel = load_kernel(plan.source, KERNEL_NAME)
        block = int(config.get("BLOCK", 1024))
        warps = int(config.get("num_warps", 4))
        grid = ((plan.numel + block - 1) // block,)
        weights = plan.weights
        out_specs = list(zip(plan.out_shapes, plan.out_dtypes))
        device = lc.device
        numel = plan.numel

        def run(inputs: list[torch.Tensor]) -> list[torch.Tensor]:
            outs = [torch.empty(s, dtype=dt, device=device) for s, dt in out_specs]
            if numel == 0:
                return outs
            # Activations arrive contiguous; a strided view is copied (the only allocation
            # besides the outputs; layer outputs are contiguous, so normally none).
            xs = [x if x.is_contiguous() else x.contiguous() for x in inputs]
            kernel[grid](*xs, *weights, *outs, BLOCK=block, num_warps=warps)
            return outs

        return run


TRITON_ELEMENTWISE = register_tactic(TritonElementwise())
