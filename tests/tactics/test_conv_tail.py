"""A convolution's elementwise tail as one Triton kernel after cuDNN (torch.cudnn_conv, fuse="triton"),
and triton.elementwise in channels-last builds.

The CPU tests run the tactic's runner (torch's conv, then the generated kernel) under the Triton
interpreter: `applies` of the cuDNN tactic wants CUDA, but its runner is plain PyTorch plus the
kernel. The gpu test runs the real thing; an autouse fixture picks the Triton mode per test.
"""

from __future__ import annotations

import os

import torch

if not torch.cuda.is_available():
    os.environ["TRITON_INTERPRET"] = "1"  # before triton or tensorsmith's triton modules are imported

import numpy as np
import pytest

pytest.importorskip("triton")

from onnx import TensorProto, helper, numpy_helper

from tensorsmith.tactics import REFERENCE, TACTICS
from tensorsmith.tactics.triton.elementwise import (
    TRITON_ELEMENTWISE,
    build_plan,
    plan_kernel,
)
from tensorsmith.tactics.triton.epilogue import ConvTail, conv_tail
from tensorsmith.testing.layers import layer_contexts
from tensorsmith.tuner import max_violation, random_inputs
from tensorsmith.tuner.check import TOLERANCES

CONV = TACTICS["torch.cudnn_conv"]
F = TensorProto.FLOAT
N, C, OC, HW = 2, 4, 8, 5  # conv [2,4,5,5] -> [2,8,5,5]

# The interpreter computes masked-off lanes too (on zeros): harmless warnings.
pytestmark = pytest.mark.filterwarnings("ignore::RuntimeWarning")


@pytest.fixture(autouse=True)
def _triton_mode(request, monkeypatch):
    monkeypatch.setenv("TRITON_INTERPRET", "0" if request.node.get_closest_marker("gpu") else "1")


rng = np.random.default_rng(0)


def _conv_model(tail, inits=(), residual=False, shape=(N, C, HW, HW), oc=OC):
    """Conv(x, w, b) -> h, then `tail` nodes (op, inputs, output, attrs) ending in y; `r` is a
    residual input of the conv output's shape."""
    weights = [numpy_helper.from_array((rng.standard_normal((oc, shape[1], 3, 3)) * 0.3).astype(np.float32), "w"),
               numpy_helper.from_array(rng.standard_normal(oc).astype(np.float32), "b")]
    weights += [numpy_helper.from_array(np.asarray(a, np.float32), n) for n, a in inits]
    nodes = [helper.make_node("Conv", ["x", "w", "b"], ["h"], pads=[1, 1, 1, 1])]
    nodes += [helper.make_node(op, ins, [out], **attrs) for op, ins, out, attrs in tail]
    inputs = [helper.make_tensor_value_info("x", F, list(shape))]
    if residual:
        inputs.append(helper.make_tensor_value_info("r", F, [shape[0], oc, *shape[2:]]))
    g = helper.make_graph(nodes, "m", inputs, [helper.make_tensor_value_info("y", F, None)], initializer=weights)
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])


def _layer(model, kind, precision="fp32", device="cpu"):
    lcs = [lc for lc in layer_contexts(model, device=device, precision=precision) if lc.layer.kind == kind]
    assert len(lcs) == 1, [(lc.layer.kind, [n.op_type for n in lc.nodes]) for lc in lcs]
    return lcs[0]


def _check(tactic, lc, config, formats=None):
    """The tactic's outputs on inputs laid out as `formats`, checked against the reference."""
    inputs = random_inputs(lc, formats=formats)
    with torch.no_grad():
        want = REFERENCE.build(lc, {})(inputs)
        got = tactic.build(lc, config)(inputs)
    rtol, atol = TOLERANCES[lc.dtype]
    assert max_violation(got, want, rtol, atol) <= 0, config
    return got


def _layout(t: torch.Tensor) -> str:
    if t.is_contiguous():
        return "nchw"
    return "nhwc" if t.is_contiguous(memory_format=torch.channels_last) else "strided"


# -- the conv tail ------------------------------------------------------------------------------

