"""ONNX -> IR. Reads a file, bytes or ModelProto; checks opsets and ops; infers types."""

from __future__ import annotations

import os
from typing import Any

import numpy as np
import onnx
import torch
from onnx import numpy_helper

from ..errors import (
    InvalidGraphError,
    ModelLoadError,
    TensorsmithError,
    UnsupportedDTypeError,
    UnsupportedOperatorError,
    UnsupportedOpsetError,
)
from ..ir import DType, Graph, Node, TensorType, Value
from ..ops import is_supported
from ..ops.inference import infer_graph
from .onnx_legacy import attrs_to_inputs, remap_inputs

MAX_OPSET = onnx.defs.onnx_opset_version()
MIN_OPSET = 1


def load_model_proto(source: Any) -> tuple[onnx.ModelProto, str]:
    """Return (model, display name). Raises ModelLoadError for missing, truncated or garbage files."""
    if isinstance(source, onnx.ModelProto):
        return source, source.graph.name or "<model>"
    if isinstance(source, (bytes, bytearray)):
        name = "<bytes>"
        try:
            model = onnx.load_from_string(bytes(source))
        except Exception as e:
            raise ModelLoadError(name, f"not a valid ONNX protobuf ({type(e).__name__}: {e})") from None
        return _check_nonempty(model, name), name
    path = os.fspath(source)
    if not os.path.exists(path):
        raise ModelLoadError(path, "no such file", "check the path")
    if os.path.isdir(path):
        raise ModelLoadError(path, "is a directory", "pass the .onnx file inside it")
    try:
        model = onnx.load(path, load_external_data=True)
    except FileNotFoundError as e:
        raise ModelLoadError(
            path, f"external data file missing: {e.filename or e}",
            "keep the weight files next to the model, with the names the model refers to",
        ) from None
    except Exception as e:
        raise ModelLoadError(path, f"not a valid ONNX protobuf ({type(e).__name__}: {e})") from None
    return _check_nonempty(model, path), path


def _check_nonempty(model: onnx.ModelProto, name: str) -> onnx.ModelProto:
    if not model.HasField("graph") or (not model.graph.node and not model.graph.output):
        raise ModelLoadError(name, "the file holds no graph (empty or truncated model)")
    bad = _first_non_text(model)
    if bad:
        raise ModelLoadError(name, f"field {bad} holds bytes that are not UTF-8 text (corrupt file)")
    return model


def _is_repeated(field) -> bool:
    if hasattr(field, "is_repeated"):  # protobuf >= 6 dropped `label`
        return field.is_repeated
    return field.label == field.LABEL_REPEATED


def _first_non_text(msg, path: str = "model") -> str | None:
    """Path of the first string field that protobuf could not decode as UTF-8 (it gives bytes)."""
    from google.protobuf.descriptor import FieldDescriptor as F

    for field, value in msg.ListFields():
        items = value if _is_repeated(field) else [value]
        if field.type == F.TYPE_STRING:
            if any(not isinstance(v, str) for v in items):
                return f"{path}.{field.name}"
        elif field.type == F.TYPE_MESSAGE:
            for i, item in enumerate(items):
                bad = _first_non_text(item, f"{path}.{field.name}[{i}]")
                if bad:
                    return bad
    return None


def import_onnx(source: Any) -> Graph:
    """Import an ONNX model into a typed, verified-ready Graph."""
    model, where = load_model_proto(source)
    opsets = _check_opsets(model, where)
    if model.functions:
        try:
            from onnx import inliner

            model = inliner.inline_local_functions(model)
        except Exception as e:
            raise ModelLoadError(where, f"cannot inline the model's local functions ({e})") from None
    _check_ops_supported(model.graph, opsets)
    base_dir = os.path.dirname(os.path.abspath(where)) if os.path.exists(where) else None
    importer = _GraphImporter(opsets, where, base_dir)
    try:
        graph = importer.graph(model.graph, parent=None)
    except TensorsmithError:
        raise
    except Exception as e:  # a malformed proto must not escape as a bare traceback
        raise ModelLoadError(where, f"malformed graph ({type(e).__name__}: {e})") from e
    infer_graph(graph)
    return graph


