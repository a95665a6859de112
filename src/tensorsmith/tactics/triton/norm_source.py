"""The Triton source of a triton.norm kernel, from a Plan (norm_plan.py) and a config (BLOCK, ROWS).

A program handles ROWS rows, BLOCK columns at a time: when BLOCK >= R the row stays in registers
(one pass over memory), otherwise each statistic is a loop over the row and the result one more.
Trailing reduced axes give plain `row * R + col` addressing; a middle axis gives strided columns.
Statistics are float32. The Layer's prologue is recomputed wherever the row is loaded and its
epilogue is fused into the store, both written by codegen.emit_elementwise.

Kept apart from the tactic (norm.py) because the text is a pure function of its inputs, and a
byte of it changed is a new kernel: compile.py names each source by its hash.
"""

from __future__ import annotations

from ...ir import Value
from .codegen import TL_DTYPE, emit_elementwise, register_dtype
from .norm_plan import REDUCTIONS, Access, Plan, broadcast_strides, to_domain

KERNEL_NAME = "norm_kernel"


def kernel_source(plan: Plan, block: int, rows: int) -> str:
    """The module text defining the `@triton.jit` function KERNEL_NAME for `plan` at this config."""
    return _Source(plan, block, rows).text()


def _index(idx: str, sizes: tuple[int, ...], strides: tuple[int, ...]) -> str:
    """Offset expression of flat index `idx` over axes `sizes` for a tensor with `strides`."""
    merged: list[list[int]] = []
    for n, s in zip(sizes, strides):
        if n == 1:
            continue
        if merged and merged[-1][1] == s * n:  # the outer axis continues the inner one: one axis
            merged[-1] = [merged[-1][0] * n, s]
        else:
            merged.append([n, s])
    terms, inner = [], 1
    for k in range(len(merged) - 1, -1, -1):
        n, s = merged[k]
        if s:
            t = idx if inner == 1 else f"({idx} // {inner})"
            if k > 0:
                t = f"({t} % {n})"
            terms.append(t if s == 1 else f"{t} * {s}")
        inner *= n
    return " + ".join(reversed(terms)) if terms else f"{idx} * 0"


def _load(acc: Access, offset: str, mask: str) -> str:
    other = "0.0" if acc.dtype.is_float else "0"
    return f"tl.load({acc.arg} + ({offset}), mask={mask}, other={other}).to({register_dtype(acc.dtype)})"


