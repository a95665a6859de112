"""Getting an Engine from MODEL: load a `.tsmith` engine file, or build one from an ONNX model.

The builder's options are declared once here (`build_options`) and shared by every
subcommand that may build (build, run, bench, inspect, compare).
"""

from __future__ import annotations

from dataclasses import dataclass, field

import click
import torch

from .common import CliError, check_readable
from .shapes import Shapes, shapes_option_callback

ENGINE_MAGIC = b"TSMITH\r\n"  # tensorsmith.engine.serialize.MAGIC: engine files are told apart by content
INT8_NOT_YET = "INT8 is not supported yet (quantization lands later)"


def default_target() -> str:
    return "cuda" if torch.cuda.is_available() else "cpu"


@dataclass
class BuildOptions:
    target: str = "cpu"
    precision: str = "fp32"
    opt_level: int | None = None
    disable_passes: list[str] = field(default_factory=list)
    input_shapes: Shapes = field(default_factory=dict)
    profiles: list[dict] | None = None
    workspace: int | None = None  # bytes
    timing_cache: str | None = None
    layer_precisions: dict[str, str] = field(default_factory=dict)  # {pattern: "fp32" | "fp16" | "bf16"}
    strict: bool = False
    given: list[str] = field(default_factory=list)  # the flags the user set, to reject them for engine files

    def kwargs(self) -> dict:
        kw = dict(target=self.target, precision=self.precision, disable_passes=self.disable_passes,
                  input_shapes=self.input_shapes or None, workspace=self.workspace, timing_cache=self.timing_cache,
                  layer_precisions=self.layer_precisions or None, strict=self.strict)
        if self.opt_level is not None:
            kw["opt_level"] = self.opt_level
        if self.profiles:
            kw["profiles"] = self.profiles
        return kw


def precision_options(fn):
    for flag, what in reversed([("fp16", "float16"), ("bf16", "bfloat16"),
                                ("tf32", "float32 with TF32 matrix math"), ("int8", "INT8 (not yet)")]):
        fn = click.option(f"--{flag}", is_flag=True, help=f"Build in {what} (GPU).")(fn)
    return fn


def layer_precision_callback(ctx: click.Context, param: click.Parameter, values) -> dict[str, str]:
    """`--layer-precision PATTERN=PREC` (repeatable) -> {pattern: precision}, in the order given."""
    from ..passes.precision import LAYER_PRECISIONS

    out: dict[str, str] = {}
    for text in values or ():
        pattern, sep, name = text.rpartition("=")
        pattern, name = pattern.strip(), name.strip().lower()
        if not sep or not pattern:
            raise click.BadParameter(f"'{text}' is not PATTERN=PRECISION (e.g. '*LayerNorm*=fp32')",
                                     ctx=ctx, param=param)
        if name not in LAYER_PRECISIONS:
            raise click.BadParameter(f"'{text}': unknown precision '{name}'; choose one of "
                                     f"{', '.join(LAYER_PRECISIONS)}", ctx=ctx, param=param)
        out.pop(pattern, None)  # given again: the later one wins, and its place among the patterns too
        out[pattern] = name
    return out


