"""A half-precision Layer run in float32: TensorRT's per-Layer precision choice under --fp16.

In a half build (fp16/bf16, not strict) the tuner may also time a Layer computed in float32:
its half inputs cast up, a library tactic (cuDNN/cuBLAS through torch, or the op-by-op
reference) run on a float32 copy of the Layer, its outputs cast back to the declared types. It
competes with the half tactics on time and is checked against the same reference, so it wins
only where float32 is faster, as `--fp16` "allows" half kernels in TensorRT rather than forcing
them. A strict build, or a Layer that a `layer_precisions` override keeps in float32 already,
gets no such variant.

Only library tactics run inside: they compile nothing, so timing the float32 variants adds
little to a build (generated Triton kernels would each be compiled a second time).
"""

from __future__ import annotations

from typing import Any

import torch

from ..ir import DType, Graph, Layer, Node, TensorType, Value
from .base import TACTICS, LayerContext, Runner, Tactic, register_tactic

_HALF = (DType.FLOAT16, DType.BFLOAT16)


def _float32_type(t: TensorType | None) -> TensorType | None:
    return TensorType(DType.FLOAT32, t.shape) if t is not None and t.dtype in _HALF else t


def _float32_attrs(node: Node) -> dict | None:
    """The node's attributes for a float32 copy, or None if they pin a half type we do not rewrite."""
    attrs = dict(node.attrs)
    if node.op_type == "Cast":
        if attrs.get("to") in (d.onnx for d in _HALF):
            attrs["to"] = DType.FLOAT32.onnx
        return attrs
    if node.op_type == "Constant":
        value = attrs.get("value")
        if isinstance(value, torch.Tensor) and value.dtype in (torch.float16, torch.bfloat16):
            attrs["value"] = value.float()
        return attrs
    if any(k in attrs for k in ("dtype", "to", "output_dtype")):
        return None
    return attrs


def float32_context(lc: LayerContext) -> LayerContext | None:
    """The Layer as a one-Layer graph whose half values and weights are float32; None if the Layer
    holds something this copy does not rewrite (subgraphs, attributes naming a type)."""
    g = Graph(f"{lc.layer.name}_float32")
    g.opset_imports = dict(lc.graph.opset_imports)
    copies: dict[int, Value] = {}

    def copy_of(v: Value) -> Value:
        if id(v) not in copies:
            copies[id(v)] = Value(v.name, _float32_type(v.type))
        return copies[id(v)]

    weights = {}
    for name, w in lc.weights.items():
        weights[name] = w.float() if w.dtype in (torch.float16, torch.bfloat16) else w
    for v in lc.inputs:
        c = copy_of(v)
        g.inputs.append(c)
        g.values[c.name] = c
    nodes = []
    for n in lc.nodes:
        attrs = _float32_attrs(n)
        if attrs is None or any(n.subgraphs()):
            return None
        ins = []
        for v in n.inputs:
            if v is not None and v.name in weights and id(v) not in copies:
                c = copy_of(v)
                c.type = TensorType(DType.from_torch(weights[v.name].dtype), tuple(weights[v.name].shape))
                g.values[c.name] = c
                g.initializers[c.name] = weights[v.name]
            ins.append(copy_of(v) if v is not None else None)
        node = Node(n.op_type, ins, [copy_of(o) for o in n.outputs], attrs, name=n.name, domain=n.domain, opset=n.opset)
        node.sources = list(n.sources)
        nodes.append(g.append(node))
    g.outputs = [copy_of(v) for v in lc.outputs]
    anchor = nodes[lc.nodes.index(lc.anchor)] if lc.anchor is not None else None
    layer = Layer(lc.layer.name, lc.layer.kind, nodes, anchor=anchor)
    g.layers = [layer]
    return LayerContext(layer, g, weights, lc.device, torch.float32, activation_layout=lc.activation_layout)


def _inner_tactics() -> list[Tactic]:
    """The library tactics, and the reference, that may run the float32 copy."""
    return [t for name, t in TACTICS.items() if name == "reference" or name.startswith("torch.")]


class Float32Tactic(Tactic):
    """Config: {"tactic": a library tactic's name, "config": its config on the float32 copy}."""

    name = "float32"
    accepts_strided = True  # the casts keep the layout; the inner tactic's own build handles strides

    def applies(self, lc: LayerContext) -> bool:
        if lc.device.type != "cuda" or lc.strict or lc.dtype not in (torch.float16, torch.bfloat16):
            return False
        return any(v.type is not None and v.type.dtype in _HALF for v in [*lc.inputs, *lc.outputs])

    def configs(self, lc: LayerContext) -> list[dict[str, Any]]:
        inner = float32_context(lc)
        if inner is None:
            return []
        out = []
        for t in _inner_tactics():
            try:
                if t.applies(inner):
                    out.extend({"tactic": t.name, "config": dict(c)} for c in t.configs(inner))
            except Exception:  # noqa: BLE001 - an inner tactic that cannot look at the copy is no candidate
                continue
        return out

    def compile(self, lc: LayerContext, config: dict[str, Any]) -> Runner:
        inner = float32_context(lc)
        if inner is None:
            raise ValueError(f"Layer '{lc.layer.name}' has no float32 copy")
        run_inner = TACTICS[config["tactic"]].build(inner, dict(config["config"]))
        half_in = [v.type is not None and v.type.dtype in _HALF for v in lc.inputs]
        out_dtypes = [v.type.dtype.torch if v.type is not None and v.type.dtype is not None else None
                      for v in lc.outputs]

        def run(inputs: list[torch.Tensor]) -> list[torch.Tensor]:
            outs = run_inner([t.float() if up else t for t, up in zip(inputs, half_in)])
            return [o.to(dt) if dt is not None and o.dtype != dt else o for o, dt in zip(outs, out_dtypes)]
        return run


FLOAT32 = register_tactic(Float32Tactic())
