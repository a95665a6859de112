"""Activations bound to the context's arena: offsets reused by liveness, views keep their base
alive, results identical to runners that allocate (runtime/arena.py, engine/memory.py).

The Executor tests use small runners written here (a bound one copies its result into `out`);
the engine tests build a plan of Triton Layers run on the CPU under Triton's interpreter."""

from __future__ import annotations

import os

import torch

if not torch.cuda.is_available():
    os.environ["TRITON_INTERPRET"] = "1"  # before tensorsmith's triton modules are imported

import numpy as np
import pytest
from onnx import TensorProto, helper, numpy_helper

import tensorsmith
from tensorsmith.cli.inspect import render
from tensorsmith.engine import LayerPlan
from tensorsmith.engine.memory import plan_memory
from tensorsmith.runtime import Engine
from tensorsmith.runtime.arena import Arena
from tensorsmith.runtime.executor import Executor
from tensorsmith.tactics.base import binds_outputs, given_output, output_binding

from .layered import build_layered

CPU = torch.device("cpu")
# Triton tactics (run by the interpreter here) and the rest, without the GPU-only ones
ALLOWED = {"reference", "torch.view", "triton.elementwise", "triton.norm", "triton.gemm", "triton.pool", "triton.conv"}
pytestmark = pytest.mark.filterwarnings("ignore::RuntimeWarning")  # the interpreter computes masked lanes too


@pytest.fixture(autouse=True)
def _interpret(monkeypatch):
    monkeypatch.setenv("TRITON_INTERPRET", "1")


# -- the Executor, with runners written here ----------------------------------------------------

def bound(fn):
    """A runner of one output that writes into `out[0]` when given one of its layout."""
    def run(inputs, out=None):
        y = fn(*inputs)
        o = given_output(out, 0, tuple(y.shape), y.dtype, _format(y))
        return [y] if o is None else [o.copy_(y)]
    return binds_outputs(run, [True])


def plain(fn):
    """A runner that allocates (or returns a view): it takes no `out`."""
    return lambda inputs: [fn(*inputs)]


def _format(t):
    return torch.channels_last if t.dim() == 4 and not t.is_contiguous() else torch.contiguous_format


def executor(steps, inputs=("x",), outputs=("y",)):
    """steps: (runner, input names, output name)."""
    layers = [LayerPlan(f"L{i}", "test", {}, list(ins), [out]) for i, (_, ins, out) in enumerate(steps)]
    return Executor(layers, [r for r, _, _ in steps], {}, list(inputs), list(outputs), CPU)


def _runs(ex, feeds_list, arena):
    return [[t.clone() for t in ex.run(feeds, arena)] for feeds in feeds_list]


def test_a_chain_reuses_offsets_and_matches_runners_that_allocate():
    steps = [(bound(torch.tanh), ["x"], "h0")]
    steps += [(bound(lambda t: torch.sin(t) * 2), [f"h{i}"], f"h{i + 1}") for i in range(5)]
    steps += [(bound(lambda t: t + 1), ["h5"], "y")]
    ex = executor(steps)
    feeds = [{"x": torch.randn(16, 32)} for _ in range(3)]
    want = _runs(ex, feeds, None)
    arena = Arena()
    got = _runs(ex, feeds, arena)  # the first run learns the plan, the others bind
    for a, b in zip(got, want):
        torch.testing.assert_close(a, b, rtol=0, atol=0)
    bound_plan = ex.arena_plan.memory.bound
    assert [b.name for b in bound_plan.buffers] == [f"h{i}" for i in range(6)]  # y is an engine output
    assert bound_plan.arena_bytes == 2 * bound_plan.buffers[0].size < bound_plan.naive_bytes
    assert arena.tensor is not None and arena.tensor.numel() == bound_plan.arena_bytes


def test_bound_outputs_are_views_of_the_arena():
    seen = []

    def spy(inputs, out=None):
        seen.append(out)
        return bound(torch.exp)(inputs, out)

    ex = executor([(binds_outputs(spy, [True]), ["x"], "h"), (bound(torch.neg), ["h"], "y")])
    arena = Arena()
    x = torch.randn(4, 8)
    ex.run({"x": x}, arena)
    assert seen == [None]  # learning: the runner allocates
    torch.testing.assert_close(ex.run({"x": x}, arena)[0], -torch.exp(x))
    (out,) = seen[1]
    assert out.untyped_storage().data_ptr() == arena.tensor.untyped_storage().data_ptr()
    assert out.shape == (4, 8) and out.is_contiguous()


