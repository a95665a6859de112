"""Chains of Reshape/Transpose/Squeeze/Unsqueeze/Flatten, simplified as one permutation.

Exporters write data movement as long chains: torch's MultiheadAttention gives packed
projection -> Reshape -> Unsqueeze -> Transpose -> Squeeze -> select -> Reshape -> Transpose ->
Reshape per head tensor. On the GPU a Reshape of a transposed tensor copies, so ViT-B/16 ran 66
copy kernels per call for these chains (0.81 ms of 3.94 at batch 32). Any such chain equals:
split the input into *atoms* (the finest factors of its dims that the chain moves as units),
permute the atoms, merge them into the output dims. `analyze_chain` computes that form and
`emit_chain` writes it as at most Reshape -> Transpose -> Reshape, which at run time is a view
of the input whenever the last Reshape only splits dims.

Two more rewrites let chains meet and cancel: a row-wise op (MatMul with a constant weight, an
elementwise op with a constant that broadcasts along the last dim) commutes with any shuffle of
its rows, so `rowwise_shuffle_sinking` moves the row permutation of a chain below it; and a
Gemm fed by a chain becomes MatMul + Add, so the rule applies to it.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import torch

from ..ir import Graph, Node, Value
from .manager import register_pass
from .recognize import is_live
from .rewrite import (
    add_constant,
    constant_value,
    forward,
    is_graph_output,
    new_node,
    remove_dead,
    source_names,
)

CHAIN_OPS = frozenset(("Reshape", "Transpose", "Squeeze", "Unsqueeze", "Flatten"))
ROWWISE_UNARY = frozenset(("Relu", "Gelu", "Erf", "Sigmoid", "Tanh", "Cast", "Neg", "Abs", "Sqrt", "Exp"))
ROWWISE_BINARY = frozenset(("Add", "Sub", "Mul", "Div"))


@dataclass
class ChainForm:
    """A chain as: `src` (the input's atoms, major to minor) permuted into `dims` (each output
    dim a list of atoms, major to minor; a dim of size 1 has none)."""

    sizes: dict[int, int] = field(default_factory=dict)
    src: list[int] = field(default_factory=list)
    dims: list[list[int]] = field(default_factory=list)

    def atom(self, size: int) -> int:
        a = len(self.sizes)
        self.sizes[a] = size
        return a

    def order(self) -> list[int]:
        return [a for d in self.dims for a in d]

    def out_shape(self) -> list[int]:
        return [math.prod(self.sizes[a] for a in d) for d in self.dims]

    def row_order(self) -> list[int]:
        return [a for d in self.dims[:-1] for a in d]


def _static(v: Value | None) -> list[int] | None:
    t = v.type if v is not None else None
    if t is None or t.shape is None or not all(isinstance(d, int) for d in t.shape):
        return None
    return list(t.shape)


def _reshape(form: ChainForm, shape: list[int]) -> bool:
    """Regroup the atoms (in their current order) into `shape`, splitting atoms where a new dim
    boundary falls inside one. False if the boundaries do not divide the atoms."""
    flat = form.order()
    dims: list[list[int]] = []
    pos = 0
    for size in shape:
        group: list[int] = []
        need = size
        while need > 1:
            if pos >= len(flat):
                return False
            a = flat[pos]
            n = form.sizes[a]
            if need % n == 0:
                group.append(a)
                need //= n
                pos += 1
            elif n % need == 0:
                hi, lo = form.atom(need), form.atom(n // need)
                i = form.src.index(a)
                form.src[i:i + 1] = [hi, lo]
                flat[pos:pos + 1] = [hi, lo]
                group.append(hi)
                need = 1
                pos += 1
            else:
                return False
        dims.append(group)
    if pos != len(flat):
        return False
    form.dims = dims
    return True


def analyze_chain(x: Value, nodes: list[Node]) -> ChainForm | None:
    """The atom form of `nodes` (a chain of CHAIN_OPS applied to `x`), or None if a shape is
    not static or a Reshape cuts across factors that no atom split can express."""
    shape = _static(x)
    if shape is None:
        return None
    form = ChainForm()
    form.dims = [[] if d == 1 else [form.atom(d)] for d in shape]
    form.src = form.order()
    for node in nodes:
        out = _static(node.outputs[0])
        if out is None:
            return None
        if node.op_type == "Transpose":
            perm = node.attrs.get("perm") or list(reversed(range(len(form.dims))))
            if len(perm) != len(form.dims):
                return None
            form.dims = [form.dims[p] for p in perm]
        elif not _reshape(form, out):  # Reshape, Squeeze, Unsqueeze, Flatten keep row-major order
            return None
        if form.out_shape() != out:
            return None
    return form


def _steps(x: Value, form: ChainForm) -> list[tuple[str, list[int]]]:
    """The canonical ops of `form` on `x`: ("Reshape", shape) to the atoms, ("Transpose", perm),
    ("Reshape", shape) to the output, each only when it changes something."""
    steps = []
    atom_shape = [form.sizes[a] for a in form.src]
    if _static(x) != atom_shape:
        steps.append(("Reshape", atom_shape))
    order = form.order()
    perm = [form.src.index(a) for a in order]
    if perm != sorted(perm):
        steps.append(("Transpose", perm))
    if [form.sizes[a] for a in order] != form.out_shape():
        steps.append(("Reshape", form.out_shape()))
    return steps


def emit_chain(graph: Graph, index: int, x: Value, form: ChainForm, sources: list[str]) -> tuple[Value, int]:
    """Write `form` applied to `x` at `index` (see `_steps`). Returns the result and the number
    of nodes written."""
    v = x
    steps = _steps(x, form)
    for i, (op, arg) in enumerate(steps):
        if op == "Transpose":
            node = new_node(graph, index + i, op, [v], {"perm": arg}, sources=list(sources), name="transpose")
        else:
            shape = add_constant(graph, "shape", torch.tensor(arg, dtype=torch.int64))
            node = new_node(graph, index + i, op, [v, shape], sources=list(sources), name="reshape")
        v = node.outputs[0]
    return v, len(steps)


def _chain_into(graph: Graph, v: Value) -> tuple[Value, list[Node]]:
    """The longest chain of CHAIN_OPS ending in `v` whose intermediate values only it reads."""
    nodes: list[Node] = []
    while True:
        p = v.producer
        if p is None or p.op_type not in CHAIN_OPS or p.domain or p.graph is not graph:
            break
        if nodes and (len(v.users) != 1 or is_graph_output(graph, v)):
            break
        nodes.insert(0, p)
        v = p.inputs[0]
    return v, nodes


@register_pass("shuffle_chain_simplification", 2,
               "Reshape/Transpose/Squeeze/Unsqueeze/Flatten chains -> at most Reshape, Transpose, Reshape")
def shuffle_chain_simplification(graph: Graph) -> bool:
    changed = False
    for node in list(graph.nodes):
        if node.op_type not in CHAIN_OPS or node.domain or node.graph is not graph or not is_live(graph, node):
            continue
        out = node.outputs[0]
        reader = out.users[0][0] if len(out.users) == 1 else None
        if reader is not None and reader.op_type in CHAIN_OPS and not is_graph_output(graph, out):
            continue  # not the end of its chain
        x, nodes = _chain_into(graph, out)
        if len(nodes) < 2:
            continue
        form = analyze_chain(x, nodes)
        if form is None:
            continue
        steps = _steps(x, form)
        if form.out_shape() == _static(x) and not any(op == "Transpose" for op, _ in steps):
            changed |= forward(graph, out, x)  # the chain undoes itself
        elif len(steps) < len(nodes):
            new, _ = emit_chain(graph, graph.nodes.index(nodes[0]), x, form, source_names(nodes))
            changed |= forward(graph, out, new)
        else:
            continue
        remove_dead(graph, nodes)
    return changed


# -- row-wise ops ------------------------------------------------------------------------------

def _rowwise_operand(graph: Graph, node: Node) -> int | None:
    """Which input of `node` carries the rows, if `node` acts on each row (last dim) alike."""
    if node.domain or node.graph is not graph or len(node.outputs) != 1:
        return None
    if node.op_type == "MatMul":
        w = constant_value(graph, node.inputs[1])
        return 0 if w is not None and w.dim() == 2 and constant_value(graph, node.inputs[0]) is None else None
    if node.op_type in ROWWISE_UNARY:
        return 0
    if node.op_type in ROWWISE_BINARY and len(node.inputs) == 2:
        for i in (0, 1):
            c = constant_value(graph, node.inputs[1 - i])
            x = node.inputs[i]
            if c is None or constant_value(graph, x) is not None or x.type is None or x.type.rank is None:
                continue
            if c.dim() <= 1 or (c.dim() <= x.type.rank and all(d == 1 for d in c.shape[:-1])):
                return i
    return None


def _row_moving_chain(graph: Graph, a: Value) -> tuple[Value, list[Node], ChainForm, list[int]] | None:
    """(x, chain, its form, the row atoms in x's order) if `a`, read by one row-wise op only,
    is a chain of `x` that reorders rows (not just the last dim)."""
    if len(a.users) != 1 or is_graph_output(graph, a):
        return None
    x, chain = _chain_into(graph, a)
    if not chain or _static(a) is None:
        return None
    form = analyze_chain(x, chain)
    if form is None or not form.dims or not form.dims[-1]:
        return None
    rows = [s for s in form.src if s not in form.dims[-1]]
    if form.row_order() == rows:
        return None  # the rows keep their order: nothing to move
    return x, chain, form, rows


@register_pass("rowwise_shuffle_sinking", 2,
               "a row-wise op (MatMul by a weight, elementwise with a per-column constant) after a chain that "
               "permutes rows -> the op first, the row permutation after it")
def rowwise_shuffle_sinking(graph: Graph) -> bool:
    changed = False
    for node in list(graph.nodes):
        i = _rowwise_operand(graph, node) if is_live(graph, node) else None
        if i is None:
            continue
        a = node.inputs[i]
        found = _row_moving_chain(graph, a)
        if found is None:
            continue
        x, chain, form, rows = found
        if node.op_type in ROWWISE_BINARY and constant_value(graph, node.inputs[1 - i]).dim() > len(rows) + 1:
            continue  # the constant's rank would add dims to the op's output
        changed |= _sink(graph, node, i, x, chain, form, rows)
    return changed


def _sink(graph: Graph, node: Node, i: int, x: Value, chain: list[Node], form: ChainForm, rows: list[int]) -> bool:
    index = graph.nodes.index(node)
    sources = source_names(chain)
    before = ChainForm(dict(form.sizes), list(form.src), [[r] for r in rows] + [form.dims[-1]])
    v, n = emit_chain(graph, index, x, before, sources)
    inputs = list(node.inputs)
    inputs[i] = v
    op = new_node(graph, index + n, node.op_type, inputs, dict(node.attrs), sources=list(node.sources), name=node.name)
    width = _static(op.outputs[0])[-1]
    after = ChainForm(dict(form.sizes), list(rows), [list(d) for d in form.dims])
    after.dims[-1] = []
    if width != 1:
        col = after.atom(width)
        after.src.append(col)
        after.dims[-1] = [col]
    out, _ = emit_chain(graph, index + n + 1, op.outputs[0], after, sources)
    changed = forward(graph, node.outputs[0], out)
    remove_dead(graph, [*chain, node])
    return changed


@register_pass("gemm_to_matmul", 2, "Gemm whose A comes from a Reshape/Transpose chain -> MatMul + Add (so the "
                                    "chain's row permutation can move past it)")
def gemm_to_matmul(graph: Graph) -> bool:
    changed = False
    for node in list(graph.nodes):
        if node.op_type != "Gemm" or node.domain or node.graph is not graph:
            continue
        a, b = node.inputs[0], node.inputs[1]
        c = node.inputs[2] if len(node.inputs) > 2 else None
        if node.attrs.get("transA", 0) or _row_moving_chain(graph, a) is None:
            continue
        w = constant_value(graph, b)
        bias = constant_value(graph, c) if c is not None else None
        if w is None or (c is not None and (bias is None or bias.dim() > 1)):
            continue
        if node.attrs.get("alpha", 1.0) != 1.0 or (c is not None and node.attrs.get("beta", 1.0) != 1.0):
            continue
        index = graph.nodes.index(node)
        sources = list(node.sources)
        if node.attrs.get("transB", 0):
            b = new_node(graph, index, "Transpose", [b], {"perm": [1, 0]}, sources=sources).outputs[0]
            index += 1
        y = new_node(graph, index, "MatMul", [a, b], sources=sources, name=node.name).outputs[0]
        if c is not None:
            y = new_node(graph, index + 1, "Add", [y, c], sources=sources, name=node.name).outputs[0]
        changed |= forward(graph, node.outputs[0], y)
        remove_dead(graph, [node])
    return changed
