"""Drawing the optimized graph: nodes grouped in one box (a Graphviz cluster) per Layer.

The DOT text is generated here; Graphviz's `dot` program lays it out and renders SVG or
PNG, through the `graphviz` Python package when it is installed, else by running `dot`.
An .html file embeds the SVG when `dot` is present, else shows the Layers as boxes in
order in a page of its own (no layout engine needed).
"""

from __future__ import annotations

import html
import os
import shutil
import subprocess

from .common import EXIT_FAILURE, CliError

FORMATS = (".dot", ".svg", ".png", ".html")
INSTALL = ("install Graphviz's `dot` program (apt-get install graphviz, brew install graphviz or "
           "conda install graphviz) and optionally the Python package (pip install graphviz, or "
           "pip install 'tensorsmith[viz]')")


def _q(text: str) -> str:
    return '"' + str(text).replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n") + '"'


def _type(v) -> str:
    t = v.type
    if t is None:
        return ""
    shape = "?" if t.shape is None else "x".join(str(d) for d in t.shape)
    return f"{t.dtype or '?'}[{shape}]"


def to_dot(graph, name: str = "tensorsmith") -> str:
    """DOT text of `graph`: inputs and outputs as ovals, nodes as boxes inside one cluster per Layer."""
    ids = {id(n): f"n{i}" for i, n in enumerate(graph.nodes)}
    producer = {id(v): ids[id(n)] for n in graph.nodes for v in n.outputs if v is not None}
    lines = [f"digraph {_q(name)} {{", "  rankdir=TB;", '  node [shape=box, style="rounded,filled", '
             'fillcolor=white, fontname="Helvetica", fontsize=10];', '  edge [fontname="Helvetica", fontsize=8];']
    for i, v in enumerate(graph.inputs):
        producer[id(v)] = f"in{i}"
        lines.append(f"  in{i} [shape=oval, fillcolor=\"#d8ecff\", label={_q(v.name + chr(10) + _type(v))}];")
    grouped = set()
    for k, layer in enumerate(graph.layers or []):
        lines.append(f"  subgraph cluster_{k} {{")
        tactic = layer.attrs.get("tactic", "reference")
        lines.append(f"    label={_q(f'[{k}] {layer.name}  ({layer.kind}, {tactic})')}; style=\"rounded,filled\"; "
                     'fillcolor="#f2f2f2"; color="#888888"; fontname="Helvetica"; fontsize=10;')
        for n in layer.nodes:
            grouped.add(id(n))
            lines.append(f"    {ids[id(n)]} [label={_q(n.op_type + chr(10) + (n.name or ''))}];")
        lines.append("  }")
    for n in graph.nodes:
        if id(n) not in grouped:
            lines.append(f"  {ids[id(n)]} [label={_q(n.op_type + chr(10) + (n.name or ''))}];")
    for n in graph.nodes:
        for v in n.inputs:
            src = producer.get(id(v)) if v is not None else None
            if src is not None:
                lines.append(f"  {src} -> {ids[id(n)]} [label={_q(_type(v))}];")
    for i, v in enumerate(graph.outputs):
        lines.append(f"  out{i} [shape=oval, fillcolor=\"#ffe8cc\", label={_q(v.name + chr(10) + _type(v))}];")
        src = producer.get(id(v))
        if src is not None:
            lines.append(f"  {src} -> out{i};")
    lines.append("}")
    return "\n".join(lines) + "\n"


def render_with_dot(dot_text: str, fmt: str) -> bytes | None:
    """The rendered bytes, or None when no Graphviz `dot` program is installed."""
    try:
        import graphviz  # the `viz` extra

        try:
            return graphviz.Source(dot_text).pipe(format=fmt)
        except graphviz.ExecutableNotFound:
            return None
    except ImportError:
        pass
    exe = shutil.which("dot")
    if exe is None:
        return None
    done = subprocess.run([exe, f"-T{fmt}"], input=dot_text.encode(), capture_output=True, timeout=120)
    if done.returncode != 0:
        raise CliError(f"Graphviz's dot failed: {done.stderr.decode(errors='replace').strip()}", EXIT_FAILURE)
    return done.stdout


