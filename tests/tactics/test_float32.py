"""The float32 variant of a half Layer (tactics/float32.py): TensorRT's per-Layer precision
choice under --fp16. On the CPU the copy runs the reference; on the GPU the tuner times it."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from onnx import TensorProto, helper, numpy_helper

from tensorsmith.ir import DType
from tensorsmith.tactics import REFERENCE, TACTICS
from tensorsmith.tactics.float32 import FLOAT32, float32_context
from tensorsmith.testing.layers import layer_contexts
from tensorsmith.tuner import choose_tactic, max_violation, random_inputs

rng = np.random.default_rng(0)


def _mlp():
    """x -> LayerNorm -> MatMul + bias -> Gelu -> MatMul + bias + residual."""
    d, h = 16, 32
    inits = [numpy_helper.from_array(rng.standard_normal(s).astype(np.float32) * 0.3, n)
             for n, s in [("g", (d,)), ("b", (d,)), ("w1", (d, h)), ("b1", (h,)), ("w2", (h, d)), ("b2", (d,))]]
    nodes = [helper.make_node("LayerNormalization", ["x", "g", "b"], ["n"], axis=-1),
             helper.make_node("MatMul", ["n", "w1"], ["m1"]), helper.make_node("Add", ["m1", "b1"], ["a1"]),
             helper.make_node("Gelu", ["a1"], ["g1"]),
             helper.make_node("MatMul", ["g1", "w2"], ["m2"]), helper.make_node("Add", ["m2", "b2"], ["a2"]),
             helper.make_node("Add", ["a2", "x"], ["y"])]
    g = helper.make_graph(nodes, "mlp", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 5, d])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)], initializer=inits)
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 20)])


def _matmul_layers(device="cpu"):
    return [lc for lc in layer_contexts(_mlp(), precision="fp16", device=device) if lc.layer.kind == "matmul"]


def test_the_float32_copy_has_float32_values_and_weights_and_the_same_interface():
    lc = _matmul_layers()[0]
    copy = float32_context(lc)
    assert copy.dtype == torch.float32 and [n.op_type for n in copy.nodes] == [n.op_type for n in lc.nodes]
    assert [v.name for v in copy.inputs] == [v.name for v in lc.inputs]
    assert [v.name for v in copy.outputs] == [v.name for v in lc.outputs]
    assert all(v.type.dtype is DType.FLOAT32 for n in copy.nodes for v in n.outputs)
    assert all(w.dtype == torch.float32 for w in copy.weights.values())
    assert all(v.type.dtype is DType.FLOAT16 for v in lc.inputs + lc.outputs)  # the original is untouched


@pytest.mark.parametrize("which", [0, 1])
def test_the_float32_variant_matches_the_half_reference(which):
    lc = _matmul_layers()[which]
    inputs = random_inputs(lc)
    want = REFERENCE.compile(lc, {})(inputs)
    got = FLOAT32.compile(lc, {"tactic": "reference", "config": {}})(inputs)
    assert [t.dtype for t in got] == [t.dtype for t in want] == [v.type.dtype.torch for v in lc.outputs]
    assert max_violation(got, want, 2e-2, 2e-2) <= 0
    # and it is closer to float32 math than the half reference is
    exact = REFERENCE.compile(float32_context(lc), {})([t.float() for t in inputs])[0]
    assert (got[0].float() - exact).abs().max() <= (want[0].float() - exact).abs().max()


def test_no_float32_variant_on_the_cpu_in_strict_builds_or_for_float32_layers():
    lc = _matmul_layers()[0]
    assert not FLOAT32.applies(lc)  # the CPU target runs float32 anyway
    lc.device = torch.device("cuda")
    assert FLOAT32.applies(lc)
    lc.strict = True
    assert not FLOAT32.applies(lc)
    fp32 = [c for c in layer_contexts(_mlp(), precision="fp32") if c.layer.kind == "matmul"][0]
    fp32.device = torch.device("cuda")
    assert not FLOAT32.applies(fp32)


def test_a_cast_to_half_inside_the_layer_casts_to_float32_in_the_copy():
    model = _mlp()
    y = model.graph.node[-1]
    y.output[0] = "y32"
    model.graph.node.append(helper.make_node("Cast", ["y32"], ["y"], to=TensorProto.FLOAT16))
    model.graph.output[0].type.tensor_type.elem_type = TensorProto.FLOAT16
    lcs = layer_contexts(model, precision="fp32")
    cast_layer = next(lc for lc in lcs if any(n.op_type == "Cast" for n in lc.nodes))
    copy = float32_context(cast_layer)
    cast = next(n for n in copy.nodes if n.op_type == "Cast")
    assert cast.attrs["to"] == DType.FLOAT32.onnx


@pytest.mark.gpu
def test_gpu_the_tuner_times_float32_variants_and_they_are_correct():
    for lc in _matmul_layers("cuda"):
        choice = choose_tactic(lc)
        tried = [t for t in choice.trials if t.tactic == "float32"]
        assert tried and all(t.status == "ok" and t.ms is not None for t in tried)
        assert {t.config["tactic"] for t in tried} >= {"reference", "torch.cublas_linear"}
        forced = choose_tactic(lc, allowed={"float32"})
        assert forced.tactic in ("float32", "reference")
        inputs = random_inputs(lc)
        assert max_violation(TACTICS["float32"].build(lc, {"tactic": "torch.cublas_linear", "config": {}})(inputs),
                             REFERENCE.compile(lc, {})(inputs), 2e-2, 2e-2) <= 0
