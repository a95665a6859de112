"""Printing: aligned text tables, JSON, numbers and byte sizes."""

from __future__ import annotations

import json
import math
from typing import Any, Iterable, Sequence

import click
import numpy as np


def table(headers: Sequence[str], rows: Iterable[Sequence[Any]], align: str | None = None) -> str:
    """A plain text table; `align` is one char per column, "l" or "r" (default: numbers right)."""
    rows = [[cell(v) for v in r] for r in rows]
    widths = [max([len(h)] + [len(r[i]) for r in rows]) for i, h in enumerate(headers)]
    if align is None:
        align = "l" + "r" * (len(headers) - 1)

    def line(values):
        return "  ".join(v.ljust(w) if a == "l" else v.rjust(w) for v, w, a in zip(values, widths, align)).rstrip()

    out = [line(headers), line(["-" * w for w in widths])]
    out += [line(r) for r in rows]
    return "\n".join(out)


def cell(v: Any) -> str:
    if v is None:
        return "-"
    if isinstance(v, float):
        return number(v)
    return str(v)


def number(v: float | None) -> str:
    """Four significant digits, scientific notation for the very small and very large."""
    if v is None:
        return "-"
    if v == 0 or math.isnan(v) or math.isinf(v):
        return str(v)
    if abs(v) >= 1e6 or abs(v) < 1e-3:
        return f"{v:.3e}"
    return f"{v:.1f}" if abs(v) >= 1000 else f"{v:.4g}"


def mib(n: int | None) -> str:
    """A byte count in B, KiB, MiB or GiB."""
    if n is None:
        return "-"
    for unit, scale in (("GiB", 2**30), ("MiB", 2**20), ("KiB", 2**10)):
        if n >= scale:
            return f"{n / scale:.2f} {unit}"
    return f"{n} B"


def to_jsonable(obj: Any) -> Any:
    if isinstance(obj, dict):
        return {str(k): to_jsonable(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [to_jsonable(v) for v in obj]
    if isinstance(obj, np.generic):
        return obj.item()
    if isinstance(obj, float) and (math.isnan(obj) or math.isinf(obj)):
        return str(obj)
    return obj


def echo_json(data: Any) -> None:
    click.echo(json.dumps(to_jsonable(data), indent=2))


def note(message: str) -> None:
    """A remark for the user on stderr, so that stdout stays data (--json)."""
    click.echo(message, err=True)
