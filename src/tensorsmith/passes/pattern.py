"""A small pattern language for rewrites: match a tree of ops that ends in a value.

    x = Var("x")
    silu = Op("Mul", x, Op("Sigmoid", x), commutative=True)
    m = match(silu, value, graph)        # -> Match with m["x"] (a Value) or None

`Var` matches any value and binds it (a name used twice must bind the same value);
`Const` matches a weight, optionally with a predicate on its tensor; `Op` matches the
producer of a value by op type, optional attribute predicate, and its inputs in order (or in
either order for commutative binary ops). `Op(..., bind="name")` binds the matched node.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Callable

import torch

from ..ir import Graph, Node, Value
from .rewrite import constant_value


class Pattern:
    pass


@dataclass
class Var(Pattern):
    name: str


@dataclass
class Const(Pattern):
    name: str | None = None
    where: Callable[[torch.Tensor], bool] | None = None


@dataclass
class Op(Pattern):
    op_type: str | tuple[str, ...]
    inputs: tuple = ()
    commutative: bool = False
    attrs: Callable[[Node], bool] | None = None
    bind: str | None = None

    def __init__(self, op_type, *inputs, commutative=False, attrs=None, bind=None):
        self.op_type, self.inputs, self.commutative, self.attrs, self.bind = op_type, inputs, commutative, attrs, bind


@dataclass
class Match:
    values: dict[str, Value] = field(default_factory=dict)
    consts: dict[str, torch.Tensor] = field(default_factory=dict)
    nodes: dict[str, Node] = field(default_factory=dict)
    matched: list[Node] = field(default_factory=list)  # every node of the pattern, root last

    def __getitem__(self, name: str) -> Any:
        if name in self.values:
            return self.values[name]
        if name in self.consts:
            return self.consts[name]
        return self.nodes[name]

    def sources(self) -> list[str]:
        out: list[str] = []
        for n in self.matched:
            out.extend(s for s in n.sources if s not in out)
        return out


def match(p: Pattern, v: Value | None, graph: Graph) -> Match | None:
    m = Match()
    return m if v is not None and _match(p, v, graph, m) else None


def _match(p: Pattern, v: Value | None, graph: Graph, m: Match) -> bool:
    if v is None:
        return False
    if isinstance(p, Var):
        bound = m.values.get(p.name)
        if bound is None:
            m.values[p.name] = v
            return True
        return bound is v
    if isinstance(p, Const):
        t = constant_value(graph, v)
        if t is None or (p.where is not None and not p.where(t)):
            return False
        if p.name:
            m.values[p.name] = v
            m.consts[p.name] = t
        return True
    assert isinstance(p, Op)
    node = v.producer
    types = p.op_type if isinstance(p.op_type, tuple) else (p.op_type,)
    if node is None or node.graph is not graph or node.op_type not in types or node.domain:
        return False
    if p.attrs is not None and not p.attrs(node):
        return False
    orders = [list(p.inputs)]
    if p.commutative and len(p.inputs) == 2:
        orders.append([p.inputs[1], p.inputs[0]])
    for order in orders:
        trial = Match(dict(m.values), dict(m.consts), dict(m.nodes), list(m.matched))
        if len(node.inputs) < len(order):
            continue
        if all(_match(sub, node.inputs[i], graph, trial) for i, sub in enumerate(order)):
            if p.bind:
                trial.nodes[p.bind] = node
            trial.matched.append(node)
            m.values, m.consts, m.nodes, m.matched = trial.values, trial.consts, trial.nodes, trial.matched
            return True
    return False


def scalar(value: float, rel: float = 1e-3) -> Callable[[torch.Tensor], bool]:
    """A predicate: the weight is one number (any shape of size 1) close to `value`."""

    def check(t: torch.Tensor) -> bool:
        if t.numel() != 1 or not t.dtype.is_floating_point and t.dtype not in (torch.int64, torch.int32):
            return False
        x = float(t.reshape(-1)[0])
        return abs(x - value) <= rel * max(1.0, abs(value))

    return check


def is_scalar(t: torch.Tensor) -> bool:
    return t.numel() == 1
