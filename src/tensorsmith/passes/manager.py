"""The pass manager: passes registered with a name, a description and an optimization level.

A pass is a function `Graph -> bool` (did it change the graph). `run_passes` runs, in
registration order, every pass whose level is at most `opt_level` and that is not disabled;
passes marked `fixed_point` repeat until they change nothing, and the whole pipeline repeats
until a round changes nothing (bounded), because one pass opens chances for another.
Passes marked `final` (the grouping into Layers) run once, after the rest.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Callable, Iterable

from ..errors import TensorsmithError
from ..ir import Graph

DEFAULT_OPT_LEVEL = 3
MAX_OPT_LEVEL = 5
MAX_ROUNDS = 8
MAX_FIXED_POINT_ITERATIONS = 50

PassFn = Callable[[Graph], bool]


@dataclass(frozen=True)
class PassInfo:
    name: str
    description: str
    level: int
    fn: PassFn
    fixed_point: bool = True
    final: bool = False


@dataclass
class PassRun:
    """What one pass did during a build, for the build log."""

    name: str
    changes: int = 0
    seconds: float = 0.0


PASSES: dict[str, PassInfo] = {}
PIPELINE: list[str] = []  # the order passes run in (set by the package); unlisted ones run after


def _ordered() -> list[PassInfo]:
    rank = {name: i for i, name in enumerate(PIPELINE)}
    return sorted(PASSES.values(), key=lambda p: rank.get(p.name, len(rank)))


def register_pass(name: str, level: int, description: str, fixed_point: bool = True, final: bool = False):
    """Decorator: register `fn(graph) -> bool` as a pass enabled from optimization level `level`."""

    def deco(fn: PassFn) -> PassFn:
        if name in PASSES:
            raise RuntimeError(f"pass '{name}' registered twice")
        if not 0 <= level <= MAX_OPT_LEVEL:
            raise ValueError(f"pass '{name}': level {level} outside 0..{MAX_OPT_LEVEL}")
        PASSES[name] = PassInfo(name, description, level, fn, fixed_point, final)
        return fn

    return deco


def check_pass_options(opt_level: int, disable: Iterable[str]) -> None:
    if not isinstance(opt_level, int) or not 0 <= opt_level <= MAX_OPT_LEVEL:
        raise TensorsmithError(f"opt_level must be an integer in 0..{MAX_OPT_LEVEL}, got {opt_level!r}")
    unknown = [d for d in disable if d not in PASSES]
    if unknown:
        raise TensorsmithError(
            f"unknown pass(es) {unknown} in disable_passes; the passes are: {', '.join(PASSES)}"
        )


def enabled_passes(opt_level: int = DEFAULT_OPT_LEVEL, disable: Iterable[str] = ()) -> list[PassInfo]:
    disable = list(disable)
    check_pass_options(opt_level, disable)
    return [p for p in _ordered() if p.level <= opt_level and p.name not in disable]


def _run_one(p: PassInfo, graph: Graph, log: dict[str, PassRun]) -> bool:
    run = log.setdefault(p.name, PassRun(p.name))
    changed_any = False
    t0 = time.perf_counter()
    for _ in range(MAX_FIXED_POINT_ITERATIONS if p.fixed_point else 1):
        if not p.fn(graph):
            break
        run.changes += 1
        changed_any = True
    run.seconds += time.perf_counter() - t0
    return changed_any


def run_passes(
    graph: Graph,
    opt_level: int = DEFAULT_OPT_LEVEL,
    disable: Iterable[str] = (),
    after_each: Callable[[str, Graph], None] | None = None,
) -> list[PassRun]:
    """Optimize `graph` in place. `after_each(name, graph)` runs after every pass that changed
    something (tests use it to check equivalence pass by pass)."""
    passes = enabled_passes(opt_level, disable)
    log: dict[str, PassRun] = {}
    for _ in range(MAX_ROUNDS):
        changed = False
        for p in passes:
            if p.final:
                continue
            if _run_one(p, graph, log):
                changed = True
                if after_each:
                    after_each(p.name, graph)
        if not changed:
            break
    for p in passes:
        if p.final and _run_one(p, graph, log) and after_each:
            after_each(p.name, graph)
    return list(log.values())


def describe_passes() -> str:
    """One line per pass: level, name, description (for --help and the docs)."""
    return "\n".join(f"  {p.level}  {p.name:34s} {p.description}" for p in _ordered())
