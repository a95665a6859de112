"""The results table: one row per (model, batch, precision), each system's median ms, our ratio.

A result row is plain data (it is also what the JSON holds):

    {"model": "resnet50", "batch": 1, "precision": "fp16",
     "roofline": {"flops": ..., "bytes": ..., "bound_ms": ...} | None,
     "systems": {"ours": {"status": "ok", "median_ms": 1.2, "rel_err": 1e-3, ...},
                 "compile": {"status": "timeout", "reason": "did not build in 120 s"}, ...}}
"""

from __future__ import annotations

from typing import Iterable, Sequence

OURS = "ours"
PEERS = ("eager", "cudagraph", "compile", "max-autotune")
SYSTEMS = (OURS, *PEERS)
# Max abs error over max |fp32 reference| above which a result is flagged "!" in the table.
TOLERANCE = {"fp32": 1e-3, "tf32": 2e-2, "fp16": 5e-2, "bf16": 1e-1}
_STATUS_MARK = {"failed": "fail", "timeout": "t/o", "skipped": "skip"}


def systems_in(rows: Iterable[dict]) -> list[str]:
    """The systems that appear in any row, in table order."""
    seen = {name for row in rows for name in row["systems"]}
    return [s for s in SYSTEMS if s in seen]


def best_peer(row: dict) -> tuple[str, float] | None:
    """The fastest peer that ran, as (name, median ms); None when no peer ran."""
    times = [(name, s["median_ms"]) for name, s in row["systems"].items()
             if name != OURS and s.get("status") == "ok"]
    return min(times, key=lambda t: t[1]) if times else None


def speedup(row: dict) -> tuple[str, float] | None:
    """Our ratio to the best peer: best peer's ms / our ms (above 1: tensorsmith is faster)."""
    ours = row["systems"].get(OURS, {})
    best = best_peer(row)
    if best is None or ours.get("status") != "ok" or not ours.get("median_ms"):
        return None
    return best[0], best[1] / ours["median_ms"]


def format_ms(ms: float) -> str:
    return f"{ms:.3f}" if ms < 1 else f"{ms:.2f}" if ms < 100 else f"{ms:.1f}"


def out_of_tolerance(result: dict, precision: str) -> bool:
    err = result.get("rel_err")
    return err is not None and err > TOLERANCE.get(precision, 0.0)


class _Notes:
    """Footnotes for cells that hold no time; one number per distinct (status, reason)."""

    def __init__(self):
        self.index: dict[tuple[str, str], int] = {}

    def mark(self, result: dict) -> str:
        status = result.get("status", "failed")
        key = (status, result.get("reason") or status)
        n = self.index.setdefault(key, len(self.index) + 1)
        return f"{_STATUS_MARK.get(status, status)}[{n}]"

    def lines(self) -> list[str]:
        return [f"[{n}] {status}: {reason}" for (status, reason), n in self.index.items()]


def table_rows(rows: Iterable[dict], systems: Sequence[str] = SYSTEMS) -> tuple[list[str], list[list[str]], list[str]]:
    """Header, cells and footnotes of the table (what both the text and the markdown forms show)."""
    header = ["model", "batch", "prec", *systems, "vs best peer", "bound ms", "ours %roof"]
    notes = _Notes()
    flagged = False
    cells = []
    for row in rows:
        line = [row["model"], str(row["batch"]), row["precision"]]
        for name in systems:
            r = row["systems"].get(name)
            if r is None:
                line.append("-")
            elif r.get("status") == "ok":
                bad = out_of_tolerance(r, row["precision"])
                flagged |= bad
                line.append(format_ms(r["median_ms"]) + ("!" if bad else ""))
            else:
                line.append(notes.mark(r))
        ratio = speedup(row)
        line.append(f"{ratio[1]:.2f}x {ratio[0]}" if ratio else "-")
        roof = row.get("roofline") or {}
        line.append(format_ms(roof["bound_ms"]) if roof.get("bound_ms") else "-")
        ours = row["systems"].get(OURS, {})
        line.append(f"{100 * roof['bound_ms'] / ours['median_ms']:.0f}%"
                    if roof.get("bound_ms") and ours.get("status") == "ok" else "-")
        cells.append(line)
    footer = notes.lines()
    if flagged:
        footer.append("! max abs error above " + ", ".join(f"{k} {v:g}" for k, v in TOLERANCE.items())
                      + " x max |fp32 reference|")
    return header, cells, footer


_LEGEND = ("median ms per call (device events); vs best peer = best peer ms / ours ms (>1: tensorsmith "
           "faster); bound = roofline lower bound max(FLOPs/peak, bytes/bandwidth)")


def format_table(rows: Iterable[dict], systems: Sequence[str] = SYSTEMS) -> str:
    """The table as aligned text, with its legend and footnotes below."""
    header, cells, footer = table_rows(rows, systems)
    widths = [max(len(r[i]) for r in [header, *cells]) for i in range(len(header))]
    left = 3      # model, batch and precision read left-aligned; numbers right-aligned

    def fmt(r):
        return "  ".join(c.ljust(w) if i < left else c.rjust(w) for i, (c, w) in enumerate(zip(r, widths)))
    rule = "-" * len(fmt(header))
    return "\n".join([fmt(header), rule, *map(fmt, cells), rule, _LEGEND, *footer])


def format_markdown(rows: Iterable[dict], systems: Sequence[str] = SYSTEMS) -> str:
    header, cells, footer = table_rows(rows, systems)
    align = ["---"] * 3 + ["---:"] * (len(header) - 3)
    lines = ["| " + " | ".join(r) + " |" for r in [header, align, *cells]]
    return "\n".join([*lines, "", _LEGEND + ".", *[f"- {f}" for f in footer]])


def results_markdown(data: dict) -> str:
    """A RESULTS.md entry for one run: date, GPU, versions, device peaks, command, table."""
    meta = data.get("meta", {})
    versions = ", ".join(f"{k} {v}" for k, v in meta.get("versions", {}).items() if v)
    peaks = meta.get("peaks") or {}
    peak_text = ", ".join(f"{p} {t} TFLOP/s" for p, t in peaks.get("matrix_tflops", {}).items())
    if peaks.get("copy_gbps"):
        peak_text += f"; copy {peaks['copy_gbps']} GB/s"
    return "\n".join([
        f"## {meta.get('date', '?')} — {meta.get('gpu', '?')}",
        "",
        f"- command: `{meta.get('command', '?')}`",
        f"- commit: {meta.get('commit', '?')}",
        f"- versions: {versions}",
        f"- measured peaks: {peak_text or '?'}",
        "",
        format_markdown(data.get("results", []), systems_in(data.get("results", [])) or SYSTEMS),
        "",
    ])
