"""The tuner: a wrong tactic is never chosen, the timing cache is reused, plans run on the CPU too."""

import numpy as np
import pytest
import torch

import tensorsmith
from tensorsmith.engine import Plan
from tensorsmith.runtime import Engine
from tensorsmith.tactics import TACTICS, Tactic
from tensorsmith.testing.layers import layer_contexts
from tensorsmith.tuner import TimingCache, choose_tactic

from ..engine.test_report import conv_bn_relu_model


class _Negating(Tactic):
    """A fast but wrong tactic: it must lose to the reference."""

    name = "test.wrong"

    def applies(self, lc):
        return True

    def compile(self, lc, config):
        from tensorsmith.tactics import REFERENCE

        ref = REFERENCE.compile(lc, {})
        return lambda inputs: [-t if t.dtype.is_floating_point else t for t in ref(inputs)]


class _Correct(Tactic):
    name = "test.correct"

    def applies(self, lc):
        return True

    def configs(self, lc):
        return [{"variant": 1}, {"variant": 2}]

    def compile(self, lc, config):
        from tensorsmith.tactics import REFERENCE

        return REFERENCE.compile(lc, {})


@pytest.fixture
def extra_tactics():
    added = [_Negating(), _Correct()]
    for t in added:
        TACTICS[t.name] = t
    yield
    for t in added:
        del TACTICS[t.name]


def test_wrong_tactic_is_never_chosen(extra_tactics):
    for lc in layer_contexts(conv_bn_relu_model(), input_shapes={"x": (2, 3, 8, 8)}):
        choice = choose_tactic(lc)
        assert choice.tactic != "test.wrong"
        statuses = {t.tactic: t.status for t in choice.trials}
        assert statuses["test.wrong"] == "wrong"
        assert statuses["test.correct"] == "ok"
        assert all(t.ms is not None for t in choice.trials if t.status == "ok")


def test_timing_cache_round_trip(tmp_path, extra_tactics):
    path = tmp_path / "timing.json"
    cache = TimingCache(path)
    lcs = layer_contexts(conv_bn_relu_model(), input_shapes={"x": (2, 3, 8, 8)})
    first = [choose_tactic(lc, cache=cache) for lc in lcs]
    cache.save()
    again = TimingCache(path)
    second = [choose_tactic(lc, cache=again) for lc in layer_contexts(conv_bn_relu_model(), input_shapes={"x": (2, 3, 8, 8)})]
    assert all(c.cached for c in second) and again.hits == len(lcs) and again.misses == 0
    assert [(c.tactic, c.config) for c in first] == [(c.tactic, c.config) for c in second]
    # another shape is another key
    other = TimingCache(path)
    choose_tactic(layer_contexts(conv_bn_relu_model(), input_shapes={"x": (4, 3, 8, 8)})[0], cache=other)
    assert other.misses == 1
    # a strict build does not reuse a non-strict build's choices (they may approximate)
    strict = layer_contexts(conv_bn_relu_model(), input_shapes={"x": (2, 3, 8, 8)})[0]
    strict.strict = True
    choose_tactic(strict, cache=other)
    assert other.misses == 2


def test_corrupt_timing_cache_is_a_typed_error(tmp_path):
    path = tmp_path / "timing.json"
    path.write_text("{not json")
    with pytest.raises(tensorsmith.errors.TensorsmithError, match="timing cache.*delete it"):
        TimingCache(path)


def test_layer_plan_runs_on_the_cpu_like_the_interpreter():
    from tensorsmith.builder import plan_layers, specialize_shapes
    from tensorsmith.passes import run_passes

    graph = tensorsmith.import_onnx(conv_bn_relu_model())
    specialize_shapes(graph, {"x": (2, 3, 8, 8)})
    run_passes(graph)
    plans, runners = plan_layers(graph, torch.device("cpu"), tune=False, allowed={"reference"})
    plan = Plan.from_graph(graph, "cpu")
    plan.layers = plans
    engine = Engine(plan, runners=runners)
    x = np.random.default_rng(0).standard_normal((2, 3, 8, 8)).astype(np.float32)
    expected = tensorsmith.build(conv_bn_relu_model()).run({"x": x})["y"]
    np.testing.assert_allclose(engine.run({"x": x})["y"], expected, rtol=1e-5, atol=1e-6)
    assert [p.tactic for p in plans] == ["reference"] * len(plans)
    profile = engine.profile({"x": x}, repeats=3)
    assert [name for name, _, _ in profile] == [p.name for p in plans] and all(ms >= 0 for _, _, ms in profile)


def test_plan_with_every_tactic_matches_the_interpreter():
    """On the CPU the Triton tactics run under the interpreter: the tuner may pick them."""
    from tensorsmith.builder import plan_layers, specialize_shapes
    from tensorsmith.passes import run_passes

    graph = tensorsmith.import_onnx(conv_bn_relu_model())
    specialize_shapes(graph, {"x": (1, 3, 8, 8)})
    run_passes(graph)
    plans, runners = plan_layers(graph, torch.device("cpu"), tune=False)
    plan = Plan.from_graph(graph, "cpu")
    plan.layers = plans
    x = np.random.default_rng(0).standard_normal((1, 3, 8, 8)).astype(np.float32)
    expected = tensorsmith.build(conv_bn_relu_model()).run({"x": x})["y"]
    np.testing.assert_allclose(Engine(plan, runners=runners).run({"x": x})["y"], expected, rtol=1e-4, atol=1e-5)