def _check_opsets(model: onnx.ModelProto, where: str) -> dict[str, int]:
    opsets: dict[str, int] = {}
    for imp in model.opset_import:
        domain = "" if imp.domain == "ai.onnx" else imp.domain
        opsets[domain] = imp.version
    if "" not in opsets and model.ir_version < 3:
        opsets[""] = 1
    v = opsets.get("")
    if v is not None and not (MIN_OPSET <= v <= MAX_OPSET):
        raise UnsupportedOpsetError("ai.onnx", v, f"{MIN_OPSET}..{MAX_OPSET}")
    return opsets


def _check_ops_supported(g: onnx.GraphProto, opsets: dict[str, int]) -> None:
    """Fail before anything else on the first op without an implementation."""
    for i, n in enumerate(g.node):
        domain = "" if n.domain == "ai.onnx" else n.domain
        if not is_supported(n.op_type, domain):
            raise UnsupportedOperatorError(n.op_type, domain, opsets.get(domain, 0), n.name or f"{n.op_type}_{i}")
        for a in n.attribute:
            if a.type == onnx.AttributeProto.GRAPH:
                _check_ops_supported(a.g, opsets)
            elif a.type == onnx.AttributeProto.GRAPHS:
                for sub in a.graphs:
                    _check_ops_supported(sub, opsets)


def tensor_from_proto(t: onnx.TensorProto, where: str, base_dir: str | None = None) -> torch.Tensor:
    if t.data_type == onnx.TensorProto.STRING:
        raise UnsupportedDTypeError("STRING", where)
    dtype = DType.from_onnx(t.data_type, where)
    try:
        arr = numpy_helper.to_array(t, base_dir or "")
    except Exception as e:
        raise ModelLoadError(where, f"cannot read tensor data ({type(e).__name__}: {e})",
                             "re-export the model; the tensor's data is truncated or its external file is missing") from None
    return numpy_to_torch(arr, dtype)


def numpy_to_torch(arr: np.ndarray, dtype: DType) -> torch.Tensor:
    arr = np.array(arr, copy=True, order="C")  # ascontiguousarray would make a 0-d array 1-d
    if dtype in (DType.BFLOAT16,):
        return torch.from_numpy(arr.view(np.uint16)).view(torch.bfloat16)
    if dtype.torch.itemsize == 1 and dtype.is_float:
        return torch.from_numpy(arr.view(np.uint8)).view(dtype.torch)
    return torch.from_numpy(arr).to(dtype.torch)


def type_from_proto(tp: onnx.TypeProto, where: str) -> TensorType:
    kind = tp.WhichOneof("value")
    if kind is None:
        return TensorType(None, None)
    if kind != "tensor_type":
        raise UnsupportedDTypeError(kind.replace("_type", ""), where)
    tt = tp.tensor_type
    dtype = DType.from_onnx(tt.elem_type, where) if tt.elem_type else None
    if not tt.HasField("shape"):
        return TensorType(dtype, None)
    dims = []
    for i, d in enumerate(tt.shape.dim):
        if d.HasField("dim_value"):
            dims.append(int(d.dim_value))
        elif d.HasField("dim_param") and d.dim_param:
            dims.append(d.dim_param)
        else:
            dims.append(f"{where}_d{i}")
    return TensorType(dtype, tuple(dims))


