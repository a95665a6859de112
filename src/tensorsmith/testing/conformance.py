"""Runs the ONNX backend node test cases through import + the CPU engine.

The cases come from the installed onnx package (`onnx.backend.test.case.node.collect_testcases`),
which builds each model and its expected outputs in memory. Each case is compared with the
tolerances the case declares, and the dtype must match, as ONNX's own backend runner checks.

    python -m tensorsmith.testing.conformance [--ops Add,Conv] [-k REGEX] [--failures]
"""

from __future__ import annotations

import argparse
import contextlib
import io
import json
import re
import signal
import sys
import time
import warnings
from collections import defaultdict
from dataclasses import dataclass, field

import numpy as np
import onnx

from ..errors import UnsupportedDTypeError, UnsupportedOperatorError
from ..ops import is_supported

CASE_TIMEOUT_S = 60
# The expected outputs of cases with these ops are draws from numpy's global random generator,
# which no implementation can reproduce: only dtypes and shapes are compared, and the case
# counts as skipped (never as passed).
RANDOM_DRAW_OPS = {"Bernoulli", "RandomUniform", "RandomUniformLike", "RandomNormal", "RandomNormalLike", "Multinomial"}


@dataclass
class CaseResult:
    name: str
    op: str
    status: str  # passed | failed | unsupported | skipped
    claimed: bool
    detail: str = ""


@dataclass
class Report:
    results: list[CaseResult] = field(default_factory=list)

    def count(self, status: str, claimed: bool | None = None) -> int:
        return sum(1 for r in self.results if r.status == status and (claimed is None or r.claimed == claimed))

    @property
    def total(self) -> int:
        return len(self.results)

    @property
    def claimed_total(self) -> int:
        return sum(1 for r in self.results if r.claimed)

    @property
    def claimed_pass_rate(self) -> float:
        return self.count("passed", True) / max(1, self.claimed_total)

    @property
    def coverage(self) -> float:
        return self.claimed_total / max(1, self.total)

    def per_op(self) -> dict[str, dict[str, int]]:
        table: dict[str, dict[str, int]] = defaultdict(lambda: defaultdict(int))
        for r in self.results:
            table[r.op][r.status] += 1
        return table

    def summary_line(self) -> str:
        failed = self.count("failed") + self.count("unsupported")
        return f"{self.count('passed')} passed, {failed} failed, {self.count('skipped')} skipped"

    def to_json(self) -> dict:
        return {
            "passed": self.count("passed"), "failed": self.count("failed"),
            "unsupported": self.count("unsupported"), "skipped": self.count("skipped"),
            "claimed_cases": self.claimed_total, "total_cases": self.total,
            "claimed_pass_rate": self.claimed_pass_rate, "coverage": self.coverage,
            "cases": [r.__dict__ for r in self.results],
        }


def _all_op_types(g: onnx.GraphProto) -> set[tuple[str, str]]:
    ops = set()
    for n in g.node:
        ops.add(("" if n.domain == "ai.onnx" else n.domain, n.op_type))
        for a in n.attribute:
            if a.type == onnx.AttributeProto.GRAPH:
                ops |= _all_op_types(a.g)
            for sub in a.graphs:
                ops |= _all_op_types(sub)
    return ops


_SCHEMA_NAMES = sorted({s.name for s in onnx.defs.get_all_schemas_with_history()}, key=len, reverse=True)


def case_op(name: str, ops: set[tuple[str, str]]) -> str:
    """The op a case is about: the longest ONNX op name its test name starts with."""
    key = name.removeprefix("test_").replace("_", "").lower()
    for op in _SCHEMA_NAMES:
        if key.startswith(op.lower()):
            return op
    return sorted(o for _, o in ops)[0] if ops else "?"


class _Timeout(Exception):
    pass


@contextlib.contextmanager
def _time_limit(seconds: int):
    def handler(signum, frame):
        raise _Timeout(f"took more than {seconds} s")

    if not hasattr(signal, "SIGALRM"):
        yield
        return
    old = signal.signal(signal.SIGALRM, handler)
    signal.alarm(seconds)
    try:
        yield
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, old)


def _as_array(x):
    return onnx.numpy_helper.to_array(x) if isinstance(x, onnx.TensorProto) else x