TAILS = {
    "hardswish": ([("HardSwish", ["h"], "y", {})], [], False),
    "hardsigmoid": ([("HardSigmoid", ["h"], "y", {"alpha": 0.25, "beta": 0.4})], [], False),
    "sigmoid": ([("Sigmoid", ["h"], "y", {})], [], False),
    "swish": ([("Sigmoid", ["h"], "s", {}), ("Mul", ["h", "s"], "y", {})], [], False),  # becomes Swish
    "add": ([("Add", ["h", "r"], "y", {})], [], True),
    "add_relu": ([("Add", ["r", "h"], "a", {}), ("Relu", ["a"], "y", {})], [], True),
    # Per-channel constants after an activation (right after the Conv they fold into it), and a scalar.
    "per_channel": ([("Relu", ["h"], "a", {}), ("Mul", ["a", "k"], "c", {}), ("Add", ["c", "t"], "d", {}),
                     ("Mul", ["d", "half"], "y", {})],
                    [("k", rng.standard_normal((OC, 1, 1))), ("t", rng.standard_normal((1, OC, 1, 1))),
                     ("half", 0.5)], False),
}


def _triton_configs(lc):
    configs = [c for c in CONV.configs(lc) if c["fuse"] == "triton"]
    assert configs and all({"BLOCK", "num_warps", "channels_last"} <= set(c) for c in configs)
    return configs


@pytest.mark.parametrize("tail", sorted(TAILS))
@pytest.mark.parametrize("precision", ["fp32", "fp16"])
def test_tail_matches_reference_in_both_layouts(tail, precision):
    nodes, inits, residual = TAILS[tail]
    lc = _layer(_conv_model(nodes, inits, residual), "convolution", precision)
    assert len(lc.nodes) >= 2 and ConvTail(lc).nodes
    configs = _triton_configs(lc)
    # Half precision runs channels-last only; float32 offers both layouts.
    assert sorted(c["channels_last"] for c in configs) == ([True] if precision == "fp16" else [False, True])
    for config in configs:
        cl = config["channels_last"]
        formats = ["channels_last" if cl else "contiguous"] * len(lc.inputs)
        got = _check(CONV, lc, config, formats)
        assert _layout(got[0]) == ("nhwc" if cl else "nchw")  # the conv output's layout


@pytest.mark.parametrize("residual_format", ["contiguous", "channels_last"])
def test_residual_in_the_other_layout_is_converted(residual_format):
    nodes, inits, residual = TAILS["add_relu"]
    lc = _layer(_conv_model(nodes, inits, residual), "convolution", "fp16")
    config = _triton_configs(lc)[0]
    got = _check(CONV, lc, config, ["channels_last", residual_format])
    assert _layout(got[0]) == "nhwc"
    lc32 = _layer(_conv_model(nodes, inits, residual), "convolution", "fp32")
    nchw = next(c for c in _triton_configs(lc32) if not c["channels_last"])
    assert _layout(_check(CONV, lc32, nchw, ["contiguous", residual_format])[0]) == "nchw"


def test_tail_kernel_source_indexes_channels_by_layout():
    nodes, inits, residual = TAILS["per_channel"]
    lc = _layer(_conv_model(nodes, inits, residual), "convolution")
    tail = ConvTail(lc)
    assert tail.bias is not None and tail.nodes[0].op_type == "Add"  # the conv bias is the tail's first Add
    nchw = plan_kernel(tail.lc, tail.nodes, tail.activations, tail.outs).source
    nhwc = plan_kernel(tail.lc, tail.nodes, tail.activations, tail.outs, nhwc=True).source
    assert f"(offs // {HW * HW}) % {OC}" in nchw and "0.5" in nchw  # the scalar is inlined
    assert f"offs % {OC}" in nhwc


def test_tail_declines_what_it_does_not_handle():
    # a spatial-only operand, a node without a Triton expression, and nothing after the Conv
    spatial = _conv_model([("Add", ["h", "m"], "y", {})], [("m", rng.standard_normal((1, 1, HW, HW)))])
    atan = _conv_model([("Atan", ["h"], "y", {})])
    bare = _conv_model([("Identity", ["h"], "y", {})])
    for model in (spatial, atan, bare):
        lc = _layer(model, "convolution")
        assert conv_tail(lc) is None
        assert all(c["fuse"] != "triton" for c in CONV.configs(lc))


def test_conv_output_that_leaves_the_layer_is_returned_as_is():
    nodes, inits, residual = TAILS["hardswish"]
    lc = _layer(_conv_model(nodes, inits, residual), "convolution")
    lc.outputs = [lc.nodes[0].outputs[0], *lc.outputs]  # h is read outside the Layer too
    for config in _triton_configs(lc):
        got = _check(CONV, lc, config, ["channels_last" if config["channels_last"] else "contiguous"])
        assert len(got) == 2


# -- triton.elementwise, channels-last ------------------------------------------------------------


