"""The layer report: what each Layer of a built engine holds (as `trtexec --dumpLayerInfo`)."""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass

import torch

from ..ir import DType, Graph, Value


@dataclass
class TensorInfo:
    name: str
    dtype: str
    shape: list

    @staticmethod
    def of(v: Value) -> "TensorInfo":
        t = v.type
        return TensorInfo(v.name, str(t.dtype) if t and t.dtype else "?", list(t.shape) if t and t.shape is not None else None)

    def __str__(self) -> str:
        shape = "[...]" if self.shape is None else "[" + ",".join(str(d) for d in self.shape) + "]"
        return f"{self.name}: {self.dtype}{shape}"


@dataclass
class LayerInfo:
    index: int
    name: str
    kind: str
    ops: list[str]
    sources: list[str]
    inputs: list[TensorInfo]
    outputs: list[TensorInfo]
    weights: int
    tactic: str
    precision: str


class LayerReport:
    def __init__(self, layers: list[LayerInfo]):
        self.layers = layers

    def __len__(self) -> int:
        return len(self.layers)

    def __iter__(self):
        return iter(self.layers)

    def find(self, source: str) -> LayerInfo:
        """The Layer that absorbed the source-model node `source`."""
        for layer in self.layers:
            if source in layer.sources:
                return layer
        raise KeyError(f"no layer holds source node '{source}'")

    def to_json(self) -> str:
        return json.dumps({"layers": [asdict(l) for l in self.layers]}, indent=1)

    def to_text(self) -> str:
        lines = [f"{len(self.layers)} layers"]
        for l in self.layers:
            lines.append(f"[{l.index}] {l.name}  ({l.kind}: {' -> '.join(l.ops)})  tactic={l.tactic} precision={l.precision}")
            lines.append("      in:  " + ", ".join(str(t) for t in l.inputs))
            lines.append("      out: " + ", ".join(str(t) for t in l.outputs))
        return "\n".join(lines)

    def __str__(self) -> str:
        return self.to_text()


def layer_report(graph: Graph, tactic_of=lambda layer: "reference") -> LayerReport:
    """`precision` is the float type a Layer computes in (its outputs may be cast to another one:
    a float32 override in a half build, or the tuner's float32 variant), else its outputs' types."""
    from ..tactics.base import layer_dtype

    rows = []
    for i, layer in enumerate(graph.layers or []):
        outs = layer.outputs(graph)
        tactic = tactic_of(layer)
        compute = torch.float32 if tactic == "float32" else layer_dtype(layer, graph, None)
        precision = str(DType.from_torch(compute)) if compute is not None else \
            ",".join(sorted({str(v.type.dtype) for v in outs if v.type and v.type.dtype})) or "?"
        rows.append(LayerInfo(
            index=i, name=layer.name, kind=layer.kind, ops=[n.op_type for n in layer.nodes],
            sources=layer.sources, inputs=[TensorInfo.of(v) for v in layer.inputs(graph)],
            outputs=[TensorInfo.of(v) for v in outs], weights=len(layer.weights(graph)),
            tactic=tactic, precision=precision,
        ))
    return LayerReport(rows)


