"""Runners that write into given outputs (tactics/base.py): each writes into an `out` tensor of the
layout it would have allocated and returns it; one of another layout it leaves alone. Run under
the Triton interpreter on the CPU (cuDNN/cuBLAS tactics' runners are plain PyTorch there)."""

from __future__ import annotations

import os

import torch

if not torch.cuda.is_available():
    os.environ["TRITON_INTERPRET"] = "1"  # before triton or tensorsmith's triton modules are imported

import numpy as np
import pytest

pytest.importorskip("triton")

import onnx
from onnx import TensorProto, helper

from tensorsmith.tactics import REFERENCE, TACTICS
from tensorsmith.tactics.base import output_binding
from tensorsmith.testing.layers import layer_contexts
from tensorsmith.tuner import max_violation, random_inputs
from tensorsmith.tuner.check import TOLERANCES

F = TensorProto.FLOAT
rng = np.random.default_rng(0)
SMALL = {"BLOCK": 512, "num_warps": 4}

pytestmark = pytest.mark.filterwarnings("ignore::RuntimeWarning")  # the interpreter computes masked lanes too


@pytest.fixture(autouse=True)
def _triton_mode(request, monkeypatch):
    monkeypatch.setenv("TRITON_INTERPRET", "0" if request.node.get_closest_marker("gpu") else "1")


def _model(nodes, inputs, inits=(), opset=17):
    g = helper.make_graph(
        [helper.make_node(op, ins, [out], **attrs) for op, ins, out, attrs in nodes], "g",
        [helper.make_tensor_value_info(n, F, s) for n, s in inputs],
        [helper.make_tensor_value_info(nodes[-1][2], F, None)],
        initializer=[onnx.numpy_helper.from_array((rng.standard_normal(s) * 0.3).astype(np.float32), n)
                     for n, s in inits])
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", opset)])


def _layer(model, kind, **options):
    (lc,) = [lc for lc in layer_contexts(model, **options) if lc.layer.kind == kind]
    return lc


def _sentinel_like(t: torch.Tensor) -> torch.Tensor:
    return torch.empty_like(t).fill_(float("nan"))  # empty_like keeps a dense tensor's strides


def check_binding(tactic_name, lc, config, formats=None):
    """Outputs written into `out` tensors laid out as the runner's own, and right; returns the runner's
    outputs without `out` and the runner."""
    runner = TACTICS[tactic_name].build(lc, config)
    which = output_binding(runner)
    assert len(which) == len(lc.outputs) and any(which)
    inputs = random_inputs(lc, formats=formats)
    with torch.no_grad():
        want = REFERENCE.build(lc, {})(inputs)
        free = runner(inputs)
        out = [_sentinel_like(t) if w else None for t, w in zip(free, which)]
        got = runner(inputs, out)
    assert all(g is o for g, o, w in zip(got, out, which) if w)
    assert [g.stride() for g in got] == [t.stride() for t in free]
    rtol, atol = TOLERANCES[lc.dtype]
    assert max_violation(got, want, rtol, atol) <= 0
    return free, runner, inputs


def check_other_layout_is_left_alone(runner, inputs, free):
    """An `out` that is not in the runner's layout (here: the other memory order) is not written."""
    def other(t):
        if t.dim() == 4:
            fmt = torch.contiguous_format if not t.is_contiguous() else torch.channels_last
            return torch.full(t.shape, float("nan"), dtype=t.dtype).contiguous(memory_format=fmt)
        return torch.full(tuple(reversed(t.shape)), float("nan"), dtype=t.dtype).permute(*reversed(range(t.dim())))

    out = [other(t) for t in free]
    with torch.no_grad():
        got = runner(inputs, out)
    assert all(g is not o and bool(o.isnan().all()) for g, o in zip(got, out))
    torch.testing.assert_close(got, free)