class _GraphImporter:
    def __init__(self, opsets: dict[str, int], where: str, base_dir: str | None):
        self.opsets = opsets
        self.where = where
        self.base_dir = base_dir
        self.node_names: set[str] = set()

    def graph(self, gp: onnx.GraphProto, parent: Graph | None) -> Graph:
        g = Graph(gp.name or "main", parent=parent)
        g.opset_imports = dict(self.opsets)
        for t in gp.initializer:
            if t.name in g.values:
                raise InvalidGraphError(f"initializer '{t.name}' is defined twice", fix="give each initializer a unique name")
            g.add_initializer(t.name, tensor_from_proto(t, f"initializer '{t.name}'", self.base_dir))
        if len(gp.sparse_initializer):
            raise UnsupportedDTypeError("sparse tensor", f"sparse initializer of graph '{g.name}'")
        for vi in gp.input:
            if vi.name in g.initializers:
                continue  # IR < 4 lists weights as inputs too; they are weights
            if vi.name in g.values:
                raise InvalidGraphError(f"graph input '{vi.name}' is declared twice")
            g.add_input(vi.name, type_from_proto(vi.type, f"input '{vi.name}'"))
        declared = {vi.name: vi.type for vi in gp.value_info}
        for i, np_ in enumerate(gp.node):
            self.node(g, np_, i, declared)
        for vi in gp.output:
            v = g.lookup(vi.name)
            if v is None:
                raise InvalidGraphError(
                    f"graph output '{vi.name}' is not produced by any node, input or initializer",
                    fix="remove the output from the graph or add the node that computes it",
                )
            t = type_from_proto(vi.type, f"output '{vi.name}'")
            if v.type is None:
                v.type = t
            g.outputs.append(v)
        return g

    def node(self, g: Graph, np_: onnx.NodeProto, index: int, declared: dict) -> None:
        domain = "" if np_.domain == "ai.onnx" else np_.domain
        opset = self.opsets.get(domain, 1)
        name = np_.name or f"{np_.op_type}_{index}"
        if name in self.node_names:
            name = f"{name}_{index}"
        self.node_names.add(name)
        attrs = {a.name: self.attr(a, g, name) for a in np_.attribute}

        inputs: list[Value | None] = []
        for j, in_name in enumerate(np_.input):
            if not in_name:
                inputs.append(None)
                continue
            v = g.lookup(in_name)
            if v is None:
                raise InvalidGraphError(
                    f"input {j} '{in_name}' is not defined", node=name,
                    fix="add it as a graph input or initializer, or add the node that produces it before this one",
                )
            inputs.append(v)
        inputs = remap_inputs(np_.op_type, opset, inputs)
        for idx, tensor in attrs_to_inputs(np_.op_type, opset, attrs):
            while len(inputs) <= idx:
                inputs.append(None)
            inputs[idx] = g.add_initializer(g.fresh_name(f"{name}_{idx}"), tensor)
        while inputs and inputs[-1] is None:
            inputs.pop()

        outputs = []
        for j, out_name in enumerate(np_.output):
            out_name = out_name or g.fresh_name(f"{name}_unused{j}")
            if out_name in g.values:
                raise InvalidGraphError(
                    f"output '{out_name}' is already assigned by another node or input", node=name,
                    fix="give every value a unique name (SSA)",
                )
            v = Value(out_name, type_from_proto(declared[out_name], out_name) if out_name in declared else None)
            outputs.append(v)
        node = Node(np_.op_type, inputs, outputs, attrs, name=name, domain=domain, opset=opset)
        g.append(node)

    def attr(self, a: onnx.AttributeProto, g: Graph, node: str) -> Any:
        A = onnx.AttributeProto
        if a.type == A.GRAPH:
            return self.graph(a.g, parent=g)
        if a.type == A.GRAPHS:
            return [self.graph(sub, parent=g) for sub in a.graphs]
        if a.type == A.TENSOR:
            return tensor_from_proto(a.t, f"attribute '{a.name}' of node '{node}'", self.base_dir)
        if a.type == A.TENSORS:
            return [tensor_from_proto(t, f"attribute '{a.name}' of node '{node}'", self.base_dir) for t in a.tensors]
        if a.type == A.SPARSE_TENSOR:
            raise UnsupportedDTypeError("sparse tensor", f"attribute '{a.name}' of node '{node}'")
        if a.type == A.STRING:
            return a.s.decode("utf-8", errors="replace")
        if a.type == A.STRINGS:
            return [s.decode("utf-8", errors="replace") for s in a.strings]
        if a.type == A.INT:
            return int(a.i)
        if a.type == A.FLOAT:
            return float(a.f)
        if a.type == A.INTS:
            return [int(x) for x in a.ints]
        if a.type == A.FLOATS:
            return [float(x) for x in a.floats]
        if a.type == A.TYPE_PROTO:
            return type_from_proto(a.tp, f"attribute '{a.name}' of node '{node}'")
        raise InvalidGraphError(f"attribute '{a.name}' has unknown type {a.type}", node=node)
