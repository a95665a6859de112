"""The memory plan packs activations whose lifetimes do not overlap."""

import torch

import tensorsmith
from tensorsmith.builder import plan_layers, specialize_shapes
from tensorsmith.engine.memory import ALIGNMENT, plan_memory
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