def test_elementwise_writes_into_out():
    model = _model([("Sigmoid", ["x"], "s", {}), ("Mul", ["x", "s"], "m", {}), ("Add", ["m", "r"], "y", {})],
                   [("x", [2, 3, 4, 5]), ("r", [2, 3, 4, 5])])
    lc = _layer(model, "elementwise")
    free, runner, inputs = check_binding("triton.elementwise", lc, SMALL)
    check_other_layout_is_left_alone(runner, inputs, free)


@pytest.mark.parametrize("formats", [["channels_last", "channels_last"], ["contiguous", "contiguous"]])
def test_channels_last_elementwise_writes_into_out_of_the_layout_it_picks(formats):
    model = _model([("Mul", ["x", "r"], "m", {}), ("Relu", ["m"], "y", {})], [("x", [2, 3, 4, 5]), ("r", [2, 3, 4, 5])])
    lc = _layer(model, "elementwise")
    free, runner, inputs = check_binding("triton.elementwise", lc, {**SMALL, "channels_last": True}, formats)
    assert free[0].is_contiguous(memory_format=torch.channels_last) == (formats[0] == "channels_last")
    check_other_layout_is_left_alone(runner, inputs, free)


def test_norm_writes_into_out():
    model = _model([("LayerNormalization", ["x", "g", "b"], "y", {"axis": -1})], [("x", [6, 32])],
                   [("g", (32,)), ("b", (32,))])
    free, runner, inputs = check_binding("triton.norm", _layer(model, "normalization"), {"BLOCK": 32, "ROWS": 2})
    check_other_layout_is_left_alone(runner, inputs, free)


def test_gemm_writes_into_out():
    model = _model([("MatMul", ["x", "w"], "m", {}), ("Add", ["m", "b"], "a", {}), ("Relu", ["a"], "y", {})],
                   [("x", [2, 5, 16])], [("w", (16, 24)), ("b", (24,))])
    lc = _layer(model, "matmul")
    free, runner, inputs = check_binding("triton.gemm", lc, TACTICS["triton.gemm"].configs(lc)[0])
    assert free[0].shape == (2, 5, 24)
    check_other_layout_is_left_alone(runner, inputs, free)


def test_triton_conv_writes_into_out():
    model = _model([("Conv", ["x", "w"], "c", {"pads": [1, 1, 1, 1]}), ("Relu", ["c"], "y", {})],
                   [("x", [2, 4, 6, 6])], [("w", (8, 4, 3, 3))])
    lc = _layer(model, "convolution")
    check_binding("triton.conv", lc, TACTICS["triton.conv"].configs(lc)[0])


@pytest.mark.parametrize("op", ["MaxPool", "GlobalAveragePool"])
@pytest.mark.parametrize("fmt", ["contiguous", "channels_last"])
def test_pool_writes_into_out_in_its_inputs_layout(op, fmt):
    attrs = {"kernel_shape": [3, 3], "strides": [2, 2], "pads": [1, 1, 1, 1]} if op == "MaxPool" else {}
    model = _model([(op, ["x"], "y", attrs)], [("x", [2, 8, 7, 7])])
    lc = next(lc for lc in layer_contexts(model) if lc.anchor is not None and lc.anchor.op_type == op)
    config = TACTICS["triton.pool"].configs(lc)[0]
    free, runner, inputs = check_binding("triton.pool", lc, config, [fmt])
    if op == "MaxPool":
        check_other_layout_is_left_alone(runner, inputs, free)


def test_pool_with_more_nodes_binds_nothing():
    model = _model([("MaxPool", ["x"], "p", {"kernel_shape": [2, 2], "strides": [2, 2]}), ("Neg", ["p"], "y", {})],
                   [("x", [1, 4, 6, 6])])
    lc = next(lc for lc in layer_contexts(model) if lc.anchor is not None and lc.anchor.op_type == "MaxPool")
    if len(lc.nodes) > 1:
        assert output_binding(TACTICS["triton.pool"].build(lc, TACTICS["triton.pool"].configs(lc)[0])) == ()


