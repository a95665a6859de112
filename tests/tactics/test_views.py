"""torch.view: constant-index Gather as select / narrow / one index_select, against the reference."""

from __future__ import annotations

import numpy as np
import onnx
import pytest
import torch
from onnx import TensorProto, helper

from tensorsmith.tactics.views import ConstantGather
from tensorsmith.testing.layers import check_tactic, layer_contexts

T = ConstantGather()


def _gather_model(indices: np.ndarray, axis: int, shape=(2, 3, 4, 5)):
    g = helper.make_graph(
        [helper.make_node("Gather", ["x", "i"], ["y"], axis=axis, name="g")], "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, list(shape))],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)],
        initializer=[onnx.numpy_helper.from_array(indices.astype(np.int64), "i")])
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])


def _gather_layer(indices, axis):
    (lc,) = [lc for lc in layer_contexts(_gather_model(np.asarray(indices), axis)) if lc.nodes[0].op_type == "Gather"]
    return lc


@pytest.mark.parametrize("indices, axis, view", [
    (1, 0, True), (-1, 1, True), (2, -1, True),               # scalar: select
    ([1, 2], 2, True), ([-3, -2], 1, True),                   # consecutive: narrow (negative ones too)
    ([[0, 1], [1, 0]], 1, False), ([3, 0, 3], 2, False),      # anything else: one index_select
])
def test_constant_gather_matches_the_reference(indices, axis, view):
    lc = _gather_layer(indices, axis)
    assert T.applies(lc)
    assert check_tactic(T, lc) <= 0
    x = np.random.default_rng(0).standard_normal((2, 3, 4, 5)).astype(np.float32)
    xt = torch.from_numpy(x)
    (y,) = T.build(lc, {})([xt])
    assert (y.untyped_storage().data_ptr() == xt.untyped_storage().data_ptr()) == view  # a view: no copy


def test_gather_of_an_activation_index_is_not_taken():
    g = helper.make_graph(
        [helper.make_node("Gather", ["x", "i"], ["y"], axis=0, name="g")], "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [4, 3]),
         helper.make_tensor_value_info("i", TensorProto.INT64, [2])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)])
    model = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
    (lc,) = [lc for lc in layer_contexts(model) if lc.nodes[0].op_type == "Gather"]
    assert not T.applies(lc)


def test_out_of_range_constant_index_is_left_to_the_reference():
    assert not T.applies(_gather_layer(7, 0))
