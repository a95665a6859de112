"""A readable text form of a Graph, for logs and test failures."""

from __future__ import annotations

from typing import Any

import torch

from .graph import Graph, Node, Value


def _fmt_attr(a: Any) -> str:
    if isinstance(a, Graph):
        return f"<graph {a.name}>"
    if isinstance(a, torch.Tensor):
        if a.numel() <= 8:
            return f"tensor({a.flatten().tolist()}, {a.dtype})"
        return f"tensor({list(a.shape)}, {a.dtype})"
    if isinstance(a, float):
        return f"{a:g}"
    if isinstance(a, list):
        return "[" + ", ".join(_fmt_attr(x) for x in a) + "]"
    return repr(a) if isinstance(a, (str, bytes)) else str(a)


def _fmt_value(v: Value | None) -> str:
    return "None" if v is None else f"%{v.name}"


def format_node(node: Node, indent: str = "  ") -> str:
    outs = ", ".join(f"%{v.name}: {v.type}" if v.type else f"%{v.name}" for v in node.outputs)
    args = ", ".join(_fmt_value(v) for v in node.inputs)
    op = f"{node.domain}::{node.op_type}" if node.domain else node.op_type
    attrs = ""
    if node.attrs:
        attrs = " {" + ", ".join(f"{k}={_fmt_attr(a)}" for k, a in sorted(node.attrs.items())) + "}"
    line = f"{indent}{outs} = {op}({args}){attrs}  # {node.name}"
    for sub in node.subgraphs():
        line += "\n" + format_graph(sub, indent + "    ")
    return line


def format_graph(graph: Graph, indent: str = "") -> str:
    opsets = ", ".join(f"{d or 'ai.onnx'}={v}" for d, v in sorted(graph.opset_imports.items()))
    lines = [f"{indent}graph {graph.name} ({opsets})" if opsets else f"{indent}graph {graph.name}"]
    for v in graph.inputs:
        lines.append(f"{indent}  input %{v.name}: {v.type}")
    for name, t in graph.initializers.items():
        lines.append(f"{indent}  init  %{name}: {graph.values[name].type}")
    for n in graph.nodes:
        lines.append(format_node(n, indent + "  "))
    lines.append(f"{indent}  return " + ", ".join(_fmt_value(v) for v in graph.outputs))
    return "\n".join(lines)