@pytest.mark.parametrize("leaves", [False, True])
@pytest.mark.parametrize("channels_last", [False, True])
def test_conv_tail_writes_its_outputs_but_not_the_conv_output(channels_last, leaves):
    model = _model([("Conv", ["x", "w", "b"], "h", {"pads": [1, 1, 1, 1]}), ("HardSwish", ["h"], "y", {})],
                   [("x", [2, 4, 5, 5])], [("w", (8, 4, 3, 3)), ("b", (8,))])
    lc = _layer(model, "convolution")
    if leaves:  # h is read outside the Layer too: cuDNN allocates it, the tail kernel writes y
        lc.outputs = [lc.nodes[0].outputs[0], *lc.outputs]
    from tensorsmith.tactics.triton.epilogue import ConvTail

    config = {**ConvTail(lc).config(channels_last), "fuse": "triton"}
    formats = ["channels_last" if channels_last else "contiguous"]
    free, runner, _ = check_binding("torch.cudnn_conv", lc, config, formats)
    assert output_binding(runner) == tuple(v.name != "h" for v in lc.outputs)
    fmt = torch.channels_last if channels_last else torch.contiguous_format
    assert all(t.is_contiguous(memory_format=fmt) for t in free)


@pytest.mark.parametrize("tail", ["none", "relu", "triton"])
def test_cublas_linear_writes_into_out(tail):
    nodes = [("MatMul", ["x", "w"], "m", {}), ("Add", ["m", "b"], "h", {})]
    if tail == "relu":
        nodes.append(("Relu", ["h"], "y", {}))
    elif tail == "triton":
        nodes += [("Sigmoid", ["h"], "s", {}), ("Mul", ["h", "s"], "y", {})]
    model = _model(nodes, [("x", [2, 5, 16])], [("w", (16, 24)), ("b", (24,))])
    lc = _layer(model, "matmul")
    config = {**TACTICS["torch.cublas_linear"].configs(lc)[-1]} if tail == "triton" else {}
    assert (config.get("tail") == "triton") == (tail == "triton")
    free, runner, inputs = check_binding("torch.cublas_linear", lc, config)
    if tail != "triton":
        check_other_layout_is_left_alone(runner, inputs, free)


@pytest.mark.gpu
@pytest.mark.parametrize("tactic", ["triton.gemm", "torch.cublas_linear", "triton.norm", "triton.elementwise"])
def test_gpu_kernels_write_into_out(tactic):
    # the Softmax takes the input's Cast in fp16, so the MatMul Layer starts at its MatMul
    nodes = [("Softmax", ["x"], "sx", {}), ("MatMul", ["sx", "w"], "m", {}), ("Add", ["m", "b"], "h", {}),
             ("Gelu", ["h"], "g", {}), ("Softmax", ["g"], "y", {})]
    model = _model(nodes, [("x", [4, 64, 128])], [("w", (128, 256)), ("b", (256,))], opset=20)
    if tactic == "triton.elementwise":
        model = _model([("Add", ["x", "r"], "a", {}), ("Sigmoid", ["a"], "s", {}), ("Mul", ["a", "s"], "y", {})],
                       [("x", [4, 64, 128]), ("r", [4, 64, 128])])
    kind = {"triton.norm": "normalization", "triton.elementwise": "elementwise"}.get(tactic, "matmul")
    lcs = [lc for lc in layer_contexts(model, device="cuda", precision="fp16") if lc.layer.kind == kind]
    # the last config: cuBLAS's with the Triton tail (its first runs the erf GELU op by op)
    runs = [(lc, TACTICS[tactic].configs(lc)[-1]) for lc in lcs if TACTICS[tactic].applies(lc)]
    assert runs
    for lc, config in runs:
        check_binding(tactic, lc, config)