class _Source:
    """Builds the kernel text for a plan and a config."""

    def __init__(self, plan: Plan, block: int, rows: int):
        self.p, self.BLOCK, self.ROWS = plan, block, rows
        self.lines: list[str] = []
        self.row_vars: dict[tuple, str] = {}
        self.row_sizes, self.col_sizes = plan.axis_sizes()
        contiguous = broadcast_strides(plan.out_shape, plan.out_shape)
        self.out = Access("out", to_domain(contiguous, plan.axis_split) if not plan.reduces else contiguous,
                           plan.out_dtype)

    def emit(self, indent: int, *lines: str) -> None:
        self.lines.extend("    " * indent + ln for ln in lines)

    def row_offset(self, acc: Access) -> str:
        """The variable holding a tile access's per-row offsets (emitted once, before any loop)."""
        key = (acc.arg, acc.strides)
        if key not in self.row_vars:
            var = self.row_vars[key] = f"ro{len(self.row_vars)}"
            self.emit(1, f"{var} = {_index('rows', self.row_sizes, self.p.split(acc.strides)[0])}")
        return self.row_vars[key]

    def tile_load(self, acc: Access) -> str:
        """A [ROWS, BLOCK] load; [1, BLOCK] for tensors the same in every row (scale, bias...)."""
        row_strides, col_strides = self.p.split(acc.strides)
        col = _index("cols", self.col_sizes, col_strides)
        if not any(row_strides):
            return _load(acc, f"({col})[None, :]", "cmask[None, :]")
        return _load(acc, self.tile_offset(acc), "mask")

    def tile_offset(self, acc: Access) -> str:
        col = _index("cols", self.col_sizes, self.p.split(acc.strides)[1])
        return f"{self.row_offset(acc)}[:, None] + ({col})[None, :]"

    def row_tile(self, indent: int, k: int) -> str:
        """Lines loading the columns `cols` and computing the anchor's row input; its variable."""
        self.emit(indent, "cmask = cols < R", "mask = rmask[:, None] & cmask[None, :]")
        env = {}
        for i, (name, acc) in enumerate(self.p.tile.items()):
            env[name] = f"t{i}"
            self.emit(indent, f"t{i} = {self.tile_load(acc)}")
        self.emit(indent, *emit_elementwise(self.p.prologue, env, self.scalar_of, prefix=f"q{k}_"))
        return env[self.p.x_name]

    def scalar_of(self, v: Value) -> float | None:
        return self.p.scalars.get(v.name)

    def text(self) -> str:
        p = self.p
        args = [f"p{i}" for i in range(len(p.args))] + ["out"]
        self.emit(0, "import triton", "import triton.language as tl", "", "",
                  "@triton.jit", f"def {KERNEL_NAME}({', '.join(args)}):")
        self.emit(1, f"ROWS: tl.constexpr = {self.ROWS}", f"BLOCK: tl.constexpr = {self.BLOCK}",
                  f"M: tl.constexpr = {p.M}", f"R: tl.constexpr = {p.R}",
                  "rows = tl.program_id(0) * ROWS + tl.arange(0, ROWS)", "rmask = rows < M")
        tile_accesses = [*p.tile.values(), *p.params.values()] + ([] if p.reduces else [*p.epi.values(), self.out])
        for acc in tile_accesses:
            if any(self.p.split(acc.strides)[0]) or acc is self.out:
                self.row_offset(acc)
        single = self.BLOCK >= p.R
        if single:
            self.emit(1, "cols = tl.arange(0, BLOCK)")
            x = self.row_tile(1, 0)
        stats = _STATS[REDUCTIONS.get(p.op, p.op)]
        for k, (init, update, finish) in enumerate(stats):
            self.emit(1, *init)
            if single:
                self.emit(1, *[u.format(x=x) for u in update])
            else:
                self.emit(1, "for c0 in range(0, R, BLOCK):", "    cols = c0 + tl.arange(0, BLOCK)")
                xk = self.row_tile(2, k)
                self.emit(2, *[u.format(x=xk) for u in update])
            self.emit(1, *[f.format(eps=repr(p.eps)) for f in finish])
        if p.reduces:
            self.reduce_store()
        elif single:
            self.norm_store(1, x)
        else:
            self.emit(1, "for c0 in range(0, R, BLOCK):", "    cols = c0 + tl.arange(0, BLOCK)")
            self.norm_store(2, self.row_tile(2, len(stats)))
        return "\n".join(self.lines) + "\n"

    def epilogue(self, indent: int, first: str, load) -> str:
        """Lines computing the epilogue from the anchor's result `first`; the result's variable."""
        p = self.p
        env = {p.anchor_out: first}
        for i, (name, acc) in enumerate(p.epi.items()):
            env[name] = f"e{i}"
            self.emit(indent, f"e{i} = {load(acc)}")
        self.emit(indent, *emit_elementwise(p.epilogue, env, self.scalar_of, prefix="z"))
        return env[p.epilogue[-1].outputs[0].name] if p.epilogue else first

    def norm_store(self, indent: int, x: str) -> None:
        p = self.p
        params = {k: f"w_{k}" for k in p.params}
        for k, acc in p.params.items():
            self.emit(indent, f"w_{k} = {self.tile_load(acc)}")
        self.emit(indent, _NORM_OUT[p.op].format(x=x, affine=_affine(params)))
        res = self.epilogue(indent, "y", self.tile_load)
        self.emit(indent, f"tl.store(out + ({self.tile_offset(self.out)}), {res}.to({TL_DTYPE[p.out_dtype]}), "
                          "mask=mask)")

    def reduce_store(self) -> None:
        p = self.p
        res = self.epilogue(1, "r", lambda acc: _load(acc, _index("rows", p.out_sizes, acc.strides), "rmask"))
        self.emit(1, f"tl.store(out + rows, {res}.to({TL_DTYPE[p.out_dtype]}), mask=rmask)")


