"""Values of shape tensors at build time, traced back through the shape subgraph that made them.

`shape_value(ctx, i)` gives input i of a node as a list of dims (ints, or symbols such as 'N')
when it is a build-time constant or computed from shapes by Shape/Gather/Concat/Unsqueeze/
Squeeze/Slice/Cast nodes, so that Reshape(x, Concat(Shape(x)[0], [-1])) infers [N, ...].
"""

from __future__ import annotations

import math

import torch

from ._util import ints
from .inference import fresh_dim
from .registry import InferContext

_TRACE_DEPTH = 32


def shape_value(ctx: InferContext, i: int) -> list | None:
    """Elements of the small int input i (ints or dim symbols), or None when unknown."""
    c = ctx.const(i)
    if c is not None:
        return ints(c)
    v = ctx.node.inputs[i] if i < len(ctx.node.inputs) else None
    traced = _trace(v, ctx.node.graph, _TRACE_DEPTH)
    return None if traced is None else traced[0]


def _trace(v, graph, depth: int):
    """(elements, is_scalar) of value v computed by a shape subgraph, or None."""
    if v is None or depth == 0:
        return None
    node = v.producer
    if node is None:
        t = _initializer(v, graph)
        if t is None or t.numel() > 64 or t.dtype.is_floating_point:
            return None
        return ints(t), t.dim() == 0
    rule = _TRACE_RULES.get(node.op_type)
    if rule is None or node.domain not in ("", "ai.onnx"):
        return None
    try:
        return rule(node, graph, depth - 1)
    except (ValueError, IndexError, TypeError):
        return None


def _initializer(v, graph):
    g = graph
    while g is not None:
        if g.values.get(v.name) is v and v.name in g.initializers:
            return g.initializers[v.name]
        g = g.parent
    return None


def _trace_ints(v, graph, depth):
    r = _trace(v, graph, depth)
    if r is None or not all(isinstance(e, int) for e in r[0]):
        return None
    return r[0]


def _trace_constant(node, graph, depth):
    t = node.attrs.get("value")
    if t is None:
        t = node.attrs.get("value_int", node.attrs.get("value_ints"))
        if t is None:
            return None
        t = torch.tensor(t)
    if t.numel() > 64 or t.dtype.is_floating_point:
        return None
    return ints(t), t.dim() == 0


def _trace_shape(node, graph, depth):
    s = node.inputs[0].shape if node.inputs[0] is not None else None
    if s is None:
        return None
    start, end = shape_range(node.attrs, len(s))
    return list(s[start:end]), False


def _trace_passthrough(node, graph, depth):
    return _trace(node.inputs[0], graph, depth)


def _trace_gather(node, graph, depth):
    data = _trace(node.inputs[0], graph, depth)
    idx = _trace(node.inputs[1], graph, depth)
    if data is None or idx is None or data[1] or node.attrs.get("axis", 0) not in (0, -1):
        return None
    n = len(data[0])
    picked = [data[0][j + n if j < 0 else j] for j in idx[0]]
    return picked, idx[1]


def _trace_concat(node, graph, depth):
    out = []
    for v in node.inputs:
        r = _trace(v, graph, depth)
        if r is None:
            return None
        out += r[0]
    return out, False


def _trace_unsqueeze(node, graph, depth):
    r = _trace(node.inputs[0], graph, depth)
    return None if r is None or not r[1] else (r[0], False)


def _trace_squeeze(node, graph, depth):
    r = _trace(node.inputs[0], graph, depth)
    return None if r is None or len(r[0]) != 1 else (r[0], True)


def _trace_slice(node, graph, depth):
    data = _trace(node.inputs[0], graph, depth)
    args = [_trace_ints(v, graph, depth) if v is not None else None for v in node.inputs[1:5]]
    args += [None] * (4 - len(args))
    if data is None or args[0] is None or args[1] is None:
        return None
    if args[2] not in (None, [0], [-1]):
        return None
    step = args[3][0] if args[3] else 1
    if step < 0:
        return None
    start, end = slice_bounds(args[0][0], args[1][0], step, len(data[0]))
    return data[0][start:end:step], False


_TRACE_RULES = {
    "Constant": _trace_constant,
    "Shape": _trace_shape,
    "Identity": _trace_passthrough,
    "Cast": _trace_passthrough,
    "Gather": _trace_gather,
    "Concat": _trace_concat,
    "Unsqueeze": _trace_unsqueeze,
    "Squeeze": _trace_squeeze,
    "Slice": _trace_slice,
}


def shape_range(attrs, rank: int) -> tuple[int, int]:
    start = attrs.get("start", 0)
    end = attrs.get("end", rank)
    start = min(max(start + rank if start < 0 else start, 0), rank)
    end = min(max(end + rank if end < 0 else end, 0), rank)
    return start, end


def slice_bounds(start: int, end: int, step: int, dim: int) -> tuple[int, int]:
    """ONNX clamping of start/end for one axis (negative values count from the end)."""
    if step == 0:
        raise ValueError("Slice: step 0")
    start = start + dim if start < 0 else start
    end = end + dim if end < 0 else end
    if step > 0:
        return min(max(start, 0), dim), min(max(end, 0), dim)
    return min(max(start, 0), dim - 1), min(max(end, -1), dim - 1)


# -- arithmetic on dims that may be symbols ---------------------------------------------


def dim_product(dims) -> int | str:
    """Product of dims: an int when all are static, else a fresh symbol (or the lone symbol)."""
    static = math.prod(d for d in dims if isinstance(d, int))
    symbols = [d for d in dims if not isinstance(d, int)]
    if not symbols or static == 0:
        return static
    if len(symbols) == 1 and static == 1:
        return symbols[0]
    return fresh_dim()


def dim_sum(dims) -> int | str:
    if all(isinstance(d, int) for d in dims):
        return sum(dims)
    nonzero = [d for d in dims if d != 0]
    return nonzero[0] if len(nonzero) == 1 else fresh_dim()


def fresh_shape(rank: int) -> tuple:
    return tuple(fresh_dim() for _ in range(rank))


def static_length(ctx: InferContext, i: int) -> int | None:
    """Length of the 1-D input i when its shape is static."""
    s = ctx.shape(i)
    if s is not None and len(s) == 1 and isinstance(s[0], int):
        return s[0]
    return None
