"""The IR Graph as plain data (JSON-able dicts) plus a table of tensors, and back.

`graph_to_data(graph, tensors)` describes nodes (op, domain, opset, name, sources, inputs,
outputs, attributes), value types, initializers, subgraphs (recursively) and Layers; every
tensor (initializer or tensor attribute) goes into `tensors` under a key the data names.
`graph_from_data(data, tensors)` rebuilds an equal Graph. Nothing here evaluates code: an
attribute is one of a closed set of tagged kinds, and anything else is a decoding error.

Decoding trusts nothing: a malformed document raises `ValueError`/`KeyError`/`TypeError`,
which the engine loader turns into a typed error naming the file.
"""

from __future__ import annotations

from typing import Any

import torch

from ..ir import DType, Graph, Layer, Node, TensorType, Value


# -- encoding ------------------------------------------------------------------------
class _Tensors:
    """Tensor table for one document: each distinct tensor stored once, under a readable key."""

    def __init__(self, out: dict[str, torch.Tensor]):
        self.out = out
        self.by_id: dict[int, str] = {}
        self.storages: set[int] = set()

    def add(self, hint: str, t: torch.Tensor) -> str:
        if id(t) in self.by_id:
            return self.by_id[id(t)]
        original = t
        key = hint
        k = 0
        while key in self.out:
            k += 1
            key = f"{hint}#{k}"
        t = t.detach()
        if t.device.type != "cpu":
            t = t.cpu()
        ptr = t.untyped_storage().data_ptr() if t.numel() else None
        if not t.is_contiguous() or (ptr is not None and ptr in self.storages):
            t = t.contiguous().clone()  # safetensors refuses tensors that share memory
        if ptr is not None:
            self.storages.add(t.untyped_storage().data_ptr())
        self.out[key] = t
        self.by_id[id(original)] = key
        return key


def encode_type(t: TensorType | None) -> dict | None:
    if t is None:
        return None
    return {"dtype": t.dtype.value if t.dtype is not None else None,
            "shape": list(t.shape) if t.shape is not None else None}


def decode_type(d: Any) -> TensorType | None:
    if d is None:
        return None
    dtype = DType(d["dtype"]) if d["dtype"] is not None else None
    shape = d["shape"]
    if shape is not None:
        if not isinstance(shape, list) or not all(isinstance(x, (int, str)) and not isinstance(x, bool) for x in shape):
            raise ValueError(f"bad shape {shape!r}")
        shape = tuple(shape)
    return TensorType(dtype, shape)


def _encode_attr(a: Any, tensors: _Tensors, hint: str) -> dict:
    if isinstance(a, bool):
        return {"bool": a}
    if isinstance(a, int):
        return {"int": a}
    if isinstance(a, float):
        return {"float": a}
    if isinstance(a, str):
        return {"str": a}
    if a is None:
        return {"none": None}
    if isinstance(a, torch.Tensor):
        return {"tensor": tensors.add(hint, a)}
    if isinstance(a, Graph):
        return {"graph": _encode_graph(a, tensors, hint + "/")}
    if isinstance(a, TensorType):
        return {"type": encode_type(a)}
    if isinstance(a, DType):
        return {"dtype": a.value}
    if isinstance(a, (list, tuple)):
        items = [_encode_attr(x, tensors, f"{hint}.{i}") for i, x in enumerate(a)]
        return {"list" if isinstance(a, list) else "tuple": items}
    if isinstance(a, dict) and all(isinstance(k, str) for k in a):
        return {"dict": {k: _encode_attr(v, tensors, f"{hint}.{k}") for k, v in a.items()}}
    raise TypeError(f"cannot store an attribute of type {type(a).__name__} ({hint})")


def _decode_attr(d: Any, tensors: dict[str, torch.Tensor], parent: Graph) -> Any:
    if not isinstance(d, dict) or len(d) != 1:
        raise ValueError(f"bad attribute {str(d)[:80]}")
    (kind, v), = d.items()
    if kind in ("bool", "int", "float", "str"):
        want = {"bool": bool, "int": int, "float": (float, int), "str": str}[kind]
        if not isinstance(v, want) or (kind != "bool" and isinstance(v, bool)):
            raise ValueError(f"attribute of kind {kind} holds {type(v).__name__}")
        return float(v) if kind == "float" else v
    if kind == "none":
        return None
    if kind == "tensor":
        return tensors[v]
    if kind == "graph":
        return _decode_graph(v, tensors, parent)
    if kind == "type":
        return decode_type(v)
    if kind == "dtype":
        return DType(v)
    if kind in ("list", "tuple"):
        items = [_decode_attr(x, tensors, parent) for x in v]
        return items if kind == "list" else tuple(items)
    if kind == "dict":
        return {str(k): _decode_attr(x, tensors, parent) for k, x in v.items()}
    raise ValueError(f"unknown attribute kind '{kind}'")


