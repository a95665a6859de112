"""`tensorsmith build MODEL.onnx -o model.tsmith`: trtexec's --onnx ... --saveEngine."""

from __future__ import annotations

import os
import time

import click

from .common import CliError, check_readable, verbose_option
from .models import build_engine, build_options, is_engine_file, options_from_params, stderr_is_terminal
from .output import mib, note
from .shapes import profiles_from_options, shapes_option_callback


@click.command()
@click.argument("model", type=click.Path(dir_okay=False))
@click.option("-o", "--output", type=click.Path(dir_okay=False), default=None, metavar="FILE",
              help="Engine file to write [default: MODEL with the suffix .tsmith].")
@build_options
@click.option("--min-shapes", multiple=True, callback=shapes_option_callback, metavar="NAME:DIMS,...",
              help="Smallest shapes of dynamic inputs (an optimization profile, with --opt/--max-shapes).")
@click.option("--opt-shapes", multiple=True, callback=shapes_option_callback, metavar="NAME:DIMS,...",
              help="Shapes to tune at; alone, the same as --shapes.")
@click.option("--max-shapes", multiple=True, callback=shapes_option_callback, metavar="NAME:DIMS,...",
              help="Largest shapes of dynamic inputs.")
@click.option("--progress/--no-progress", default=None,
              help="Show `Layer i/n` while tactics are tuned [default: on when stderr is a terminal].")
@verbose_option
@click.pass_context
def build(ctx: click.Context, model: str, output: str | None, progress: bool | None, **params):
    """Build an engine from an ONNX model and save it as a .tsmith file."""
    min_shapes, opt_shapes, max_shapes = params["min_shapes"], params["opt_shapes"], params["max_shapes"]
    options = options_from_params(ctx, params)
    profiles = profiles_from_options(min_shapes, opt_shapes, max_shapes)
    if profiles is not None:
        if options.input_shapes:
            raise click.UsageError("give either --shapes (static) or --min/--opt/--max-shapes (a profile), not both")
        options.profiles = profiles
    elif opt_shapes:
        if options.input_shapes:
            raise click.UsageError("--opt-shapes alone means --shapes; give one of them")
        options.input_shapes = dict(opt_shapes)
    check_readable(model)
    if is_engine_file(model):
        raise CliError(f"'{model}' is already a built engine; build takes an ONNX model")
    output = output or os.path.splitext(model)[0] + ".tsmith"
    if os.path.abspath(output) == os.path.abspath(model):
        raise CliError(f"the output '{output}' would overwrite the model; choose another -o")
    show = stderr_is_terminal() if progress is None else progress
    t0 = time.perf_counter()
    engine = build_engine(model, options, progress=show)
    seconds = time.perf_counter() - t0
    try:
        engine.save(output)
    except OSError as e:
        raise CliError(f"cannot write engine '{output}': {e.strerror or e}") from None
    n_layers = len(engine.layers)
    click.echo(f"built {model} -> {output} ({options.target}, {options.precision}, {n_layers} layers, "
               f"{seconds:.1f} s, {mib(os.path.getsize(output))})")
    if options.timing_cache and options.target == "cpu":
        note("note: the CPU target tunes nothing; --timing-cache was not used")


@click.command(short_help="List the graph passes for --opt-level and --disable-pass.")
def passes():
    """List the graph passes (level, name, description) for --opt-level and --disable-pass."""
    from ..passes import describe_passes

    click.echo("level  name                               description")
    click.echo(describe_passes())