def test_c_a_view_keeps_its_base_alive():
    # A writes x; B returns a view of x (x's last reader); C writes z, which must not take x's
    # bytes while D still reads the view.
    steps = [(bound(lambda t: t * 3), ["a"], "x"),
             (plain(lambda t: t.t()), ["x"], "v"),
             (bound(lambda t: t - 100), ["a"], "z"),
             (bound(lambda v, z: v.t() + z), ["v", "z"], "d"),
             (plain(lambda t: t.sum(0)), ["d"], "y")]
    ex = executor(steps, inputs=["a"])
    feeds = [{"a": torch.randn(8, 8)} for _ in range(3)]
    want = [[4 * f["a"].sum(0) - 100 * 8] for f in feeds]
    got = _runs(ex, feeds, Arena())
    for a, b in zip(got, want):
        torch.testing.assert_close(a[0], b[0])
    buffers = {b.name: b for b in ex.arena_plan.memory.bound.buffers}
    assert buffers["x"].last == 3  # D, the view's reader
    assert buffers["x"].offset != buffers["z"].offset


def test_a_view_that_leaves_the_engine_keeps_its_base_out_of_the_arena():
    steps = [(bound(torch.exp), ["x"], "h"), (plain(lambda t: t.reshape(-1)), ["h"], "y")]
    ex = executor(steps)
    arena = Arena()
    ex.run({"x": torch.zeros(4, 4)}, arena)
    first = ex.run({"x": torch.zeros(4, 4)}, arena)[0]
    ex.run({"x": torch.ones(4, 4)}, arena)
    torch.testing.assert_close(first, torch.ones(16))  # not overwritten by the next run
    assert ex.arena_plan.memory.bound.buffers == []


def test_learned_layouts_are_the_runners_own():
    cl = bound(lambda t: (t * 2).contiguous(memory_format=torch.channels_last))
    ex = executor([(cl, ["x"], "h"), (bound(lambda t: t + 1), ["h"], "y2"), (plain(torch.neg), ["y2"], "y")])
    arena = Arena()
    x = torch.randn(2, 3, 4, 5)
    ex.run({"x": x}, arena)
    (slot,) = ex.arena_plan.slots[0]
    assert slot[1][1] == torch.empty(2, 3, 4, 5, memory_format=torch.channels_last).stride()
    torch.testing.assert_close(ex.run({"x": x}, arena)[0], -(x * 2 + 1))
    assert arena.views(ex, ex.arena_plan, CPU)[0][0].is_contiguous(memory_format=torch.channels_last)


def test_runners_that_take_no_out_and_no_arena_bind_nothing():
    ex = executor([(plain(torch.exp), ["x"], "h"), (plain(torch.neg), ["h"], "y")])
    assert ex.binding == [(False,), (False,)]
    ex.run({"x": torch.randn(3)}, Arena())
    assert ex.arena_plan.arena_bytes == 0
    ex2 = executor([(bound(torch.exp), ["x"], "h"), (plain(torch.neg), ["h"], "y")])
    ex2.run({"x": torch.randn(3)})
    assert ex2.arena_plan is None  # no arena, nothing learned


def test_given_output_takes_only_the_layout_asked_for():
    t = torch.empty(4, 6)
    assert given_output([t], 0, (4, 6), torch.float32) is t
    assert given_output([t], 0, (4, 6), torch.float16) is None
    assert given_output([torch.empty(6, 4).t()], 0, (4, 6), torch.float32) is None
    assert given_output([None], 0, (4, 6), torch.float32) is None
    assert given_output(None, 0, (4, 6), torch.float32) is None
    img = torch.empty(2, 3, 4, 5, memory_format=torch.channels_last)
    assert given_output([img], 0, (2, 3, 4, 5), torch.float32) is None
    assert given_output([img], 0, (2, 3, 4, 5), torch.float32, torch.channels_last) is img


# -- engines of Triton Layers on the CPU ----------------------------------------------------------

def _mlp(batch: int | str = 8):
    """GEMM+bias+Relu -> LayerNorm -> GEMM+Tanh -> Reshape -> Softmax -> Reshape -> Sigmoid*x -> GEMM:
    Triton Layers with views (the Reshapes) between them."""
    rng = np.random.default_rng(0)

    def w(name, *shape):
        return numpy_helper.from_array((rng.standard_normal(shape) * 0.3).astype(np.float32), name)

    nodes = [("MatMul", ["x", "w1"], "a", {}), ("Add", ["a", "b1"], "a1", {}), ("Relu", ["a1"], "h1", {}),
             ("LayerNormalization", ["h1", "g", "beta"], "h2", {"axis": -1}), ("MatMul", ["h2", "w2"], "h3", {}),
             ("Tanh", ["h3"], "h4", {}), ("Reshape", ["h4", "s3"], "r", {}), ("Softmax", ["r"], "sm", {"axis": -1}),
             ("Reshape", ["sm", "s2"], "h5", {}), ("Sigmoid", ["h5"], "sg", {}), ("Mul", ["h5", "sg"], "h6", {}),
             ("MatMul", ["h6", "w3"], "y", {})]
    inits = [w("w1", 16, 32), w("b1", 32), w("g", 32), w("beta", 32), w("w2", 32, 32), w("w3", 32, 16),
             numpy_helper.from_array(np.array([-1, 4, 8], np.int64), "s3"),
             numpy_helper.from_array(np.array([-1, 32], np.int64), "s2")]
    g = helper.make_graph([helper.make_node(op, ins, [out], **attrs) for op, ins, out, attrs in nodes], "mlp",
                          [helper.make_tensor_value_info("x", TensorProto.FLOAT, [batch, 16])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, [batch, 16])], initializer=inits)
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])


