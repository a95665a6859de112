"""`tensorsmith inspect MODEL`: what the optimizer made of a model (trtexec --dumpLayerInfo, polygraphy inspect)."""

from __future__ import annotations

from collections import Counter
from dataclasses import asdict

import click

from .common import CliError, verbose_option
from .drawing import FORMATS, write_graph
from .models import build_options, open_engine, options_from_params, stderr_is_terminal
from .output import echo_json, mib, note, table


@click.command(short_help='Show the optimized graph, Layers and memory plan.')
@click.argument("model", type=click.Path(dir_okay=False))
@click.option("--json", "as_json", is_flag=True, help="Print everything as JSON.")
@click.option("--graph", "graph_file", type=click.Path(dir_okay=False), default=None,
              metavar="FILE.svg|.png|.html|.dot",
              help="Draw the optimized graph, fused Layers as boxes (.svg/.png need Graphviz's dot).")
@build_options
@verbose_option
@click.pass_context
def inspect(ctx, model, as_json, graph_file, **params):
    """Show MODEL's graph summary, I/O, Layers (absorbed nodes, tactics, precisions) and memory plan.

    An ONNX model is built first (with the build options given); a .tsmith engine is read as built."""
    options = options_from_params(ctx, params)
    if graph_file and not graph_file.lower().endswith(FORMATS):
        raise CliError(f"cannot draw '{graph_file}': use a file ending in {', '.join(FORMATS)}")
    engine, is_onnx = open_engine(model, options, progress=stderr_is_terminal() and not as_json)
    before = None
    if is_onnx:
        from ..frontends import import_onnx

        before = import_onnx(model)
    info = describe(engine, model, before)
    if graph_file:
        info["graph_files"] = write_graph(engine.plan.graph, graph_file, f"{model} (optimized)")
    if as_json:
        echo_json(info)
        return
    click.echo(render(info))
    for path in info.get("graph_files", []):
        note(f"wrote {path}")


def describe(engine, model: str, before=None) -> dict:
    graph = engine.plan.graph
    after_ops = Counter(n.op_type for n in graph.nodes)
    before_ops = Counter(n.op_type for n in before.nodes) if before is not None else None
    ops = sorted(set(after_ops) | set(before_ops or ()))
    report = engine.layer_report()
    return {
        "model": model,
        "kind": "onnx" if before is not None else "engine",
        "target": engine.target,
        "precision": engine.plan.precision,
        "strict": engine.plan.strict,
        "layer_precisions": dict(engine.plan.layer_precisions),
        "inputs": [_io(s) for s in engine.inputs],
        "outputs": [_io(s) for s in engine.outputs],
        "nodes": {"before": len(before.nodes) if before is not None else None, "after": len(graph.nodes),
                  "layers": len(report)},
        "ops": [{"op": op, "before": before_ops.get(op, 0) if before_ops is not None else None,
                 "after": after_ops.get(op, 0)} for op in ops],
        "layers": [asdict(layer) for layer in report],
        "memory": memory_plan(engine),
        "profiles": [p.to_data() for p in getattr(engine, "profiles", [])],
    }


def _io(spec) -> dict:
    t = spec.type
    return {"name": spec.name, "dtype": str(t.dtype) if t.dtype else "?",
            "shape": list(t.shape) if t.shape is not None else None}


def memory_plan(engine) -> dict:
    """The GPU build's memory plan; for a CPU engine, the plan its Layers would get (static shapes only)."""
    if engine.plan.memory:
        return dict(engine.plan.memory)
    from ..engine import LayerPlan
    from ..engine.memory import plan_memory

    graph = engine.plan.graph
    layers = [LayerPlan(l.name, "reference", {}, [v.name for v in l.inputs(graph)], [v.name for v in l.outputs(graph)])
              for l in graph.layers or []]
    mp = plan_memory(graph, layers)
    out = mp.summary()
    if not all(v.type is not None and v.type.is_static for v in graph.inputs):
        out["note"] = "inputs have dynamic dims: only static activations are planned (build with --shapes)"
    return out


def _shape(shape) -> str:
    return "[...]" if shape is None else "[" + ",".join(str(d) for d in shape) + "]"


def render(info: dict) -> str:
    strict = ", strict" if info.get("strict") else ""
    out = [f"model: {info['model']} ({'ONNX model, built' if info['kind'] == 'onnx' else 'engine file'}"
           f" for {info['target']}, {info['precision']}{strict})"]
    if info.get("layer_precisions"):
        out.append("layer precisions: " + ", ".join(f"{p}={v}" for p, v in info["layer_precisions"].items()))
    out.append("")
    out.append(table(["", "name", "dtype", "shape"],
                     [["input", s["name"], s["dtype"], _shape(s["shape"])] for s in info["inputs"]]
                     + [["output", s["name"], s["dtype"], _shape(s["shape"])] for s in info["outputs"]], align="llll"))
    n = info["nodes"]
    before = f"{n['before']} nodes -> " if n["before"] is not None else ""
    out += ["", f"graph: {before}{n['after']} nodes in {n['layers']} layers"]
    if info["kind"] == "onnx":
        out.append(table(["op", "before", "after"], [[o["op"], o["before"], o["after"]] for o in info["ops"]]))
    else:
        out.append(table(["op", "count"], [[o["op"], o["after"]] for o in info["ops"]]))
    out += ["", "layers"]
    rows = [[l["index"], l["name"], l["kind"], " -> ".join(l["ops"]), l["tactic"], l["precision"],
             ", ".join(l["sources"])] for l in info["layers"]]
    out.append(table(["#", "Layer", "kind", "ops", "tactic", "precision", "absorbed nodes"], rows, align="rllllll"))
    m = info["memory"]
    out += ["", "memory plan",
            f"  activations: {mib(m.get('activation_arena_bytes'))} arena "
            f"({mib(m.get('activation_naive_bytes'))} without reuse, {m.get('buffers', 0)} buffers)",
            f"  weights:     {mib(m.get('weight_bytes'))}"]
    if "arena_bound_bytes" in m:
        out.append(f"  bound:       {mib(m['arena_bound_bytes'])} written by their runners into a "
                   f"{mib(m.get('device_arena_bytes'))} arena, {mib(m.get('runner_allocated_bytes'))} "
                   "allocated by runners (or views)")
    if m.get("note"):
        out.append(f"  note: {m['note']}")
    for i, p in enumerate(info["profiles"]):
        out.append(f"profile {i}: " + "; ".join(f"{k}: min {v['min']} opt {v['opt']} max {v['max']}" for k, v in p.items()))
    return "\n".join(out)
