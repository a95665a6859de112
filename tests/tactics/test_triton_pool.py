"""triton.pool under the Triton interpreter (CPU): 2-D max/average pooling and global pooling,
NCHW and channels-last, against the reference; a GPU test at ResNet-50's stem pool shape."""

from __future__ import annotations

import os

import torch

if not torch.cuda.is_available():
    os.environ["TRITON_INTERPRET"] = "1"  # before triton or tensorsmith's triton modules are imported

import pytest

pytest.importorskip("triton")

from onnx import TensorProto, helper

from tensorsmith.tactics.triton.pool import TRITON_POOL as T
from tensorsmith.testing.layers import check_tactic, layer_contexts
from tensorsmith.tuner import max_violation, random_inputs
from tensorsmith.tactics import REFERENCE
from tensorsmith.tuner.check import TOLERANCES


@pytest.fixture(autouse=True)
def _triton_mode(request, monkeypatch):
    monkeypatch.setenv("TRITON_INTERPRET", "0" if request.node.get_closest_marker("gpu") else "1")


def _pool_layer(op, shape, device="cpu", precision="fp32", **attrs):
    g = helper.make_graph([helper.make_node(op, ["x"], ["y"], name="p", **attrs)], "g",
                          [helper.make_tensor_value_info("x", TensorProto.FLOAT, list(shape))],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)])
    model = helper.make_model(g, opset_imports=[helper.make_opsetid("", 19)])
    (lc,) = [lc for lc in layer_contexts(model, device=device, precision=precision) if lc.nodes[0].op_type == op]
    return lc


def _check_both_layouts(lc, config):
    """The tactic against the reference on NCHW and on channels-last inputs; outputs keep the layout."""
    rtol, atol = TOLERANCES[lc.dtype]
    for channels_last in (False, True):
        inputs = random_inputs(lc, seed=3, formats=["channels_last" if channels_last else "contiguous"])
        with torch.no_grad():
            want = REFERENCE.build(lc, {})(inputs)
            got = T.build(lc, config)(inputs)
        assert max_violation(got, want, rtol, atol) <= 0, (channels_last, config)
        assert got[0].is_contiguous(memory_format=torch.channels_last if channels_last else torch.contiguous_format)


CASES = [
    ("MaxPool", dict(kernel_shape=[3, 3], strides=[2, 2], pads=[1, 1, 1, 1])),          # ResNet stem
    ("MaxPool", dict(kernel_shape=[3, 3], strides=[2, 2], ceil_mode=1)),
    ("MaxPool", dict(kernel_shape=[2, 2], dilations=[2, 2])),
    ("AveragePool", dict(kernel_shape=[3, 3], strides=[1, 1], pads=[1, 1, 1, 1])),
    ("AveragePool", dict(kernel_shape=[3, 3], strides=[2, 2], pads=[1, 1, 1, 1], count_include_pad=1)),
    ("AveragePool", dict(kernel_shape=[2, 2], strides=[2, 2], ceil_mode=1)),
    ("GlobalAveragePool", {}),
    ("GlobalMaxPool", {}),
]


@pytest.mark.parametrize("op, attrs", CASES)
def test_pool_matches_the_reference_in_both_layouts(op, attrs):
    lc = _pool_layer(op, (2, 5, 9, 7), **attrs)
    assert T.applies(lc)
    for config in T.configs(lc)[:2]:
        _check_both_layouts(lc, config)


def test_half_precision_pool():
    lc = _pool_layer("MaxPool", (1, 8, 6, 6), precision="fp16", kernel_shape=[3, 3], strides=[2, 2], pads=[1, 1, 1, 1])
    assert lc.dtype == torch.float16 and check_tactic(T, lc) <= 0


def test_pool_with_indices_output_is_not_taken():
    g = helper.make_graph([helper.make_node("MaxPool", ["x"], ["y", "i"], name="p", kernel_shape=[2, 2])], "g",
                          [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 2, 4, 4])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, None),
                           helper.make_tensor_value_info("i", TensorProto.INT64, None)])
    model = helper.make_model(g, opset_imports=[helper.make_opsetid("", 19)])
    (lc,) = [lc for lc in layer_contexts(model) if lc.nodes[0].op_type == "MaxPool"]
    assert not T.applies(lc)


@pytest.mark.gpu
@pytest.mark.parametrize("op, attrs, shape, precision", [
    ("MaxPool", dict(kernel_shape=[3, 3], strides=[2, 2], pads=[1, 1, 1, 1]), (32, 64, 112, 112), "fp16"),
    # fp32: in an fp16 build of this one-node model the input's Cast joins the reduction's Layer
    ("GlobalAveragePool", {}, (32, 2048, 7, 7), "fp32"),
    ("GlobalAveragePool", {}, (1, 960, 7, 7), "fp32"),
    ("AveragePool", dict(kernel_shape=[3, 3], strides=[1, 1], pads=[1, 1, 1, 1], count_include_pad=1), (4, 96, 35, 35),
     "fp16"),
])
def test_gpu_pool_matches_the_reference(op, attrs, shape, precision):
    lc = _pool_layer(op, shape, device="cuda", precision=precision, **attrs)
    for config in T.configs(lc):
        _check_both_layouts(lc, config)