def _elementwise_model(nodes, inputs, inits=()):
    g = helper.make_graph([helper.make_node(op, ins, [out], **attrs) for op, ins, out, attrs in nodes], "g",
                          [helper.make_tensor_value_info(n, F, s) for n, s in inputs],
                          [helper.make_tensor_value_info("y", F, None)],
                          initializer=[numpy_helper.from_array(np.asarray(a, np.float32), n) for n, a in inits])
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])


def _cl_layer(model, precision="fp32"):
    lc = _layer(model, "elementwise", precision)
    lc.activation_layout = "channels_last"
    return lc


SE_MUL = _elementwise_model([("Mul", ["x", "s"], "y", {})], [("x", [N, OC, HW, HW]), ("s", [N, OC, 1, 1])])


@pytest.mark.parametrize("precision", ["fp32", "fp16"])
def test_se_block_mul_stays_channels_last(precision):
    plain = _layer(SE_MUL, "elementwise", precision)
    assert all("channels_last" not in c for c in TRITON_ELEMENTWISE.configs(plain))  # not a channels-last build
    lc = _cl_layer(SE_MUL, precision)
    configs = TRITON_ELEMENTWISE.configs(lc)
    assert configs and all(c["channels_last"] for c in configs)
    x_at = [v.name for v in lc.inputs].index(next(v.name for v in lc.inputs if lc.shape(v) == (N, OC, HW, HW)))
    formats = ["contiguous"] * len(lc.inputs)
    formats[x_at] = "channels_last"
    for config in configs:
        got = _check(TRITON_ELEMENTWISE, lc, config, formats)
        assert _layout(got[0]) == "nhwc"
    # [N,C,1,1] in NHWC order: c = offs % C, n = offs // (H*W*C)
    src = build_plan(lc, nhwc=True).source
    assert f"offs % {OC}" in src and f"offs // {HW * HW * OC}" in src


def test_channels_last_config_on_nchw_inputs_stays_nchw():
    lc = _cl_layer(SE_MUL)
    config = TRITON_ELEMENTWISE.configs(lc)[0]
    got = _check(TRITON_ELEMENTWISE, lc, config, ["contiguous"] * len(lc.inputs))
    assert _layout(got[0]) == "nchw"


def test_channels_last_residual_with_per_channel_weight_and_mixed_layouts():
    model = _elementwise_model([("Add", ["x", "z"], "a", {}), ("Mul", ["a", "k"], "c", {}), ("HardSwish", ["c"], "y", {})],
                               [("x", [N, OC, HW, HW]), ("z", [N, OC, HW, HW])], [("k", rng.standard_normal((OC, 1, 1)))])
    for precision in ("fp32", "fp16"):
        lc = _cl_layer(model, precision)
        config = TRITON_ELEMENTWISE.configs(lc)[0]
        assert config["channels_last"]
        # one image arrives NCHW (copied to NHWC), the other channels-last: the output is channels-last
        for formats in (["channels_last", "channels_last"], ["channels_last", "contiguous"],
                        ["contiguous", "channels_last"]):
            assert _layout(_check(TRITON_ELEMENTWISE, lc, config, formats)[0]) == "nhwc"


def test_channels_last_build_keeps_other_ranks_nchw():
    model = _elementwise_model([("Add", ["x", "z"], "y", {})], [("x", [3, 40]), ("z", [40])])
    lc = _cl_layer(model)
    assert all("channels_last" not in c for c in TRITON_ELEMENTWISE.configs(lc))
    _check(TRITON_ELEMENTWISE, lc, TRITON_ELEMENTWISE.configs(lc)[0])


# -- GPU -----------------------------------------------------------------------------------------


@pytest.mark.gpu
@pytest.mark.parametrize("precision", ["fp32", "fp16"])
@pytest.mark.parametrize("tail", sorted(TAILS))
def test_gpu_cudnn_conv_with_triton_tail(precision, tail):
    nodes, inits, residual = TAILS[tail]
    model = _conv_model(nodes, inits, residual, shape=(8, 32, 28, 28), oc=OC)
    lc = _layer(model, "convolution", precision, device="cuda")
    lc.activation_layout = "channels_last" if precision == "fp16" else "contiguous"
    assert CONV.applies(lc)
    for config in _triton_configs(lc):
        cl = config["channels_last"]
        got = _check(CONV, lc, config, ["channels_last" if cl else "contiguous"] * len(lc.inputs))
        assert _layout(got[0]) == ("nhwc" if cl else "nchw")