def _encode_graph(g: Graph, tensors: _Tensors, prefix: str) -> dict:
    types: dict[str, Any] = {}
    for v in g.inputs:
        types[v.name] = encode_type(v.type)
    inits = {}
    for name, t in g.initializers.items():
        inits[name] = tensors.add(prefix + name, t)
        v = g.values.get(name)
        types[name] = encode_type(v.type if v is not None else None)
    nodes = []
    index = {id(n): i for i, n in enumerate(g.nodes)}
    for i, n in enumerate(g.nodes):
        for v in n.outputs:
            types[v.name] = encode_type(v.type)
        nodes.append({
            "op_type": n.op_type, "domain": n.domain, "opset": n.opset, "name": n.name,
            "sources": list(n.sources),
            "inputs": [v.name if v is not None else None for v in n.inputs],
            "outputs": [v.name for v in n.outputs],
            "attrs": {k: _encode_attr(a, tensors, f"{prefix}{n.name}.{k}") for k, a in n.attrs.items()},
        })
    for v in g.outputs:
        types.setdefault(v.name, encode_type(v.type))
    data = {
        "name": g.name, "opset_imports": dict(g.opset_imports),
        "inputs": [v.name for v in g.inputs], "outputs": [v.name for v in g.outputs],
        "initializers": inits, "types": types, "nodes": nodes, "layers": None,
    }
    if g.layers is not None:
        data["layers"] = [{
            "name": layer.name, "kind": layer.kind, "nodes": [index[id(n)] for n in layer.nodes],
            "anchor": index[id(layer.anchor)] if layer.anchor is not None else None,
            "attrs": {k: _encode_attr(a, tensors, f"{prefix}{layer.name}.{k}") for k, a in layer.attrs.items()},
        } for layer in g.layers]
    return data


def graph_to_data(graph: Graph, tensors: dict[str, torch.Tensor]) -> dict:
    """Describe `graph` as JSON-able data; its tensors are added to `tensors` (CPU, contiguous).

    Top-level initializers are stored under their own names, so a weights file reads plainly."""
    return _encode_graph(graph, _Tensors(tensors), "")


# -- decoding ------------------------------------------------------------------------
def _decode_graph(d: dict, tensors: dict[str, torch.Tensor], parent: Graph | None) -> Graph:
    g = Graph(str(d["name"]), parent=parent)
    g.opset_imports = {str(k): int(v) for k, v in d["opset_imports"].items()}
    types = d["types"]
    for name, key in d["initializers"].items():
        t = tensors[key]
        if not isinstance(t, torch.Tensor):
            raise TypeError(f"initializer '{name}' is not a tensor")
        g.add_initializer(name, t)
    for name in d["inputs"]:
        g.add_input(str(name), decode_type(types.get(name)))
    for nd in d["nodes"]:
        attrs = {str(k): _decode_attr(a, tensors, g) for k, a in nd["attrs"].items()}
        inputs: list[Value | None] = []
        for name in nd["inputs"]:
            if name is None:
                inputs.append(None)
                continue
            v = g.lookup(name)
            if v is None:
                raise ValueError(f"node '{nd['name']}' reads '{name}', which is not defined before it")
            inputs.append(v)
        outs = []
        for name in nd["outputs"]:
            if not isinstance(name, str) or name in g.values:
                raise ValueError(f"node '{nd['name']}' output {name!r} is not a fresh name")
            outs.append(Value(name, decode_type(types.get(name))))
        node = Node(str(nd["op_type"]), inputs, outs, attrs, name=str(nd["name"]), domain=str(nd["domain"]),
                    opset=int(nd["opset"]))
        node.sources = [str(s) for s in nd["sources"]]
        g.append(node)
    for name in d["outputs"]:
        v = g.lookup(name)
        if v is None:
            raise ValueError(f"graph output '{name}' is not defined")
        g.outputs.append(v)
    if d.get("layers") is not None:
        g.layers = [Layer(
            str(ld["name"]), str(ld["kind"]), [g.nodes[_index(i)] for i in ld["nodes"]],
            g.nodes[_index(ld["anchor"])] if ld["anchor"] is not None else None,
            {str(k): _decode_attr(a, tensors, g) for k, a in ld["attrs"].items()},
        ) for ld in d["layers"]]
    return g


def _index(i: Any) -> int:
    if not isinstance(i, int) or isinstance(i, bool) or i < 0:
        raise ValueError(f"bad node index {i!r}")
    return i


def graph_from_data(data: dict, tensors: dict[str, torch.Tensor]) -> Graph:
    """Rebuild the Graph `graph_to_data` described; tensors are used as they are (not copied)."""
    return _decode_graph(data, tensors, None)


def copy_graph(graph: Graph) -> Graph:
    """A structural copy of `graph` that shares its tensors (to specialize shapes without touching it)."""
    tensors: dict[str, torch.Tensor] = {}
    table = _Tensors(tensors)
    table.add = _sharing_add(table)  # no clone, no move: the copy reads the same weights
    return graph_from_data(_encode_graph(graph, table, ""), tensors)


def _sharing_add(table: _Tensors):
    def add(hint: str, t: torch.Tensor) -> str:
        if id(t) in table.by_id:
            return table.by_id[id(t)]
        key = f"{hint}#{len(table.out)}"
        table.out[key] = t
        table.by_id[id(t)] = key
        return key
    return add
