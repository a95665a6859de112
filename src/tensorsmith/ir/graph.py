"""The IR: a Graph of Nodes connected by SSA Values.

A Value is assigned once (by a graph input, an initializer or one node output) and knows its
producer and its users, so passes never search the whole graph. Initializers (weights) live
in `Graph.initializers`, apart from the nodes.
"""

from __future__ import annotations

import itertools
from typing import Any, Iterable

import torch

from .shapes import TensorType


class Value:
    """An SSA value: one tensor produced once and read by any number of nodes."""

    __slots__ = ("name", "type", "producer", "index", "users")

    def __init__(self, name: str, type: TensorType | None = None):
        self.name = name
        self.type = type
        self.producer: Node | None = None
        self.index = 0  # which output of the producer
        self.users: list[tuple[Node, int]] = []

    @property
    def dtype(self):
        return None if self.type is None else self.type.dtype

    @property
    def shape(self):
        return None if self.type is None else self.type.shape

    def __repr__(self) -> str:
        return f"%{self.name}: {self.type}" if self.type else f"%{self.name}"


class Node:
    """One operator application. `inputs` may hold None for an omitted optional input."""

    __slots__ = ("op_type", "domain", "name", "inputs", "outputs", "attrs", "opset", "graph", "sources")

    def __init__(
        self,
        op_type: str,
        inputs: list[Value | None],
        outputs: list[Value],
        attrs: dict[str, Any] | None = None,
        name: str = "",
        domain: str = "",
        opset: int = 0,
    ):
        self.op_type = op_type
        self.domain = domain
        self.name = name
        self.inputs: list[Value | None] = []
        self.outputs: list[Value] = []
        self.attrs: dict[str, Any] = dict(attrs or {})
        self.opset = opset
        self.graph: Graph | None = None
        # Names of the source-model nodes this node stands for (grows when passes fuse or fold).
        self.sources: list[str] = [name] if name else []
        for v in inputs:
            self._add_input(v)
        for i, v in enumerate(outputs):
            v.producer, v.index = self, i
            self.outputs.append(v)

    def _add_input(self, v: Value | None) -> None:
        if v is not None:
            v.users.append((self, len(self.inputs)))
        self.inputs.append(v)

    def set_input(self, i: int, v: Value | None) -> None:
        old = self.inputs[i]
        if old is not None:
            old.users.remove((self, i))
        if v is not None:
            v.users.append((self, i))
        self.inputs[i] = v

    def subgraphs(self) -> Iterable["Graph"]:
        for a in self.attrs.values():
            if isinstance(a, Graph):
                yield a
            elif isinstance(a, list) and a and isinstance(a[0], Graph):
                yield from a

    def __repr__(self) -> str:
        return f"<Node {self.name} {self.op_type}>"


class Graph:
    """Nodes in topological order, graph inputs/outputs, and initializers kept apart."""

    def __init__(self, name: str = "graph", parent: "Graph | None" = None):
        self.name = name
        self.parent = parent
        self.inputs: list[Value] = []
        self.outputs: list[Value] = []
        self.nodes: list[Node] = []
        self.initializers: dict[str, torch.Tensor] = {}
        self.values: dict[str, Value] = {}
        self.opset_imports: dict[str, int] = dict(parent.opset_imports) if parent else {}
        self.layers: list | None = None  # list[Layer] once the graph is grouped into Layers
        self._fresh = itertools.count()

    # -- construction --------------------------------------------------------------
    def fresh_name(self, hint: str) -> str:
        name = hint
        while self.lookup(name) is not None:
            name = f"{hint}_{next(self._fresh)}"
        return name

    def new_value(self, name: str, type: TensorType | None = None) -> Value:
        v = Value(name, type)
        self.values[name] = v
        return v

    def add_input(self, name: str, type: TensorType | None) -> Value:
        v = self.new_value(name, type)
        self.inputs.append(v)
        return v

    def add_initializer(self, name: str, tensor: torch.Tensor) -> Value:
        from .dtypes import DType

        v = self.new_value(name, TensorType(DType.from_torch(tensor.dtype), tuple(tensor.shape)))
        self.initializers[name] = tensor
        return v

    def append(self, node: Node) -> Node:
        node.graph = self
        for v in node.outputs:
            self.values[v.name] = v
        self.nodes.append(node)
        return node

    def add_node(
        self,
        op_type: str,
        inputs: list[Value | None],
        num_outputs: int = 1,
        attrs: dict[str, Any] | None = None,
        name: str | None = None,
        domain: str = "",
        output_names: list[str] | None = None,
    ) -> Node:
        """Create a node with fresh output values and append it."""
        name = name or self.fresh_name(op_type.lower())
        names = output_names or [self.fresh_name(f"{name}_out{i}") for i in range(num_outputs)]
        outs = [Value(n) for n in names]
        opset = self.opset_imports.get(domain, 0)
        return self.append(Node(op_type, inputs, outs, attrs, name=name, domain=domain, opset=opset))

    # -- queries -------------------------------------------------------------------
    def lookup(self, name: str) -> Value | None:
        """The value of that name in this graph or an enclosing one."""
        g: Graph | None = self
        while g is not None:
            if name in g.values:
                return g.values[name]
            g = g.parent
        return None

    def is_initializer(self, v: Value) -> bool:
        return v.name in self.initializers and self.values.get(v.name) is v

    def insert(self, index: int, node: Node) -> Node:
        """Place a node at a position of the node list (passes insert where its inputs exist)."""
        node.graph = self
        for v in node.outputs:
            self.values[v.name] = v
        self.nodes.insert(index, node)
        return node

    def replace_all_uses(self, old: Value, new: Value) -> None:
        """Make every reader of `old` read `new`.

        A graph output keeps its name (users bind outputs by name): when `old` is one, `new`
        takes over the output and its name if `new` is a plain intermediate value; otherwise
        the output stays with `old` and its producer stays in the graph."""
        for node, i in list(old.users):
            node.set_input(i, new)
        if any(o is old for o in self.outputs) and old.producer is not None and self._is_plain_intermediate(new):
            name = old.name
            del self.values[new.name]
            del self.values[name]
            old.name = self.fresh_name(name + "_replaced")
            self.values[old.name] = old
            new.name = name
            self.values[name] = new
            self.outputs = [new if o is old else o for o in self.outputs]

    def _is_plain_intermediate(self, v: Value) -> bool:
        return (
            v.producer is not None
            and v.producer.graph is self
            and self.values.get(v.name) is v
            and not any(o is v for o in self.outputs)
        )

    def remove_node(self, node: Node) -> None:
        for i, v in enumerate(node.inputs):
            if v is not None:
                v.users.remove((node, i))
        self.nodes.remove(node)
        for v in node.outputs:
            if self.values.get(v.name) is v:
                del self.values[v.name]

    def __str__(self) -> str:
        from .printer import format_graph

        return format_graph(self)
