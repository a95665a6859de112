"""Choosing a tactic per Layer: time every applicable (tactic, config) on the real shapes,
keep the fastest whose outputs match the reference's on the same random inputs."""

from __future__ import annotations

import logging
from dataclasses import dataclass, field

import torch

from ..tactics import REFERENCE, TACTICS, LayerContext, Runner
from .cache import CacheEntry, TimingCache
from .check import memory_format_of, outputs_match, random_inputs
from .timing import time_runner

log = logging.getLogger("tensorsmith.build")


@dataclass
class Trial:
    tactic: str
    config: dict
    ms: float | None = None
    status: str = "ok"  # ok | wrong | failed | workspace


@dataclass
class Choice:
    tactic: str
    config: dict
    ms: float | None
    runner: Runner
    trials: list[Trial] = field(default_factory=list)
    cached: bool = False
    output_formats: list[str] = field(default_factory=list)  # layouts the runner's outputs come in


def _candidates(lc: LayerContext, allowed: set[str] | None) -> list[tuple[str, dict]]:
    out = []
    for name, t in TACTICS.items():
        if allowed is not None and name not in allowed and name != REFERENCE.name:
            continue
        try:
            if not t.applies(lc):
                continue
            out.extend((name, dict(c)) for c in t.configs(lc))
        except Exception as e:  # a tactic that cannot even look at the layer is not a candidate
            log.debug("  %s: not applicable (%s: %s)", name, type(e).__name__, e)
    return out


def choose_tactic(
    lc: LayerContext,
    cache: TimingCache | None = None,
    workspace_limit: int | None = None,
    allowed: set[str] | None = None,
    tune: bool = True,
    input_formats: list[str] | None = None,
) -> Choice:
    """The fastest correct runner for the layer. Without `tune` (or without a GPU to time on)
    the first correct candidate in registration order after the reference wins. Inputs are
    timed in the layouts the run hands over (`input_formats`)."""
    layout = ",".join(input_formats or [])
    choice = _choose(lc, cache, workspace_limit, allowed, tune, random_inputs(lc, formats=input_formats), layout)
    with torch.no_grad():
        choice.output_formats = [memory_format_of(t) for t in choice.runner(random_inputs(lc, formats=input_formats))]
    return choice


def _choose(lc, cache, workspace_limit, allowed, tune, inputs, layout: str) -> Choice:
    ref = REFERENCE.build(lc, {})
    with torch.no_grad():
        want = ref(inputs)

    def attempt(name: str, config: dict) -> tuple[Runner | None, str]:
        tactic = TACTICS[name]
        if workspace_limit is not None and tactic.workspace_bytes(lc, config) > workspace_limit:
            return None, "workspace"
        try:
            runner = tactic.build(lc, config)
            with torch.no_grad():
                got = runner(inputs)
        except Exception as e:
            log.debug("  %s %s failed: %s: %s", name, config, type(e).__name__, e)
            return None, "failed"
        return (runner, "ok") if outputs_match(got, want, lc.dtype) else (None, "wrong")

    if cache is not None:
        hit = cache.get(lc, layout)
        if hit is not None and hit.tactic in TACTICS:
            runner, status = attempt(hit.tactic, hit.config)
            if runner is not None:
                return Choice(hit.tactic, hit.config, hit.ms, runner, cached=True)

    candidates = _candidates(lc, allowed)
    log.debug("%s: trying %d kernels", lc.layer.name, len(candidates))
    trials: list[Trial] = []
    best: Choice | None = None
    for name, config in candidates:
        runner, status = attempt(name, config)
        trial = Trial(name, config, status=status)
        trials.append(trial)
        if runner is None:
            log.debug("  %-28s %-40s %s", name, _fmt(config), status)
            continue
        if not tune:
            if name != REFERENCE.name or best is None:
                best = Choice(name, config, None, runner, trials)
            if name != REFERENCE.name:
                break
            continue
        with torch.no_grad():
            trial.ms = time_runner(lambda: runner(inputs), lc.device)
        log.debug("  %-28s %-40s %8.4f ms", name, _fmt(config), trial.ms)
        if best is None or trial.ms < best.ms:
            best = Choice(name, config, trial.ms, runner, trials)
    if best is None:  # cannot happen while the reference applies; keep a clear message if it does
        raise RuntimeError(f"no tactic runs layer '{lc.layer.name}' correctly")
    best.trials = trials
    log.debug("%s: chose %s %s%s", lc.layer.name, best.tactic, _fmt(best.config),
              f" ({best.ms:.4f} ms)" if best.ms is not None else "")
    if cache is not None and best.ms is not None:
        cache.put(lc, CacheEntry(best.tactic, best.config, best.ms), layout)
    return best


def _fmt(config: dict) -> str:
    return ",".join(f"{k}={v}" for k, v in sorted(config.items())) or "-"
