"""`tensorsmith run MODEL`: run once on given or random inputs, print and save the outputs."""

from __future__ import annotations

import click
import numpy as np

from .common import CliError, verbose_option
from .inputs import input_options, make_inputs
from .models import build_options, open_engine, options_from_params
from .output import echo_json, table


@click.command(short_help='Run a model or engine once on given or random inputs.')
@click.argument("model", type=click.Path(dir_okay=False))
@input_options
@click.option("--save-outputs", type=click.Path(dir_okay=False), default=None, metavar="FILE.npz",
              help="Write the outputs to a .npz file (one array per output name).")
@click.option("--save-inputs", type=click.Path(dir_okay=False), default=None, metavar="FILE.npz",
              help="Write the inputs used (e.g. the random ones) to a .npz file.")
@click.option("--json", "as_json", is_flag=True, help="Print the outputs' summaries as JSON.")
@build_options
@verbose_option
@click.pass_context
def run(ctx, model, input_files, inputs_npz, seed, save_outputs, save_inputs, as_json, **params):
    """Run MODEL (an ONNX model, built first, or a .tsmith engine) once.

    Inputs come from --input/--inputs; the others are random (seeded)."""
    options = options_from_params(ctx, params)
    engine, _ = open_engine(model, options)
    feeds = make_inputs(engine, input_files, inputs_npz, options.input_shapes, seed)
    outputs = engine.run(feeds)
    if save_inputs:
        _savez(save_inputs, feeds)
    if save_outputs:
        _savez(save_outputs, outputs)
    rows = [summary(name, value) for name, value in outputs.items()]
    if as_json:
        echo_json({"model": model, "target": engine.target, "inputs": [summary(n, a) for n, a in feeds.items()],
                   "outputs": rows, "saved": save_outputs})
        return
    click.echo(table(["output", "dtype", "shape", "min", "max", "mean"],
                     [[r["name"], r["dtype"], r["shape"], r["min"], r["max"], r["mean"]] for r in rows],
                     align="lllrrr"))
    if save_outputs:
        click.echo(f"saved outputs to {save_outputs}")


def summary(name: str, value) -> dict:
    arr = np.asarray(value)
    row = {"name": name, "dtype": str(arr.dtype), "shape": "x".join(map(str, arr.shape)) or "scalar",
           "min": None, "max": None, "mean": None}
    if arr.size and (arr.dtype.kind in "biuf" or arr.dtype.name == "bfloat16"):
        f = arr.astype(np.float64)
        row.update(min=float(f.min()), max=float(f.max()), mean=float(f.mean()))
    return row


def _savez(path: str, arrays: dict) -> None:
    try:
        np.savez(path, **{k: np.asarray(v) for k, v in arrays.items()})
    except OSError as e:
        raise CliError(f"cannot write '{path}': {e.strerror or e}") from None
