"""`tensorsmith compare MODEL.onnx`: the engine against ONNX Runtime (and PyTorch) on the same inputs,
as `polygraphy run --trt --onnxrt`; `--per-layer` finds the first node that goes wrong (`--mark-all`)."""

from __future__ import annotations

from dataclasses import asdict

import click

from .accuracy import Errors, engine_values, mark_all_outputs, run_ort, run_torch
from .common import EXIT_FAILURE, CliError, check_readable, verbose_option
from .inputs import input_options, make_inputs
from .models import build_engine, build_options, is_engine_file, load_engine, options_from_params, stderr_is_terminal
from .output import echo_json, number, table


@click.command(short_help="Compare the engine's outputs with ONNX Runtime's.")
@click.argument("model", type=click.Path(dir_okay=False))
@click.option("--atol", type=click.FloatRange(min=0), default=1e-3, show_default=True, help="Absolute tolerance.")
@click.option("--rtol", type=click.FloatRange(min=0), default=1e-3, show_default=True, help="Relative tolerance.")
@click.option("--engine", "engine_file", type=click.Path(dir_okay=False), default=None, metavar="FILE.tsmith",
              help="Check this built engine (of MODEL) instead of building one.")
@click.option("--torch", "torch_spec", default=None, metavar="MODULE:FACTORY",
              help="Also compare with PyTorch: FACTORY() returns the module, called with the inputs in order.")
@click.option("--per-layer", is_flag=True,
              help="Compare every intermediate tensor and name the first node whose error exceeds the tolerance.")
@click.option("--json", "as_json", is_flag=True, help="Print the results as JSON.")
@input_options
@build_options
@verbose_option
@click.pass_context
def compare(ctx, model, atol, rtol, engine_file, torch_spec, per_layer, as_json, input_files, inputs_npz, seed,
            **params):
    """Run MODEL's engine and ONNX Runtime on the same (seeded random) inputs and compare every output.

    Passes when every value satisfies |engine - reference| <= atol + rtol * |reference|.
    Exit code 1 when any output fails."""
    from ..frontends import load_model_proto

    options = options_from_params(ctx, params)
    check_readable(model)
    if is_engine_file(model):
        raise CliError(f"'{model}' is a built engine; compare takes the ONNX model (ONNX Runtime runs it) "
                       "and the engine with --engine FILE")
    proto, _ = load_model_proto(model)
    if engine_file:
        check_readable(engine_file, "engine")
        if not is_engine_file(engine_file):
            raise CliError(f"'{engine_file}' (--engine) is not a tensorsmith engine file")
        engine = load_engine(engine_file)
    else:
        engine = build_engine(model, options, progress=stderr_is_terminal() and not as_json)
    feeds = make_inputs(engine, input_files, inputs_npz, options.input_shapes, seed, quiet=as_json)
    actual = engine.run(feeds)
    references = {"onnxruntime": run_ort(model, feeds)}
    if torch_spec:
        references["torch"] = run_torch(torch_spec, feeds, [s.name for s in engine.outputs])
    rows = []
    for ref_name, ref in references.items():
        for spec in engine.outputs:
            if spec.name not in ref:
                raise CliError(f"the reference {ref_name} has no output '{spec.name}'", EXIT_FAILURE)
            rows.append({"output": spec.name, "reference": ref_name,
                         **asdict(Errors.of(actual[spec.name], ref[spec.name], atol, rtol))})
    result = {"model": model, "engine": engine_file, "target": engine.target, "precision": engine.plan.precision,
              "atol": atol, "rtol": rtol, "seed": seed, "inputs": {n: list(a.shape) for n, a in feeds.items()},
              "outputs": rows, "passed": all(r["passed"] for r in rows)}
    if per_layer:
        result["per_layer"] = compare_per_layer(proto, engine, feeds, atol, rtol)
    if as_json:
        echo_json(result)
    else:
        click.echo(render(result))
    if not result["passed"]:
        ctx.exit(EXIT_FAILURE)


def compare_per_layer(proto, engine, feeds, atol: float, rtol: float) -> dict:
    """Every tensor both the ONNX model and the engine compute, in the model's (topological) node order,
    and the first one out of tolerance with the node that writes it and the Layer holding that node."""
    expected = run_ort(mark_all_outputs(proto), feeds)
    actual = engine_values(engine, feeds)
    report = engine.layer_report()
    rows, first = [], None
    for node in proto.graph.node:
        for name in node.output:
            if name not in expected or name not in actual:
                continue
            try:
                layer = report.find(node.name).name if node.name else None
            except KeyError:
                layer = None
            row = {"node": node.name, "op": node.op_type, "tensor": name, "layer": layer,
                   **asdict(Errors.of(actual[name], expected[name], atol, rtol))}
            rows.append(row)
            if first is None and not row["passed"]:
                first = row
    return {"compared": len(rows), "failed": sum(not r["passed"] for r in rows), "first_failure": first,
            "tensors": rows}


def _result(passed: bool) -> str:
    return "PASS" if passed else "FAIL"


def render(result: dict) -> str:
    inputs = ", ".join(f"{n}:{'x'.join(map(str, s)) or 'scalar'}" for n, s in result["inputs"].items())
    refs = " and ".join(sorted({r["reference"] for r in result["outputs"]}))
    out = [f"tensorsmith ({result['target']}, {result['precision']}) vs {refs}; atol {result['atol']:g}, "
           f"rtol {result['rtol']:g}; inputs {inputs} (random, seed {result['seed']}, unless given)", ""]
    out.append(table(["output", "reference", "shape", "max abs", "max rel", "mean abs", "cosine", "result"],
                     [[r["output"], r["reference"], "x".join(map(str, r["shape"])), r["max_abs"], r["max_rel"],
                       r["mean_abs"], r["cosine"], _result(r["passed"])] for r in result["outputs"]],
                     align="lllrrrrl"))
    for r in result["outputs"]:
        if r["reason"]:
            out.append(f"  {r['output']} vs {r['reference']}: {r['reason']}")
    pl = result.get("per_layer")
    if pl is not None:
        out += ["", f"per-layer: {pl['compared']} intermediate tensors compared with onnxruntime, "
                    f"{pl['failed']} out of tolerance"]
        out.append(table(["node", "op", "tensor", "Layer", "max abs", "max rel", "cosine", "result"],
                         [[r["node"], r["op"], r["tensor"], r["layer"], r["max_abs"], r["max_rel"], r["cosine"],
                           _result(r["passed"])] for r in pl["tensors"]], align="llllrrrl"))
        first = pl["first_failure"]
        if first is not None:
            where = f" in Layer '{first['layer']}'" if first["layer"] else ""
            out.append(f"first mismatch: node '{first['node']}' ({first['op']}) writing '{first['tensor']}'{where}: "
                       f"max abs {number(first['max_abs'])}, max rel {number(first['max_rel'])}")
        elif pl["compared"] == 0:
            out.append("no intermediate tensor has the same name in the model and the engine")
        else:
            out.append("every compared intermediate tensor is within tolerance")
    out += ["", _result(result["passed"])]
    return "\n".join(out)