# Per statistic: (init lines, update lines over the tile {x}, finish lines), each a pass over the row.
_MEAN = (["acc = tl.zeros([ROWS, BLOCK], dtype=tl.float32)"],
         ["acc += tl.where(cmask[None, :], {x}, 0.0)"],
         ["mean = tl.sum(acc, axis=1) / R"])
_VAR = (["acc2 = tl.zeros([ROWS, BLOCK], dtype=tl.float32)"],
        ["d = tl.where(cmask[None, :], {x} - mean[:, None], 0.0)", "acc2 += d * d"],
        ["rstd = 1.0 / tl.sqrt(tl.sum(acc2, axis=1) / R + {eps})"])
_MS = (["acc = tl.zeros([ROWS, BLOCK], dtype=tl.float32)"],
       ["d = tl.where(cmask[None, :], {x}, 0.0)", "acc += d * d"],
       ["rstd = 1.0 / tl.sqrt(tl.sum(acc, axis=1) / R + {eps})"])
# Online softmax statistics: running max m and sum s of exp(x - m); -inf rows stay NaN-free here.
_SOFTMAX = (["m = tl.full([ROWS], float('-inf'), tl.float32)", "s = tl.zeros([ROWS], dtype=tl.float32)"],
            ["xm = tl.where(cmask[None, :], {x}, float('-inf'))",
             "m_new = tl.maximum(m, tl.max(xm, axis=1))",
             "m_safe = tl.where(m_new == float('-inf'), 0.0, m_new)",
             "s = s * tl.exp(m - m_safe) + tl.sum(tl.exp(xm - m_safe[:, None]), axis=1)",
             "m = m_new"],
            [])


def _acc(init: str, update: str, finish: str):
    return ([f"acc = tl.full([ROWS, BLOCK], {init}, tl.float32)"], [update], [finish])


_STATS = {
    "LayerNormalization": [_MEAN, _VAR], "GroupNormalization": [_MEAN, _VAR],
    "InstanceNormalization": [_MEAN, _VAR], "RMSNormalization": [_MS],
    "Softmax": [_SOFTMAX], "LogSoftmax": [_SOFTMAX],
    "sum": [_acc("0.0", "acc += tl.where(cmask[None, :], {x}, 0.0)", "r = tl.sum(acc, axis=1)")],
    "mean": [_acc("0.0", "acc += tl.where(cmask[None, :], {x}, 0.0)", "r = tl.sum(acc, axis=1) / R")],
    "sumsq": [_acc("0.0", "acc += tl.where(cmask[None, :], {x} * {x}, 0.0)", "r = tl.sum(acc, axis=1)")],
    "l1": [_acc("0.0", "acc += tl.where(cmask[None, :], tl.abs({x}), 0.0)", "r = tl.sum(acc, axis=1)")],
    "l2": [_acc("0.0", "acc += tl.where(cmask[None, :], {x} * {x}, 0.0)", "r = tl.sqrt(tl.sum(acc, axis=1))")],
    "max": [_acc("float('-inf')", "acc = tl.maximum(acc, tl.where(cmask[None, :], {x}, float('-inf')))",
                 "r = tl.max(acc, axis=1)")],
    "min": [_acc("float('inf')", "acc = tl.minimum(acc, tl.where(cmask[None, :], {x}, float('inf')))",
                 "r = tl.min(acc, axis=1)")],
    "lse": [(_SOFTMAX[0], _SOFTMAX[1], ["r = m + tl.log(s)"])],
}


def _affine(params: dict[str, str]) -> str:
    return "".join(f" * {params['scale']}" if k == "scale" else f" + {params['bias']}" for k in params)


_CENTERED = "y = ({x} - mean[:, None]) * rstd[:, None]{affine}"
_NORM_OUT = {
    "LayerNormalization": _CENTERED, "GroupNormalization": _CENTERED, "InstanceNormalization": _CENTERED,
    "RMSNormalization": "y = {x} * rstd[:, None]{affine}",
    "Softmax": "y = tl.exp({x} - m[:, None]) / s[:, None]",
    "LogSoftmax": "y = {x} - m[:, None] - tl.log(s)[:, None]",
}
