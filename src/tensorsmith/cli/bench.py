"""`tensorsmith bench MODEL`: trtexec's timing — throughput, latency percentiles, per-Layer profile."""

from __future__ import annotations

import json
from dataclasses import asdict

import click

from .common import CliError, verbose_option
from .inputs import input_options, make_inputs
from .models import build_options, open_engine, options_from_params, stderr_is_terminal
from .output import echo_json, note, number, table
from .profiling import profile_layers
from .timing import measure

ROWS = [("latency_ms", "Latency"), ("gpu_compute_ms", "GPU compute"), ("enqueue_ms", "Enqueue (host)"),
        ("h2d_ms", "H2D transfer"), ("d2h_ms", "D2H transfer")]
CPU_ROWS = [("latency_ms", "Latency (wall clock)")]


@click.command(short_help='Benchmark an engine: throughput, latency, per-Layer times.')
@click.argument("model", type=click.Path(dir_okay=False))
@click.option("--warmup", type=click.IntRange(min=0), default=10, show_default=True,
              help="Untimed runs first (iterations).")
@click.option("--iterations", type=click.IntRange(min=1), default=None,
              help="Timed runs [default: 100, unless --duration].")
@click.option("--duration", type=click.FloatRange(min=0, min_open=True), default=None, metavar="SECONDS",
              help="Time runs for this long instead of a count.")
@click.option("--profile", "with_profile", is_flag=True, help="Add a per-Layer time table (slowest first).")
@click.option("--export-profile", type=click.Path(dir_okay=False), default=None, metavar="FILE.json",
              help="Write the per-Layer times as JSON (implies --profile).")
@click.option("--json", "as_json", is_flag=True, help="Print the figures as JSON.")
@input_options
@build_options
@verbose_option
@click.pass_context
def bench(ctx, model, warmup, iterations, duration, with_profile, export_profile, as_json, input_files, inputs_npz,
          seed, **params):
    """Benchmark MODEL (an ONNX model, built first, or a .tsmith engine) as trtexec does."""
    if iterations is not None and duration is not None:
        raise click.UsageError("give --iterations or --duration, not both")
    if duration is None and iterations is None:
        iterations = 100
    options = options_from_params(ctx, params)
    engine, _ = open_engine(model, options, progress=stderr_is_terminal() and not as_json)
    feeds = make_inputs(engine, input_files, inputs_npz, options.input_shapes, seed, quiet=as_json)
    m = measure(engine, feeds, warmup, iterations, duration)
    result = {"model": model, "target": engine.target, "precision": engine.plan.precision,
              "inputs": {n: list(a.shape) for n, a in feeds.items()}, **m.summary()}
    if engine.target == "cpu":
        result["note"] = "CPU engine: timed with the wall clock (no GPU compute, enqueue or transfer times)"
    layers = None
    if with_profile or export_profile:
        layers = profile_layers(engine, feeds)
        result["profile"] = {"total_ms": sum(r.ms for r in layers), "layers": [asdict(r) for r in layers]}
        if export_profile:
            _write_json(export_profile, result["profile"])
    if as_json:
        echo_json(result)
        return
    click.echo(render(result))
    if layers is not None:
        click.echo()
        click.echo(render_profile(result["profile"]))
    if export_profile:
        note(f"wrote the per-Layer profile to {export_profile}")


def render(result: dict) -> str:
    head = [f"model: {result['model']}  target: {result['target']}  precision: {result['precision']}",
            "inputs: " + ", ".join(f"{n}:{'x'.join(map(str, s)) or 'scalar'}" for n, s in result["inputs"].items())]
    if "note" in result:
        head.append(result["note"])
    qps = result["throughput_qps"]
    head.append(f"throughput: {number(qps)} qps  ({result['iterations']} iterations in {result['wall_time_s']:.2f} s)")
    rows = []
    for key, label in (ROWS if result["target"] == "cuda" else CPU_ROWS):
        s = result[key]
        if s is not None:
            rows.append([label] + [s[k] for k in ("min", "mean", "median", "p90", "p95", "p99", "max")])
    return "\n".join(head) + "\n\n" + table(["ms", "min", "mean", "median", "p90", "p95", "p99", "max"], rows)


def render_profile(profile: dict) -> str:
    rows = [[r["name"], r["tactic"], r["ms"], f"{r['percent']:.1f}%"] for r in profile["layers"]]
    rows.append(["total", "", profile["total_ms"], "100.0%"])
    return "per-Layer time (median)\n" + table(["Layer", "tactic", "ms", "%"], rows, align="llrr")


def _write_json(path: str, data: dict) -> None:
    try:
        with open(path, "w") as f:
            json.dump(data, f, indent=1)
    except OSError as e:
        raise CliError(f"cannot write '{path}': {e.strerror or e}") from None