def _compare(expected: list, actual: list, rtol: float, atol: float, values: bool = True) -> None:
    if len(expected) != len(actual):
        raise AssertionError(f"{len(actual)} outputs, expected {len(expected)}")
    for i, (e, a) in enumerate(zip(expected, actual)):
        e = np.asarray(e)
        a = np.asarray(a)
        if e.dtype != a.dtype:
            raise AssertionError(f"output {i}: dtype {a.dtype}, expected {e.dtype}")
        if not values:
            if e.shape != a.shape:
                raise AssertionError(f"output {i}: shape {a.shape}, expected {e.shape}")
            continue
        if e.dtype == object:
            np.testing.assert_array_equal(a, e)
        else:
            np.testing.assert_allclose(a, e, rtol=rtol, atol=atol, err_msg=f"output {i}")


def run_case(case, opt_level: int = 3) -> CaseResult:
    import tensorsmith

    ops = _all_op_types(case.model.graph)
    op = case_op(case.name, ops)
    claimed = all(is_supported(o, d) for d, o in ops)
    random_draws = any(o in RANDOM_DRAW_OPS for _, o in ops)
    try:
        with _time_limit(CASE_TIMEOUT_S):
            engine = tensorsmith.build(case.model, opt_level=opt_level)
            for inputs, outputs in case.data_sets:
                feeds = {spec.name: _as_array(x) for spec, x in zip(engine.inputs, inputs)}
                res = engine.run(feeds)
                _compare([_as_array(o) for o in outputs], list(res.values()), case.rtol, case.atol, values=not random_draws)
    except UnsupportedOperatorError as e:
        return CaseResult(case.name, op, "unsupported", claimed, str(e))
    except UnsupportedDTypeError as e:
        return CaseResult(case.name, op, "skipped", claimed, str(e))
    except Exception as e:  # any failure of a case is a result, not a crash of the harness
        return CaseResult(case.name, op, "failed", claimed, f"{type(e).__name__}: {str(e)[:400]}")
    if random_draws:
        return CaseResult(case.name, op, "skipped", claimed, "random draws: dtype and shape match, values not comparable")
    return CaseResult(case.name, op, "passed", claimed)


def collect_cases():
    from onnx.backend.test.case.node import collect_testcases

    with warnings.catch_warnings(), contextlib.redirect_stderr(io.StringIO()):
        warnings.simplefilter("ignore")
        np.seterr(all="ignore")
        return collect_testcases()


def run(ops: set[str] | None = None, pattern: str | None = None, progress=None, opt_level: int = 3) -> Report:
    report = Report()
    cases = collect_cases()
    rx = re.compile(pattern) if pattern else None
    with warnings.catch_warnings(), np.errstate(all="ignore"):
        warnings.simplefilter("ignore")
        for case in cases:
            if rx and not rx.search(case.name):
                continue
            if ops and case_op(case.name, _all_op_types(case.model.graph)) not in ops:
                continue
            r = run_case(case, opt_level)
            report.results.append(r)
            if progress:
                progress(r)
    return report


def format_report(report: Report, failures: bool = False) -> str:
    lines = [f"{'op':28s} {'pass':>5s} {'fail':>5s} {'unsup':>5s} {'skip':>5s}"]
    for op, c in sorted(report.per_op().items()):
        lines.append(f"{op:28s} {c['passed']:5d} {c['failed']:5d} {c['unsupported']:5d} {c['skipped']:5d}")
    if failures:
        lines.append("")
        for r in report.results:
            if r.status in ("failed", "skipped") or (r.status == "unsupported" and r.claimed):
                lines.append(f"{r.status.upper():8s} {r.name}: {r.detail}")
    lines.append("")
    lines.append(
        f"claimed ops cover {report.claimed_total}/{report.total} cases ({100 * report.coverage:.1f}%); "
        f"{report.count('passed', True)}/{report.claimed_total} of those pass ({100 * report.claimed_pass_rate:.1f}%)"
    )
    lines.append(report.summary_line())
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m tensorsmith.testing.conformance", description=__doc__.split("\n")[0])
    ap.add_argument("--ops", help="comma-separated op names to run (default: all)")
    ap.add_argument("-k", dest="pattern", help="regex on the case name")
    ap.add_argument("--failures", action="store_true", help="list each failing case with its error")
    ap.add_argument("--json", help="write the full results to this file")
    ap.add_argument("--opt-level", type=int, default=3, help="graph optimization level of the builds (0..5)")
    args = ap.parse_args(argv)
    t0 = time.perf_counter()
    report = run(set(args.ops.split(",")) if args.ops else None, args.pattern, opt_level=args.opt_level)
    print(format_report(report, args.failures))
    print(f"({time.perf_counter() - t0:.0f} s)", file=sys.stderr)
    if args.json:
        with open(args.json, "w") as f:
            json.dump(report.to_json(), f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
