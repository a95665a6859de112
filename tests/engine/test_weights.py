"""Shape-like weights stay on the host when an engine's weights go to a device."""

import numpy as np
import torch

import tensorsmith
from tensorsmith.engine.weights import place_weights

from ..passes.graphgen import Builder


def test_shape_inputs_stay_on_the_host():
    b = Builder(np.random.default_rng(0))
    y = b.op("Reshape", [b.op("MatMul", ["x", b.rand((4, 6))]), b.const(np.array([2, 3, -1], np.int64))])
    graph = tensorsmith.import_onnx(b.model([("x", [2, 4])], y))
    # "meta" stands in for a GPU: anything moved there is visibly not on the CPU.
    placed = place_weights(graph, torch.device("meta"))
    by_use = {n.op_type: placed[n.inputs[1].name].device.type for n in graph.nodes}
    assert by_use == {"MatMul": "meta", "Reshape": "cpu"}
