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

Channels-last images: the same kernel runs over the NHWC permutation of a 4-D iteration shape,
every operand permuted alike (a [N,C,1,1] scale becomes [N,1,1,C], index `offs % C` plus
`offs // (H*W*C)`), and the outputs come back as NCHW-shaped views of NHWC memory. Besides
elementwise layers, `plan_kernel`/`make_runner` serve the elementwise tail of a convolution
(epilogue.py), whose first input is the conv's output.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import torch
import triton  # noqa: F401  (no triton, no tactic: tactics/__init__ skips this module)

from ...ir import DType, Node, Value, broadcast_shapes
from ..base import (
    LayerContext,
    Runner,
    Tactic,
    binds_outputs,
    output_or_empty,
    register_tactic,
)
from .codegen import TL_DTYPE, emit_elementwise, register_dtype
from .compile import load_kernel
from .tiles import on_triton_device

KERNEL_NAME = "ts_elementwise"

# Element types this kernel loads and stores (float64 and the fp8/wide-unsigned types are left
# to other tactics).
_SUPPORTED = {DType.FLOAT32, DType.FLOAT16, DType.BFLOAT16, DType.INT8, DType.INT16, DType.INT32, DType.INT64,
              DType.UINT8, DType.BOOL}

_I32_LIMIT = 2**31 - 8192  # flat offsets (plus one BLOCK) beyond this need int64 index math
_TO_NHWC = (0, 2, 3, 1)  # an NCHW tensor's dims in NHWC memory order


class Unsupported(Exception):
    pass


@dataclass
class _Plan:
    source: str
    numel: int
    weights: list[torch.Tensor]         # loaded weights, in kernel-argument order
    out_shapes: list[tuple[int, ...]]   # as the graph has them (NCHW for a 4-D value)
    out_dtypes: list[torch.dtype]
    nhwc: bool = False                  # indexes the NHWC permutation of a 4-D iteration shape


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


def _nhwc_shape(shape: tuple[int, ...]) -> tuple[int, ...]:
    """A shape of rank <= 4, padded to 4 and permuted to NHWC order."""
    p = _pad(shape, 4)
    return tuple(p[d] for d in _TO_NHWC)


def _values(nodes: list[Node]) -> dict[str, Value]:
    """Every value the nodes read or write, by name; Unsupported for what the kernel cannot hold."""
    for n in nodes:
        if n.domain or any(True for _ in n.subgraphs()) or len(n.outputs) != 1:
            raise Unsupported(f"node {n.name}")
    values: dict[str, Value] = {}
    for n in nodes:
        for v in list(n.inputs) + list(n.outputs):
            if v is not None:
                values.setdefault(v.name, v)
    for v in values.values():
        dt = v.type.dtype if v.type is not None else None
        if dt not in _SUPPORTED:
            raise Unsupported(f"dtype {dt} of {v.name}")
    return values


def _weight_tensor(lc: LayerContext, v: Value, nhwc: bool) -> torch.Tensor:
    t = lc.weight(v).to(device=lc.device, dtype=v.type.dtype.torch)
    if nhwc:
        t = t.reshape(_pad(tuple(t.shape), 4)).permute(*_TO_NHWC)
    return t.contiguous()


