"""Input tensors for run/bench/compare: from .npy/.npz files, or random (seeded) by the engine's I/O."""

from __future__ import annotations

import zipfile

import click
import numpy as np
import torch

from .common import CliError, check_readable
from .output import note
from .shapes import Shapes, format_shape


def input_options(fn):
    opts = [
        click.option("--input", "input_files", multiple=True, metavar="NAME=FILE.npy",
                     help="Feed input NAME from a .npy file (repeatable)."),
        click.option("--inputs", "inputs_npz", type=click.Path(dir_okay=False), default=None, metavar="FILE.npz",
                     help="Feed inputs from a .npz file, one array per input name."),
        click.option("--seed", type=int, default=0, show_default=True,
                     help="Seed of the random inputs (made for every input not given)."),
    ]
    for opt in reversed(opts):
        fn = opt(fn)
    return fn


def load_input_files(input_files: tuple[str, ...], inputs_npz: str | None) -> dict[str, np.ndarray]:
    feeds: dict[str, np.ndarray] = {}
    if inputs_npz:
        check_readable(inputs_npz, "inputs file")
        try:
            with np.load(inputs_npz, allow_pickle=False) as data:
                if not hasattr(data, "files"):
                    raise CliError(f"cannot read inputs file '{inputs_npz}': it is a .npy array, not a .npz "
                                   "archive; use --input NAME=FILE.npy")
                feeds.update({k: data[k] for k in data.files})
        except (OSError, ValueError, zipfile.BadZipFile, EOFError):
            raise CliError(f"cannot read inputs file '{inputs_npz}': not a NumPy .npz archive of arrays "
                           "(write one with numpy.savez)") from None
    for item in input_files:
        name, sep, path = item.partition("=")
        if not sep or not name or not path:
            raise click.BadParameter(f"'{item}' is not NAME=FILE.npy", param_hint="'--input'")
        check_readable(path, "input file")
        try:
            arr = np.load(path, allow_pickle=False)
        except (OSError, ValueError, EOFError):
            raise CliError(f"cannot read input file '{path}' (for '{name}'): not a NumPy .npy array "
                           "(write one with numpy.save)") from None
        if not isinstance(arr, np.ndarray):
            raise CliError(f"input file '{path}' (for '{name}') is a .npz archive; use --inputs FILE.npz")
        feeds[name] = arr
    return feeds


def input_shapes(engine, shapes: Shapes, quiet: bool = False) -> Shapes:
    """A concrete shape per engine input: --shapes, else the model's, with dynamic dims from the
    engine's first optimization profile (its `opt`) or 1."""
    names = {s.name for s in engine.inputs}
    unknown = sorted(set(shapes) - names)
    if unknown:
        raise CliError(f"--shapes names {unknown}, not inputs of the model; its inputs are {sorted(names)}")
    opt = engine.profiles[0].opt_shapes(engine.inputs) if getattr(engine, "profiles", None) else {}
    out: Shapes = {}
    for spec in engine.inputs:
        if spec.name in shapes:
            out[spec.name] = tuple(shapes[spec.name])
        elif spec.name in opt:
            out[spec.name] = tuple(opt[spec.name])
        elif spec.type.shape is None:
            raise CliError(f"input '{spec.name}' has an unknown rank; give its shape with --shapes {spec.name}:DIMS")
        else:
            out[spec.name] = tuple(d if isinstance(d, int) else 1 for d in spec.type.shape)
            if not spec.type.is_static and not quiet:
                note(f"note: input '{spec.name}' ({spec.type}) has dynamic dims; using {format_shape(out[spec.name])} "
                     f"(set them with --shapes {spec.name}:DIMS)")
    return out


def random_inputs(engine, shapes: Shapes, seed: int = 0) -> dict[str, np.ndarray]:
    """Seeded random arrays: normal floats, small non-negative integers (safe as indices), booleans."""
    from ..runtime.engine import _to_numpy

    gen = torch.Generator().manual_seed(seed)
    feeds = {}
    for spec in engine.inputs:
        shape = shapes[spec.name]
        dtype = spec.type.dtype
        tdtype = dtype.torch if dtype is not None else torch.float32
        if tdtype == torch.bool:
            t = torch.randint(0, 2, shape, generator=gen).bool()
        elif tdtype.is_floating_point:
            t = torch.randn(shape, generator=gen).to(tdtype)
        elif tdtype.is_complex:
            t = torch.randn(shape, generator=gen, dtype=tdtype)
        else:
            t = torch.randint(0, 8, shape, generator=gen).to(tdtype)
        feeds[spec.name] = _to_numpy(t)
    return feeds


def make_inputs(engine, input_files, inputs_npz, shapes: Shapes, seed: int, quiet: bool = False) -> dict[str, np.ndarray]:
    """Given arrays, and random ones for the inputs not given (their names checked against the engine)."""
    feeds = load_input_files(input_files, inputs_npz)
    names = [s.name for s in engine.inputs]
    unknown = sorted(set(feeds) - set(names))
    if unknown:
        raise CliError(f"inputs {unknown} are not inputs of the model; its inputs are {names}")
    given = {n: tuple(a.shape) for n, a in feeds.items()}
    todo = [s for s in engine.inputs if s.name not in feeds]
    if todo:
        shapes = {**given, **shapes}
        full = input_shapes(engine, shapes, quiet=quiet)
        rand = random_inputs(engine, full, seed)
        feeds.update({n: rand[n] for n in (s.name for s in todo)})
    return {n: feeds[n] for n in names}
