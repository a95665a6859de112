"""Precision: every node computes in one float type, the build's or a per-node override's
(TensorRT's --fp16/--bf16 and --layerPrecisions).

`convert_precision` gives each node a compute dtype: that of the last `layer_precisions`
pattern matching it (fnmatch, case-sensitive, against the node's name and the model node names
it stands for), else the build's. Then
- weights (initializers, Constant nodes) are stored in the dtype their readers compute in; a
  weight read in two dtypes is stored twice;
- a float32 value read by a node of another compute dtype goes through a Cast, one per value
  and dtype (graph inputs too: only the readers that need it pay);
- Casts to float32 inside half nodes cast to the half type instead;
- graph outputs keep the model's declared dtype (a Cast back at the end);
- parameter inputs (Resize scales/roi, and the like) stay float32; ints and bools are never cast.
Only what the model computes in float32 changes: a model's own float16 tensors stay as they are.
Kernels still accumulate reductions and normalizations in float32.
"""

from __future__ import annotations

import logging
from fnmatch import fnmatchcase
from typing import Mapping

import torch

from ..errors import PrecisionError
from ..ir import DType, Graph, Node, TensorType, Value
from ..ops.inference import infer_graph
from .rewrite import infer_types, is_graph_output, new_node, source_names

log = logging.getLogger("tensorsmith.build")

#: The precisions a per-Layer override may name.
LAYER_PRECISIONS = {"fp32": DType.FLOAT32, "fp16": DType.FLOAT16, "bf16": DType.BFLOAT16}
_HALF = (DType.FLOAT16, DType.BFLOAT16)

# (op, input index) pairs whose float32 tensors are parameters, not data.
_KEEP_FLOAT32 = {("Resize", 1), ("Resize", 2), ("Upsample", 1), ("RoiAlign", 1), ("GridSample", 1),
                 ("Range", 0), ("Range", 1), ("Range", 2), ("AffineGrid", 0)}
# Readers whose result does not depend on the float type of an activation they read (only on
# its shape, or they cast it anyway): a Cast in front of them would be a copy for nothing.
_ANY_FLOAT_INPUT = {"Shape", "Size", "Cast"}


def parse_layer_precisions(layer_precisions: Mapping[str, str] | None) -> dict[str, DType]:
    """{glob pattern: DType} from {pattern: "fp32" | "fp16" | "bf16"}; a PrecisionError names a bad entry."""
    out: dict[str, DType] = {}
    for pattern, name in (layer_precisions or {}).items():
        if not isinstance(pattern, str) or not pattern:
            raise PrecisionError(f"layer_precisions has the key {pattern!r}; keys are glob patterns of node names "
                                 "(e.g. '*LayerNorm*')")
        if name not in LAYER_PRECISIONS:
            raise PrecisionError(f"layer_precisions['{pattern}'] = {name!r} is not a precision; choose one of "
                                 f"{list(LAYER_PRECISIONS)}")
        out[pattern] = LAYER_PRECISIONS[name]
    return out


def node_precisions(graph: Graph, default: DType, layer_precisions: Mapping[str, str] | None = None,
                    strict: bool = False) -> dict[Node, DType]:
    """Each node's compute dtype: the last pattern of `layer_precisions` that matches the node's
    name or one of its `sources`, else `default`. A pattern matching nothing is a PrecisionError
    when `strict`, a warning otherwise."""
    overrides = parse_layer_precisions(layer_precisions)
    matched = dict.fromkeys(overrides, 0)
    compute: dict[Node, DType] = {}
    for node in graph.nodes:
        names = [node.name, *node.sources]
        compute[node] = default
        for pattern, dtype in overrides.items():
            if any(fnmatchcase(n, pattern) for n in names):
                compute[node] = dtype
                matched[pattern] += 1
    for pattern, count in matched.items():
        if count:
            log.info("layer precision '%s' = %s: %d nodes", pattern, overrides[pattern], count)
        else:
            _unmatched(graph, pattern, strict)
    return compute


def _unmatched(graph: Graph, pattern: str, strict: bool) -> None:
    names = source_names(graph.nodes)
    shown = ", ".join(repr(n) for n in names[:5]) + (", ..." if len(names) > 5 else "")
    message = (f"layer_precisions pattern '{pattern}' matches no node of the optimized graph (nodes are matched "
               f"by their names and the model node names they absorbed, e.g. {shown}; nodes folded into "
               "constants are gone)")
    if strict:
        raise PrecisionError(f"{message}; a strict build needs every pattern to match: fix the pattern or drop it")
    log.warning("%s; it changes nothing: fix the pattern or drop it", message)


