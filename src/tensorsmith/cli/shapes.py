"""trtexec's shape syntax: `input:1x3x224x224,mask:1x128` (a name, a colon, dims joined by `x`)."""

from __future__ import annotations

from typing import Iterable

import click

Shapes = dict[str, tuple[int, ...]]


def parse_shapes(text: str) -> Shapes:
    """`"x:1x3x224x224,mask:1x128"` -> {"x": (1, 3, 224, 224), "mask": (1, 128)}; `"s:"` is a scalar.

    The name is everything before the last colon, so names with colons work."""
    shapes: Shapes = {}
    for item in text.split(","):
        item = item.strip()
        if not item:
            continue
        name, sep, dims = item.rpartition(":")
        name = name.strip().strip("'\"")
        if not sep or not name:
            raise ValueError(f"'{item}' is not NAME:DIMS (e.g. input:1x3x224x224)")
        try:
            shape = tuple(int(d) for d in dims.lower().split("x")) if dims.strip() else ()
        except ValueError:
            raise ValueError(f"'{item}': dims must be integers joined by 'x' (e.g. 1x3x224x224)") from None
        if any(d < 0 for d in shape):
            raise ValueError(f"'{item}': dims must not be negative")
        if name in shapes:
            raise ValueError(f"input '{name}' is given twice")
        shapes[name] = shape
    return shapes


def shapes_option_callback(ctx: click.Context, param: click.Parameter, values: Iterable[str]) -> Shapes:
    """Click callback for a repeatable shapes option: merge every occurrence."""
    out: Shapes = {}
    for text in values or ():
        try:
            parsed = parse_shapes(text)
        except ValueError as e:
            raise click.BadParameter(str(e), ctx=ctx, param=param) from None
        for name in parsed:
            if name in out:
                raise click.BadParameter(f"input '{name}' is given twice", ctx=ctx, param=param)
        out.update(parsed)
    return out


def format_shape(shape: Iterable) -> str:
    """(1, 3, 224, 224) -> "1x3x224x224" (symbolic dims by name)."""
    shape = list(shape)
    return "x".join(str(d) for d in shape) if shape else "scalar"


def profiles_from_options(min_shapes: Shapes, opt_shapes: Shapes, max_shapes: Shapes) -> list[dict] | None:
    """One optimization profile from --min/--opt/--max-shapes, or None when only --opt-shapes (or none) is given.

    As trtexec, a ranged input needs all three; the builder checks min <= opt <= max and ranks."""
    if not min_shapes and not max_shapes:
        return None
    names = set(min_shapes) | set(opt_shapes) | set(max_shapes)
    for name in sorted(names):
        missing = [flag for flag, given in (("--min-shapes", min_shapes), ("--opt-shapes", opt_shapes),
                                           ("--max-shapes", max_shapes)) if name not in given]
        if missing:
            raise click.UsageError(f"input '{name}' needs a shape in {', '.join(missing)} too "
                                   "(a dynamic input takes --min-shapes, --opt-shapes and --max-shapes)")
    return [{n: {"min": min_shapes[n], "opt": opt_shapes[n], "max": max_shapes[n]} for n in sorted(names)}]
