"""Lowering a float32 graph to float16/bfloat16 for the GPU (TensorRT's --fp16/--bf16).

Float weights become half; float inputs are cast on entry and float outputs cast back on exit,
so the engine keeps the model's declared I/O dtypes; Casts to float32 inside the graph cast to
the half type instead. Inputs that are parameters rather than data (Resize scales/roi, and
the like) stay float32. Kernels still accumulate reductions and normalizations in float32.
"""

from __future__ import annotations

import torch

from ..ir import DType, Graph, TensorType, Value
from ..ops.inference import infer_graph
from .rewrite import new_node

# (op, input index) pairs whose float32 tensors are parameters, not data.
_KEEP_FLOAT32 = {("Resize", 1), ("Resize", 2), ("Upsample", 1), ("RoiAlign", 1), ("GridSample", 1),
                 ("Range", 0), ("Range", 1), ("Range", 2), ("AffineGrid", 0)}


def _keeps_float32(v: Value) -> bool:
    return any((n.op_type, i) in _KEEP_FLOAT32 for n, i in v.users)


def convert_precision(graph: Graph, dtype: DType) -> None:
    """Rewrite `graph` in place to compute in `dtype` (FLOAT16 or BFLOAT16)."""
    half = dtype.torch
    declared = [o.dtype for o in graph.outputs]
    for name, t in list(graph.initializers.items()):
        v = graph.values[name]
        if t.dtype == torch.float32 and not _keeps_float32(v):
            graph.initializers[name] = t.to(half)
            v.type = TensorType(dtype, v.type.shape)
    for node in graph.nodes:
        if node.op_type == "Cast" and node.attrs.get("to") == DType.FLOAT32.onnx:
            node.attrs["to"] = dtype.onnx
        if node.op_type == "Constant" and isinstance(node.attrs.get("value"), torch.Tensor):
            value = node.attrs["value"]
            if value.dtype == torch.float32 and not any(_keeps_float32(o) for o in node.outputs):
                node.attrs["value"] = value.to(half)
    for i, x in enumerate(list(graph.inputs)):
        if x.dtype is DType.FLOAT32 and x.users:
            readers = list(x.users)
            cast = new_node(graph, 0, "Cast", [x], {"to": dtype.onnx}, sources=[], name=f"{x.name}_to_{dtype}")
            for node, j in readers:
                if not _keeps_float32(x) or (node.op_type, j) not in _KEEP_FLOAT32:
                    node.set_input(j, cast.outputs[0])
    infer_graph(graph)
    for k, (out, want) in enumerate(zip(list(graph.outputs), declared)):
        if want is not None and out.dtype != want and out.producer is not None:
            _cast_output_back(graph, k, out, want)


def _cast_output_back(graph: Graph, k: int, out: Value, want: DType) -> None:
    """The graph output keeps its name and declared dtype: a Cast takes the name."""
    name = out.name
    out.name = graph.fresh_name(name + "_half")
    graph.values.pop(name, None)
    graph.values[out.name] = out
    index = len(graph.nodes)
    cast = new_node(graph, index, "Cast", [out], {"to": want.onnx}, sources=[], name=f"{name}_to_{want}")
    res = cast.outputs[0]
    graph.values.pop(res.name)
    res.name = name
    graph.values[name] = res
    graph.outputs[k] = res