def convert_precision(graph: Graph, dtype: DType = DType.FLOAT16, layer_precisions: Mapping[str, str] | None = None,
                      strict: bool = False) -> dict[str, list[str]]:
    """Rewrite `graph` in place so that each node computes in its dtype (see the module docstring):
    `dtype` (FLOAT32, FLOAT16 or BFLOAT16) unless a `layer_precisions` pattern says otherwise.

    Returns the weights now stored in two dtypes, {name: [names of its copies]}: replacing one
    of them (refit) must replace the copies too."""
    compute = node_precisions(graph, dtype, layer_precisions, strict)
    declared = [o.dtype for o in graph.outputs]
    model_float32 = {id(v) for v in graph.values.values() if v.dtype is DType.FLOAT32}
    weights = _WeightVersions(graph)
    casts: dict[tuple[int, DType], Value] = {}
    for node in list(graph.nodes):
        if node.op_type == "Constant":
            _store_constant(graph, node, compute)
        elif node.op_type == "Cast" and compute[node] in _HALF and node.attrs.get("to") == DType.FLOAT32.onnx:
            node.attrs["to"] = compute[node].onnx
        touched = node.op_type in ("Constant", "Cast")
        for i, v in enumerate(list(node.inputs)):
            if v is None or id(v) not in model_float32:
                continue
            touched = True
            want = _wanted(node, i, compute)
            if graph.is_initializer(v):
                node.set_input(i, weights.read(v, want))
            elif v.dtype is not want and node.op_type not in _ANY_FLOAT_INPUT:
                node.set_input(i, _cast(graph, casts, v, want, node))
        if touched:
            _update_dtypes(graph, node)
    infer_graph(graph)
    for k, (out, want) in enumerate(zip(list(graph.outputs), declared)):
        if want is not None and out.dtype != want and out.producer is not None:
            _cast_output_back(graph, k, out, want, casts.get((id(out), want)))
    return weights.copies()


def _wanted(node: Node, i: int, compute: Mapping[Node, DType]) -> DType:
    return DType.FLOAT32 if (node.op_type, i) in _KEEP_FLOAT32 else compute[node]


def _pinned(graph: Graph, v: Value) -> bool:
    """Read as it is by something this pass does not convert: the caller, or a subgraph."""
    return is_graph_output(graph, v) or any(n.graph is not graph for n, _ in v.users)


class _WeightVersions:
    """A float32 weight once per dtype its readers compute in; the first keeps the name."""

    def __init__(self, graph: Graph):
        self.graph = graph
        self.versions: dict[str, dict[DType, Value]] = {}
        self.originals: dict[str, torch.Tensor] = {}

    def read(self, v: Value, want: DType) -> Value:
        g = self.graph
        versions = self.versions.get(v.name)
        if versions is None:
            original = self.originals[v.name] = g.initializers[v.name]
            first = DType.FLOAT32 if _pinned(g, v) else want
            if first is not DType.FLOAT32:
                g.initializers[v.name] = original.to(first.torch)
                v.type = TensorType(first, v.type.shape)
            versions = self.versions[v.name] = {first: v}
        if want not in versions:
            # From the float32 original: a float32 copy of a half copy would have lost the bits.
            versions[want] = g.add_initializer(g.fresh_name(f"{v.name}_{want}"), self.originals[v.name].to(want.torch))
        return versions[want]

    def copies(self) -> dict[str, list[str]]:
        return {name: [c.name for c in vs.values() if c.name != name] for name, vs in self.versions.items()
                if len(vs) > 1}


def _store_constant(graph: Graph, node: Node, compute: Mapping[Node, DType]) -> None:
    """A float32 Constant in its readers' dtype; a clone per further dtype they need."""
    value, out = node.attrs.get("value"), node.outputs[0]
    if not isinstance(value, torch.Tensor) or value.dtype != torch.float32:
        return
    readers: dict[DType, list[tuple[Node, int]]] = {DType.FLOAT32: []} if _pinned(graph, out) else {}
    for reader, i in out.users:
        if reader in compute:
            readers.setdefault(_wanted(reader, i, compute), []).append((reader, i))
    if not readers:
        return
    first, *others = readers
    node.attrs["value"] = value.to(first.torch)
    for k, dtype in enumerate(others):
        clone = new_node(graph, graph.nodes.index(node) + 1 + k, "Constant", [], {"value": value.to(dtype.torch)},
                         sources=list(node.sources), name=f"{node.name}_{dtype}")
        for reader, i in readers[dtype]:
            reader.set_input(i, clone.outputs[0])


def _cast(graph: Graph, casts: dict, v: Value, want: DType, reader: Node) -> Value:
    """`v` as `want`, cast once just before its first reader that needs it."""
    key = (id(v), want)
    if key not in casts:
        cast = new_node(graph, graph.nodes.index(reader), "Cast", [v], {"to": want.onnx}, sources=[],
                        name=f"{v.name}_to_{want}")
        casts[key] = cast.outputs[0]
    return casts[key]


def _update_dtypes(graph: Graph, node: Node) -> None:
    """The node's output dtypes from its (converted) inputs; shapes are unchanged by a dtype."""
    shapes = [v.shape for v in node.outputs]
    infer_types(graph, node)
    for v, shape in zip(node.outputs, shapes):
        if v.type is not None and shape is not None:
            v.type = TensorType(v.type.dtype, shape)


def _cast_output_back(graph: Graph, k: int, out: Value, want: DType, cast: Value | None = None) -> None:
    """The graph output keeps its name and declared dtype: a Cast (`cast`, if one exists) takes the name."""
    name = out.name
    out.name = graph.fresh_name(name + "_half")
    graph.values.pop(name, None)
    graph.values[out.name] = out
    if cast is None:
        cast = new_node(graph, len(graph.nodes), "Cast", [out], {"to": want.onnx}, sources=[],
                        name=f"{name}_to_{want}").outputs[0]
    graph.values.pop(cast.name)
    cast.name = name
    graph.values[name] = cast
    graph.outputs[k] = cast