def write_graph(graph, path: str, title: str) -> list[str]:
    """Write the drawing to `path` (.dot, .svg, .png or .html); the DOT text always goes beside it.

    Returns the files written."""
    base, ext = os.path.splitext(path)
    ext = ext.lower()
    if ext not in FORMATS:
        raise CliError(f"cannot draw '{path}': use a file ending in {', '.join(FORMATS)}")
    dot_text = to_dot(graph, title)
    dot_path = path if ext == ".dot" else base + ".dot"
    _write(dot_path, dot_text.encode())
    written = [dot_path]
    if ext == ".dot":
        return written
    if ext == ".html":
        svg = render_with_dot(dot_text, "svg")
        _write(path, html_page(graph, title, svg.decode() if svg else None, dot_text).encode())
        return written + [path]
    data = render_with_dot(dot_text, ext[1:])
    if data is None:
        raise CliError(f"rendering '{path}' needs Graphviz: {INSTALL}; the graph was written to '{dot_path}' "
                       "(or draw to .html, which needs nothing)", EXIT_FAILURE)
    _write(path, data)
    return written + [path]


def _write(path: str, data: bytes) -> None:
    try:
        with open(path, "wb") as f:
            f.write(data)
    except OSError as e:
        raise CliError(f"cannot write '{path}': {e.strerror or e}") from None


_CSS = """body{font-family:Helvetica,Arial,sans-serif;margin:2em;color:#222}
.layer{border:1px solid #888;border-radius:8px;background:#f2f2f2;margin:0 auto 6px;padding:6px 10px;max-width:46em}
.layer h3{margin:0 0 4px;font-size:14px}.node{display:inline-block;border:1px solid #aaa;border-radius:5px;
background:#fff;padding:2px 6px;margin:2px;font-size:12px}.io{color:#555;font-size:12px}
.arrow{text-align:center;color:#888;margin:0 0 6px}details{margin-top:2em}"""


def html_page(graph, title: str, svg: str | None, dot_text: str) -> str:
    """A self-contained page: the Graphviz drawing when there is one, else the Layers as boxes in order."""
    esc = html.escape
    parts = [f"<!doctype html><html><head><meta charset='utf-8'><title>{esc(title)}</title>",
             f"<style>{_CSS}</style></head><body><h1>{esc(title)}</h1>"]
    if svg is not None:
        parts.append(svg[svg.find("<svg"):])
    else:
        ins = ", ".join(f"{v.name}: {_type(v)}" for v in graph.inputs)
        parts.append(f"<p class='io'>inputs: {esc(ins)}</p>")
        for k, layer in enumerate(graph.layers or []):
            nodes = "".join(f"<span class='node' title='{esc(n.name or '')}'>{esc(n.op_type)}</span>" for n in layer.nodes)
            reads = ", ".join(v.name for v in layer.inputs(graph))
            writes = ", ".join(f"{v.name}: {_type(v)}" for v in layer.outputs(graph))
            tactic = layer.attrs.get("tactic", "reference")
            parts.append(f"<div class='layer'><h3>[{k}] {esc(layer.name)} <small>({esc(layer.kind)}, {esc(tactic)})"
                         f"</small></h3>{nodes}<div class='io'>reads {esc(reads)}<br>writes {esc(writes)}</div></div>"
                         "<div class='arrow'>&#8595;</div>")
        outs = ", ".join(f"{v.name}: {_type(v)}" for v in graph.outputs)
        parts.append(f"<p class='io'>outputs: {esc(outs)}</p>")
    parts.append(f"<details><summary>DOT source</summary><pre>{esc(dot_text)}</pre></details></body></html>")
    return "\n".join(parts)
