"""The memory plan packs activations whose lifetimes do not overlap."""

import torch

import tensorsmith
from tensorsmith.builder import plan_layers, specialize_shapes
from tensorsmith.engine import LayerPlan
from tensorsmith.engine.memory import ALIGNMENT, plan_arena, plan_memory
from tensorsmith.passes import run_passes

from ..passes.graphgen import Builder, C


def chain_model(n: int = 6):
    import numpy as np

    b = Builder(np.random.default_rng(0))
    x = "x"
    for _ in range(n):
        x = b.op("Conv", [x, b.rand((C, C, 3, 3), 0.2)], pads=[1, 1, 1, 1])
        x = b.op("Tanh", [x])
    return b.model([("x", [1, C, 16, 16])], b.op("Identity", [x]))


def planned(model):
    graph = tensorsmith.import_onnx(model)
    specialize_shapes(graph, {"x": (1, C, 16, 16)})
    run_passes(graph)
    plans, _ = plan_layers(graph, torch.device("cpu"), tune=False, allowed={"reference"})
    return graph, plans, plan_memory(graph, plans)


def test_chain_reuses_memory():
    graph, plans, mem = planned(chain_model())
    one = -(-C * 16 * 16 * 4 // ALIGNMENT) * ALIGNMENT
    assert mem.naive_bytes >= len(plans) * one
    assert mem.arena_bytes <= 3 * one  # a chain needs about two live buffers at a time
    assert mem.weight_bytes == sum(t.numel() * 4 for t in graph.initializers.values())


def test_live_buffers_never_overlap():
    _, _, mem = planned(chain_model(8))
    for a in mem.buffers:
        for b in mem.buffers:
            if a is b or a.last < b.first or b.last < a.first:
                continue
            assert a.offset + a.size <= b.offset or b.offset + b.size <= a.offset, (a, b)
    assert all(b.offset % ALIGNMENT == 0 for b in mem.buffers)


# -- the arena the executor binds (plan_arena) ----------------------------------------------------

def _layers(*steps):
    """steps: (inputs, outputs) per Layer."""
    return [LayerPlan(f"L{i}", "t", {}, list(ins), list(outs)) for i, (ins, outs) in enumerate(steps)]


def test_arena_holds_written_values_only_and_never_engine_outputs():
    layers = _layers((["x"], ["a"]), (["a"], ["b"]), (["b"], ["c"]), (["c"], ["y"]))
    sizes = dict.fromkeys("xabcy", 1000)
    plan = plan_arena(layers, sizes, written={"a", "c", "y"}, outputs=["y"])
    assert [b.name for b in plan.buffers] == ["a", "c"]
    assert plan.buffers[0].last == 2  # b may be a view of a: a lives while b is read
    assert plan.arena_bytes == 2 * 1024


def test_a_value_that_may_be_a_view_extends_its_base():
    # L1 writes nothing into the arena: v may be a view of a, so a lives until L3 reads v
    layers = _layers((["x"], ["a"]), (["a"], ["v"]), (["x"], ["z"]), (["v", "z"], ["y"]))
    plan = plan_arena(layers, dict.fromkeys("xavzy", 512), written={"a", "z", "y"}, outputs=["y"])
    a, z = sorted(plan.buffers, key=lambda b: b.name)
    assert (a.first, a.last) == (0, 3) and a.offset != z.offset
    # written by its runner, v is its own buffer and a may reuse bytes after L1
    plan = plan_arena(layers, dict.fromkeys("xavzy", 512), written={"a", "v", "z", "y"}, outputs=["y"])
    by_name = {b.name: b for b in plan.buffers}
    assert by_name["a"].last == 1 and by_name["z"].offset == by_name["a"].offset


def test_a_base_that_an_output_may_show_stays_out_of_the_arena():
    layers = _layers((["x"], ["a"]), (["a"], ["v"]), (["v"], ["w"]), (["a"], ["b"]), (["b"], ["y"]))
    plan = plan_arena(layers, dict.fromkeys("xavwby", 512), written={"a", "b", "y"}, outputs=["w", "y"])
    assert [b.name for b in plan.buffers] == ["b"]  # w may be a view of a view of a


def test_plan_memory_reports_the_bound_part():
    graph, plans, _ = planned(chain_model())
    written = {n for lp in plans for n in lp.outputs}
    summary = plan_memory(graph, plans, written).summary()
    one = -(-C * 16 * 16 * 4 // ALIGNMENT) * ALIGNMENT
    assert summary["arena_bound_bytes"] == (len(plans) - 1) * one  # every Layer output but the engine's
    assert summary["runner_allocated_bytes"] == one
    assert summary["device_arena_bytes"] == 2 * one
    assert "arena_bound_bytes" not in plan_memory(graph, plans).summary()