def _triton_engine(model, profiles=None) -> Engine:
    pytest.importorskip("triton")
    return build_layered(model, profiles=profiles, allowed=ALLOWED)


def _runners(engine: Engine) -> list:
    return [r for r, *_ in engine.executor_for(None, {"x": (8, 16)}).steps]


@pytest.fixture(scope="module")
def mlp():
    with pytest.MonkeyPatch.context() as mp:  # module scope: before the autouse fixture
        mp.setenv("TRITON_INTERPRET", "1")
        yield _triton_engine(_mlp())


def test_a_engine_results_match_with_and_without_the_arena(mlp):
    engine = mlp
    assert {lp.tactic for lp in engine.plan.layers} >= {"triton.gemm", "triton.norm", "reference"}
    on, off = engine.create_execution_context(), engine.create_execution_context(arena=False)
    rng = np.random.default_rng(1)
    for _ in range(3):
        x = torch.from_numpy(rng.standard_normal((8, 16)).astype(np.float32))
        torch.testing.assert_close(on.execute({"x": x})["y"], off.execute({"x": x})["y"], rtol=0, atol=0)
    memory = engine.executor_for(None, {"x": (8, 16)}).arena_plan.memory
    assert memory.bound.arena_bytes < memory.bound.naive_bytes  # offsets are reused
    assert off._arena is None and on._arena.tensor.numel() == memory.bound.arena_bytes


def test_contexts_have_their_own_arena(mlp):
    engine = mlp
    a, b = engine.create_execution_context(), engine.create_execution_context()
    x = torch.randn(8, 16)
    for ctx in (a, b, a, b):
        ctx.execute({"x": x})
    assert a._arena is not b._arena
    assert a._arena.tensor.data_ptr() != b._arena.tensor.data_ptr()


def test_the_arena_can_be_switched_off(monkeypatch, mlp):
    engine = mlp
    monkeypatch.setenv("TENSORSMITH_ARENA", "0")
    off = Engine(engine.plan, runners=_runners(engine))
    assert not off.use_arena and off.create_execution_context()._arena is None
    x = torch.randn(8, 16)
    torch.testing.assert_close(off.run({"x": x})["y"], engine.run({"x": x})["y"], rtol=0, atol=0)
    assert off.executor_for(None, {"x": (8, 16)}).arena_plan is None


def test_a_reshaped_batch_gets_a_plan_at_its_own_shapes():
    engine = _triton_engine(_mlp(batch="N"), [{"x": {"min": (1, 16), "opt": (8, 16), "max": (16, 16)}}])
    engine_ref = tensorsmith.build(_mlp(batch="N"), target="cpu")
    ctx = engine.create_execution_context()
    for n in (8, 3, 8):
        x = torch.randn(n, 16)
        torch.testing.assert_close(ctx.execute({"x": x})["y"], engine_ref.run({"x": x})["y"], rtol=1e-4, atol=1e-5)
    small = engine.executor_for(0, {"x": (3, 16)}).arena_plan.memory.bound
    large = engine.executor_for(0, {"x": (8, 16)}).arena_plan.memory.bound
    assert 0 < small.naive_bytes < large.naive_bytes


def test_d_the_summary_reports_arena_bound_bytes(mlp):
    engine = mlp
    graph, layers = engine.plan.graph, engine.plan.layers
    written = {n for lp, r in zip(layers, _runners(engine)) for n, w in zip(lp.outputs, output_binding(r)) if w}
    summary = plan_memory(graph, layers, written).summary()
    assert summary["arena_bound_bytes"] > 0 and summary["device_arena_bytes"] > 0
    x_bytes = 8 * 16 * 4  # every activation but the input is bound or allocated by its runner
    assert summary["arena_bound_bytes"] + summary["runner_allocated_bytes"] + x_bytes == summary["activation_naive_bytes"]
    # the executor's own plan, at the shapes it ran, says the same
    engine.run({"x": torch.randn(8, 16)})
    ran = engine.executor_for(None, {"x": (8, 16)}).arena_plan.memory.summary()
    assert {k: ran[k] for k in ("arena_bound_bytes", "device_arena_bytes")} == \
        {k: summary[k] for k in ("arena_bound_bytes", "device_arena_bytes")}
    info = {"model": "m", "kind": "engine", "target": "cuda", "precision": "fp32", "inputs": [], "outputs": [],
            "nodes": {"before": None, "after": 0, "layers": 0}, "ops": [], "layers": [], "memory": summary,
            "profiles": []}
    assert "written by their runners into a" in render(info)