def build_options(fn):
    """The builder's options, as trtexec spells them (collected by `BuildOptions.from_params`)."""
    from ..passes import MAX_OPT_LEVEL

    opts = [
        click.option("--target", type=click.Choice(["cpu", "cuda"]), default=None,
                     help="Device to build for [default: cuda when a GPU is present, else cpu]."),
        precision_options,
        click.option("--layer-precision", multiple=True, callback=layer_precision_callback, metavar="PATTERN=PREC",
                     help="Run the nodes matching PATTERN (a glob over node names and the model node names they "
                          "absorbed, e.g. '*LayerNorm*=fp32') in PREC: fp32, fp16 or bf16 (repeatable; the last "
                          "matching pattern wins). Casts are added where values cross precisions."),
        click.option("--strict", is_flag=True,
                     help="Strict precision: no tactic may substitute an approximation (such as a tanh GELU for an "
                          "erf GELU in half precision), and a --layer-precision pattern that matches no node is an "
                          "error."),
        click.option("--opt-level", type=click.IntRange(0, MAX_OPT_LEVEL), default=None,
                     help=f"Graph optimization level 0..{MAX_OPT_LEVEL} [default: 3]; 0 changes nothing numerically."),
        click.option("--disable-pass", "disable_passes", multiple=True, metavar="NAME",
                     help="Switch off one graph pass by name (repeatable); `tensorsmith passes` lists them."),
        click.option("--shapes", multiple=True, callback=shapes_option_callback, metavar="NAME:DIMS,...",
                     help="Concrete input shapes, e.g. input:1x3x224x224,mask:1x128."),
        click.option("--workspace", type=click.FloatRange(min=0), default=None, metavar="MIB",
                     help="Most scratch memory a tactic may use, in MiB."),
        click.option("--timing-cache", type=click.Path(dir_okay=False), default=None, metavar="FILE",
                     help="Timing cache file: read to skip tuning Layers seen before, updated after the build."),
    ]
    for opt in reversed(opts):
        fn = opt(fn)
    return fn


BUILD_PARAMS = ("target", "fp16", "bf16", "tf32", "int8", "layer_precision", "strict", "opt_level", "disable_passes",
                "shapes", "workspace", "timing_cache", "min_shapes", "opt_shapes", "max_shapes")


def options_from_params(ctx: click.Context, params: dict) -> BuildOptions:
    """BuildOptions from the parsed options; removes the build options from `params`."""
    from click.core import ParameterSource

    given = [k for k in BUILD_PARAMS if k in params and ctx.get_parameter_source(k) not in
             (ParameterSource.DEFAULT, None)]
    values = {k: params.pop(k) for k in BUILD_PARAMS if k in params}
    chosen = [f for f in ("fp16", "bf16", "tf32", "int8") if values.get(f)]
    if "int8" in chosen:
        raise CliError(INT8_NOT_YET)
    if len(chosen) > 1:
        raise click.UsageError(f"choose one precision, not {' and '.join('--' + f for f in chosen)}")
    ws = values.get("workspace")
    return BuildOptions(
        target=values.get("target") or default_target(),
        precision=chosen[0] if chosen else "fp32",
        opt_level=values.get("opt_level"),
        disable_passes=list(values.get("disable_passes") or ()),
        input_shapes=dict(values.get("shapes") or {}),
        workspace=None if ws is None else int(ws * 2**20),
        timing_cache=values.get("timing_cache"),
        layer_precisions=dict(values.get("layer_precision") or {}),
        strict=bool(values.get("strict")),
        given=given,
    )


def is_engine_file(path: str) -> bool:
    with open(path, "rb") as f:
        return f.read(len(ENGINE_MAGIC)) == ENGINE_MAGIC


def load_engine(path: str):
    """`tensorsmith.load(path)`, with a clear error if this tensorsmith cannot load engine files."""
    try:
        from .. import load
    except ImportError:
        raise CliError(f"cannot load engine '{path}': engine files are not available in this tensorsmith; "
                       "pass the ONNX model instead") from None
    return load(path)


def build_engine(path: str, options: BuildOptions, progress: bool = False):
    """Build MODEL (an ONNX file) with `options`; the progress line on stderr when `progress`."""
    from ..builder import build
    from .progress import show_progress

    with show_progress(click.get_text_stream("stderr"), enabled=progress):
        return build(path, **options.kwargs())


def open_engine(path: str, options: BuildOptions, progress: bool = False):
    """(engine, is_onnx): load an engine file, or build the ONNX model at `path`."""
    check_readable(path)
    if is_engine_file(path):
        if options.given:
            flags = ", ".join("--" + g.replace("_", "-") for g in options.given if g != "shapes")
            if flags:
                raise CliError(f"'{path}' is a built engine; build options ({flags}) apply to ONNX models only")
        return load_engine(path), False
    return build_engine(path, options, progress), True


def stderr_is_terminal() -> bool:
    stream = click.get_text_stream("stderr")
    try:
        return stream.isatty()
    except (AttributeError, ValueError):
        return False