def _source(nodes: list[Node], activations: list[Value], weight_vals: list[Value], outs: list[Value],
            shapes: dict[str, tuple[int, ...]], full: tuple[int, ...], scalars: dict[str, float]) -> str:
    """The kernel: loads of activations then weights, the nodes' math, the stores of `outs`;
    `shapes` and `full` are in the order the kernel iterates."""
    loads = activations + weight_vals
    numel = math.prod(full)
    dims, flags = _coalesce(full, [shapes[v.name] for v in loads] + [shapes[v.name] for v in outs])
    index = _Index(dims)

    body: list[str] = []
    env: dict[str, str] = {}
    for k, v in enumerate(loads):
        ptr = f"in{k}" if k < len(activations) else f"w{k - len(activations)}"
        off = index.offset(flags[k])
        reg = register_dtype(v.type.dtype)
        conv = "" if reg == TL_DTYPE[v.type.dtype] else f".to({reg})"
        if off is None:
            body.append(f"x{k} = tl.load({ptr}){conv}")
        else:
            body.append(f"x{k} = tl.load({ptr} + {off if off == 'offs' else '(' + off + ')'}, mask=m){conv}")
        env[v.name] = f"x{k}"
    body += emit_elementwise(nodes, env, lambda v: scalars.get(v.name))
    for k, v in enumerate(outs):
        fl = flags[len(loads) + k]
        off = index.offset(fl)
        off = "offs * 0" if off is None else off
        mask = " & ".join(["m"] + index.first_of_broadcast(fl))
        store = TL_DTYPE[v.type.dtype]
        body.append(f"tl.store(out{k} + ({off}), {env[v.name]}.to({store}), mask={mask})")

    params = ([f"in{k}" for k in range(len(activations))] + [f"w{k}" for k in range(len(weight_vals))]
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
    return "\n".join(lines) + "\n"


def plan_kernel(lc: LayerContext, nodes: list[Node], activations: list[Value], outs: list[Value],
                nhwc: bool = False) -> _Plan:
    """The kernel computing `nodes` from `activations` (its first arguments, in this order) and
    the weights the nodes read, storing `outs`; raises Unsupported (or ValueError).

    With `nhwc` the iteration shape must be 4-D and every output of it: the kernel then runs over
    the NHWC permutation, reading each operand and writing each output in NHWC memory order."""
    values = _values(nodes)
    shapes = {name: lc.shape(v) for name, v in values.items()}
    try:
        # The IR's pure-Python broadcast: torch.broadcast_shapes imports torch._refs on first
        # use (1.9 s), which made loading a ResNet-50 engine with conv tails take 2 s.
        full = tuple(broadcast_shapes(*shapes.values()))
    except ValueError as e:
        raise Unsupported(str(e)) from None
    if nhwc:
        if len(full) != 4 or any(shapes[v.name] != full for v in outs):
            raise Unsupported("NHWC order needs every output of the 4-D iteration shape")
        shapes = {name: _nhwc_shape(s) for name, s in shapes.items()}
        full = _nhwc_shape(full)
    numel = math.prod(full)
    if not outs:
        raise Unsupported("layer has no outputs")

    scalars = {name: s for name, v in values.items() if (s := _scalar_weight(lc, v)) is not None}
    weight_vals = [v for v in values.values() if lc.is_weight(v) and v.name not in scalars]
    source = _source(nodes, list(activations), weight_vals, outs, shapes, full, scalars)
    return _Plan(source, numel, [_weight_tensor(lc, v, nhwc) for v in weight_vals],
                 [lc.shape(v) for v in outs], [v.type.dtype.torch for v in outs], nhwc)


def build_plan(lc: LayerContext, nhwc: bool = False) -> _Plan:
    """The plan of an elementwise layer: its inputs in, its outputs out."""
    if lc.layer.kind != "elementwise" or not lc.nodes:
        raise Unsupported("not an elementwise layer")
    return plan_kernel(lc, lc.nodes, list(lc.inputs), list(lc.outputs), nhwc)


def _block_cap(numel: int) -> int:
    return max(512, 1 << max(0, (numel - 1).bit_length()))


def _configs_for(numel: int) -> list[dict[str, Any]]:
    if numel <= 2048:
        pairs = [(512, 4), (1024, 4)]
    elif numel <= 1 << 18:
        pairs = [(512, 4), (1024, 4), (2048, 8)]
    else:
        pairs = [(1024, 4), (2048, 4), (2048, 8), (4096, 8)]
    cap = _block_cap(numel)
    return [{"BLOCK": b, "num_warps": w} for b, w in pairs if b <= cap]


def default_config(numel: int) -> dict[str, Any]:
    """One config good enough for a memory-bound pass (8 elements a thread: 16-byte half loads),
    for callers that would rather not time several."""
    return {"BLOCK": min(1024, _block_cap(numel)), "num_warps": 4}


def _as_contiguous(t: torch.Tensor) -> torch.Tensor:
    return t if t.is_contiguous() else t.contiguous()


def _as_nhwc(t: torch.Tensor) -> torch.Tensor:
    """`t` (rank <= 4) as its NHWC permutation with contiguous memory: a view for a channels-last
    activation or a [N,C,1,1] one, a copy only for what is laid out otherwise."""
    if t.dim() < 4:
        t = t.reshape(_pad(tuple(t.shape), 4))
    return _as_contiguous(t.permute(*_TO_NHWC))


def _launcher(plan: _Plan, config: dict[str, Any], device: torch.device) -> Runner:
    kernel = load_kernel(plan.source, KERNEL_NAME)
    block = int(config.get("BLOCK", 1024))
    warps = int(config.get("num_warps", 4))
    grid = ((plan.numel + block - 1) // block,)
    weights, numel = plan.weights, plan.numel
    out_specs = list(enumerate(zip(plan.out_shapes, plan.out_dtypes)))
    # NHWC memory seen as NCHW is a channels-last tensor of the graph's shape.
    fmt = torch.channels_last if plan.nhwc else torch.contiguous_format
    arrange = _as_nhwc if plan.nhwc else _as_contiguous

    def launch(inputs: list[torch.Tensor], out: list | None = None) -> list[torch.Tensor]:
        outs = [output_or_empty(out, i, s, dt, device, fmt) for i, (s, dt) in out_specs]
        if numel:
            # Inputs in the kernel's order are views; others are copied (the only allocation
            # besides the outputs, normally none).
            kernel[grid](*[arrange(x) for x in inputs], *weights, *outs, BLOCK=block, num_warps=warps)
        return outs

    return binds_outputs(launch, [True] * len(out_specs))


def make_runner(lc: LayerContext, nodes: list[Node], activations: list[Value], outs: list[Value],
                config: dict[str, Any]) -> Runner:
    """The runner of `plan_kernel(lc, nodes, activations, outs)`: inputs are the activations' tensors;
    it writes every output into a given `out` tensor of its layout (tactics/base.py).

    Config `channels_last` adds the NHWC kernel, which runs unless every input of the output's
    shape arrives NCHW-contiguous: a channels-last build keeps its images NHWC, while 4-D tensors
    that are not images (attention scores in a hybrid network) stay NCHW without two copies."""
    nchw = _launcher(plan_kernel(lc, nodes, activations, outs), config, lc.device)
    if not config.get("channels_last"):
        return nchw
    nhwc = _launcher(plan_kernel(lc, nodes, activations, outs, nhwc=True), config, lc.device)
    full = lc.shape(outs[0])
    big = [i for i, v in enumerate(activations) if lc.shape(v) == full]

    def run(inputs: list[torch.Tensor], out: list | None = None) -> list[torch.Tensor]:
        if big and all(inputs[i].is_contiguous() for i in big):
            return nchw(inputs, out)
        return nhwc(inputs, out)

    return binds_outputs(run, [True] * len(outs))


def nhwc_applies(lc: LayerContext, nodes: list[Node], activations: list[Value], outs: list[Value]) -> bool:
    """Whether the NHWC kernel exists for these nodes (4-D outputs of the iteration shape)."""
    try:
        plan_kernel(lc, nodes, activations, outs, nhwc=True)
    except (Unsupported, ValueError):
        return False
    return True


class TritonElementwise(Tactic):
    """One kernel for an elementwise layer; the tuner decides whether it beats the reference.

    In a channels-last build (half-precision convolutions) the configs carry `channels_last`, so
    that images stay NHWC through the layer (make_runner); the flag is in the config rather than
    read from the LayerContext so that a loaded engine compiles the kernel that was timed."""

    name = "triton.elementwise"
    accepts_strided = True  # the runner copies what its kernel cannot index (make_runner)

    def applies(self, lc: LayerContext) -> bool:
        if lc.layer.kind != "elementwise" or not on_triton_device(lc):
            return False
        try:
            build_plan(lc)
        except (Unsupported, ValueError):
            return False
        return True

    def configs(self, lc: LayerContext) -> list[dict[str, Any]]:
        try:
            numel = math.prod(broadcast_shapes(*(lc.shape(v) for n in lc.nodes for v in n.outputs)))
        except (ValueError, RuntimeError):
            numel = 1 << 20
        configs = _configs_for(numel)
        if lc.activation_layout == "channels_last" and nhwc_applies(lc, lc.nodes, list(lc.inputs), list(lc.outputs)):
            configs = [{**c, "channels_last": True} for c in configs]
        return configs

    def compile(self, lc: LayerContext, config: dict[str, Any]) -> Runner:
        if lc.layer.kind != "elementwise" or not lc.nodes:
            raise Unsupported("not an elementwise layer")
        return make_runner(lc, lc.nodes, list(lc.inputs), list(lc.outputs), config)


TRITON_ELEMENTWISE = register_tactic(TritonElementwise())
