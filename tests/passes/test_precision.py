"""Precision conversion with per-node overrides, run on the CPU (torch computes half tensors there too)."""

from __future__ import annotations

import logging
import random

import numpy as np
import onnx
import pytest
import torch
from onnx import TensorProto, helper

import tensorsmith
from tensorsmith.errors import PrecisionError
from tensorsmith.ir import DType, verify
from tensorsmith.ops.interpreter import run_graph
from tensorsmith.passes import run_passes
from tensorsmith.passes.precision import (
    _ANY_FLOAT_INPUT,
    _KEEP_FLOAT32,
    convert_precision,
    node_precisions,
    parse_layer_precisions,
)

from .graphgen import CNN_BLOCKS, SEQ_BLOCKS, random_model


def _init(rng, name, *shape):
    return onnx.numpy_helper.from_array(rng.standard_normal(shape).astype(np.float32), name)


def block_model(shared_weight: bool = False) -> onnx.ModelProto:
    """x[2,8] -> fc1 (MatMul) -> bias1 (Add) -> block/LayerNorm -> relu -> fc2 (MatMul) -> y[2,4]
    (+ z = x2 @ w1 as fc3 when `shared_weight`, so w1 has two readers)."""
    rng = np.random.default_rng(0)
    nodes = [
        helper.make_node("MatMul", ["x", "w1"], ["h0"], name="fc1"),
        helper.make_node("Add", ["h0", "b1"], ["h1"], name="bias1"),
        helper.make_node("LayerNormalization", ["h1", "g", "b"], ["h2"], name="block/LayerNorm", axis=-1),
        helper.make_node("Relu", ["h2"], ["h3"], name="relu"),
        helper.make_node("MatMul", ["h3", "w2"], ["y"], name="fc2"),
    ]
    inputs = [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 8])]
    outputs = [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 4])]
    if shared_weight:
        nodes.append(helper.make_node("MatMul", ["x2", "w1"], ["z"], name="fc3"))
        inputs.append(helper.make_tensor_value_info("x2", TensorProto.FLOAT, [2, 8]))
        outputs.append(helper.make_tensor_value_info("z", TensorProto.FLOAT, [2, 16]))
    g = helper.make_graph(nodes, "block", inputs, outputs,
                          initializer=[_init(rng, "w1", 8, 16), _init(rng, "b1", 16), _init(rng, "g", 16),
                                       _init(rng, "b", 16), _init(rng, "w2", 16, 4)])
    model = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = min(model.ir_version, 10)  # what the onnxruntime of the GPU tests reads
    return model


def _graph(model, level: int = 3):
    graph = tensorsmith.import_onnx(model)
    run_passes(graph, level)
    return graph


def _run(graph, x, **feeds):
    with torch.inference_mode():
        return run_graph(graph, {"x": x, **feeds})


def _node(graph, name):
    return next(n for n in graph.nodes if n.name == name)


def _casts(graph):
    return {(n.inputs[0].name, DType.from_onnx(n.attrs["to"])) for n in graph.nodes if n.op_type == "Cast"}


def test_a_float32_override_in_a_half_graph():
    model, x = block_model(), torch.randn(2, 8)
    want = _run(_graph(model), x)[0]
    graph = _graph(model)
    assert convert_precision(graph, DType.FLOAT16, {"*LayerNorm*": "fp32"}) == {}
    verify(graph)
    dtypes = {name: t.dtype for name, t in graph.initializers.items()}
    assert dtypes == {"w1": torch.float16, "b1": torch.float16, "g": torch.float32, "b": torch.float32,
                      "w2": torch.float16}
    norm = _node(graph, "block/LayerNorm")
    assert norm.inputs[0].producer.op_type == "Cast" and norm.inputs[0].dtype is DType.FLOAT32
    (reader, _), = norm.outputs[0].users
    assert reader.op_type == "Cast" and reader.outputs[0].dtype is DType.FLOAT16
    assert _casts(graph) == {("x", DType.FLOAT16), ("h1", DType.FLOAT32), ("h2", DType.FLOAT16),
                             ("y_half", DType.FLOAT32)}
    assert [(o.name, o.dtype) for o in graph.outputs] == [("y", DType.FLOAT32)]
    got = _run(graph, x)[0]
    assert got.dtype == torch.float32
    torch.testing.assert_close(got, want, rtol=2e-2, atol=2e-2)


def test_half_overrides_in_a_float32_graph_cast_only_what_crosses():
    model, x = block_model(), torch.randn(2, 8)
    want = _run(_graph(model), x)[0]
    graph = _graph(model)
    convert_precision(graph, DType.FLOAT32, {"fc*": "fp16"})
    verify(graph)
    assert {n: t.dtype for n, t in graph.initializers.items() if t.dtype == torch.float16} == \
        {"w1": torch.float16, "w2": torch.float16}
    assert _node(graph, "fc1").outputs[0].dtype is DType.FLOAT16
    assert _node(graph, "bias1").outputs[0].dtype is DType.FLOAT32
    assert _casts(graph) == {("x", DType.FLOAT16), ("h0", DType.FLOAT32), ("h3", DType.FLOAT16),
                             ("y_half", DType.FLOAT32)}
    torch.testing.assert_close(_run(graph, x)[0], want, rtol=2e-2, atol=2e-2)


def test_no_override_and_float32_default_changes_nothing():
    graph = _graph(block_model())
    before = str(graph)
    assert convert_precision(graph, DType.FLOAT32, {"*": "fp32"}) == {}
    assert str(graph) == before


def test_a_weight_read_in_both_precisions_is_stored_twice():
    model, x, x2 = block_model(shared_weight=True), torch.randn(2, 8), torch.randn(2, 8)
    original = onnx.numpy_helper.to_array(next(i for i in model.graph.initializer if i.name == "w1"))
    want = _run(_graph(model), x, x2=x2)
    graph = _graph(model)
    copies = convert_precision(graph, DType.FLOAT16, {"fc3": "fp32"})
    assert copies == {"w1": ["w1_float32"]}
    assert graph.initializers["w1"].dtype == torch.float16
    np.testing.assert_array_equal(graph.initializers["w1_float32"].numpy(), original)  # from the original bits
    assert _node(graph, "fc3").inputs == [graph.values["x2"], graph.values["w1_float32"]]
    assert _node(graph, "fc1").inputs[0].producer.op_type == "Cast"
    assert [o.dtype for o in graph.outputs] == [DType.FLOAT32, DType.FLOAT32]
    got = _run(graph, x, x2=x2)
    torch.testing.assert_close(got[0], want[0], rtol=2e-2, atol=2e-2)
    torch.testing.assert_close(got[1], want[1], rtol=1e-6, atol=1e-6)  # fc3 ran in float32


def test_a_constant_read_in_both_precisions_is_cloned():
    nodes = [
        helper.make_node("Constant", [], ["c"], name="const", value=helper.make_tensor("v", TensorProto.FLOAT, [3],
                                                                                        [0.1, 0.2, 0.3])),
        helper.make_node("Mul", ["x", "c"], ["a"], name="half_mul"),
        helper.make_node("Add", ["a", "c"], ["y"], name="float_add"),
    ]
    g = helper.make_graph(nodes, "c", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 3])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 3])])
    model = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
    graph = tensorsmith.import_onnx(model)
    x = torch.randn(2, 3)
    want = _run(graph, x)[0]
    convert_precision(graph, DType.FLOAT16, {"float_*": "fp32"})
    verify(graph)
    consts = {n.outputs[0].users[0][0].name: n.attrs["value"].dtype for n in graph.nodes if n.op_type == "Constant"}
    assert consts == {"half_mul": torch.float16, "float_add": torch.float32}
    torch.testing.assert_close(_run(graph, x)[0], want, rtol=2e-3, atol=2e-3)


def test_shape_readers_get_no_cast_and_casts_to_float32_follow_their_node():
    nodes = [
        helper.make_node("Relu", ["x"], ["r"], name="relu"),
        helper.make_node("Shape", ["r"], ["s"], name="shape"),
        helper.make_node("Reshape", ["r", "s"], ["r2"], name="reshape"),
        helper.make_node("Cast", ["r2"], ["c1"], name="cast_half", to=TensorProto.FLOAT),
        helper.make_node("Cast", ["r2"], ["c2"], name="cast_float", to=TensorProto.FLOAT),
        helper.make_node("Add", ["c1", "c2"], ["y"], name="add"),
    ]
    g = helper.make_graph(nodes, "s", [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["n", 3])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["n", 3])])
    graph = tensorsmith.import_onnx(helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)]))
    convert_precision(graph, DType.FLOAT16, {"shape": "fp32", "cast_float": "fp32"})
    verify(graph)
    assert _node(graph, "shape").inputs[0].name == "r"  # no Cast copies r to read its shape
    assert _node(graph, "cast_half").attrs["to"] == DType.FLOAT16.onnx
    assert _node(graph, "cast_float").attrs["to"] == DType.FLOAT32.onnx
    assert _node(graph, "cast_float").inputs[0].name == "r2"
    x = torch.randn(4, 3)
    torch.testing.assert_close(_run(graph, x)[0], 2 * torch.relu(x), rtol=2e-3, atol=2e-3)


def expanded_layernorm_model() -> onnx.ModelProto:
    """A LayerNorm as the exporter writes it (ReduceMean, Sub, Pow, ...): passes fuse it into one node."""
    rng = np.random.default_rng(1)
    p = "/encoder/LayerNorm/"
    nodes = [
        helper.make_node("MatMul", ["x", "w"], ["h"], name="/encoder/dense/MatMul"),
        helper.make_node("ReduceMean", ["h"], ["mu"], name=p + "ReduceMean", axes=[-1]),
        helper.make_node("Sub", ["h", "mu"], ["d"], name=p + "Sub"),
        helper.make_node("Pow", ["d", "two"], ["d2"], name=p + "Pow"),
        helper.make_node("ReduceMean", ["d2"], ["var"], name=p + "ReduceMean_1", axes=[-1]),
        helper.make_node("Add", ["var", "eps"], ["ve"], name=p + "Add"),
        helper.make_node("Sqrt", ["ve"], ["sd"], name=p + "Sqrt"),
        helper.make_node("Div", ["d", "sd"], ["n"], name=p + "Div"),
        helper.make_node("Mul", ["n", "gamma"], ["ng"], name=p + "Mul"),
        helper.make_node("Add", ["ng", "beta"], ["y"], name=p + "Add_1"),
    ]
    inits = [_init(rng, "w", 8, 16), _init(rng, "gamma", 16), _init(rng, "beta", 16),
             onnx.numpy_helper.from_array(np.array(2.0, np.float32), "two"),
             onnx.numpy_helper.from_array(np.array(1e-5, np.float32), "eps")]
    g = helper.make_graph(nodes, "ln", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 8])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 16])], initializer=inits)
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])


def test_patterns_match_the_model_nodes_a_fused_node_absorbed():
    graph = _graph(expanded_layernorm_model())
    (norm,) = [n for n in graph.nodes if n.op_type == "LayerNormalization"]
    assert "/encoder/LayerNorm/Sqrt" in norm.sources and norm.name != "/encoder/LayerNorm/Sqrt"
    compute = node_precisions(graph, DType.FLOAT16, {"/encoder/LayerNorm/*": "fp32"})
    assert compute[norm] is DType.FLOAT32
    assert {compute[n] for n in graph.nodes if n is not norm} == {DType.FLOAT16}


def test_the_last_matching_pattern_wins():
    graph = _graph(block_model())
    compute = node_precisions(graph, DType.FLOAT16, {"*": "fp32", "fc2": "bf16"})
    assert compute[_node(graph, "fc2")] is DType.BFLOAT16
    assert {compute[n] for n in graph.nodes if n.name != "fc2"} == {DType.FLOAT32}


def test_patterns_are_case_sensitive():
    graph = _graph(block_model())
    with pytest.raises(PrecisionError, match="'\\*layernorm\\*' matches no node"):
        node_precisions(graph, DType.FLOAT16, {"*layernorm*": "fp32"}, strict=True)


@pytest.mark.parametrize("overrides, message", [
    ({"*LayerNorm*": "fp8"}, (r"layer_precisions\['\*LayerNorm\*'\] = 'fp8' is not a precision; choose one of "
                              r"\['fp32', 'fp16', 'bf16'\]")),
    ({"*": "tf32"}, "choose one of"),
    ({3: "fp32"}, "keys are glob patterns"),
    ({"": "fp32"}, "keys are glob patterns"),
])
def test_bad_overrides_are_typed_errors(overrides, message):
    with pytest.raises(PrecisionError, match=message):
        parse_layer_precisions(overrides)


def test_a_pattern_matching_nothing_is_an_error_when_strict_and_a_warning_otherwise(caplog):
    graph = _graph(block_model())
    with pytest.raises(PrecisionError) as e:
        convert_precision(graph, DType.FLOAT16, {"*LayerNrom*": "fp32"}, strict=True)
    assert "'*LayerNrom*' matches no node" in str(e.value) and "'fc1'" in str(e.value)
    assert "fix the pattern or drop it" in str(e.value)
    with caplog.at_level(logging.WARNING, logger="tensorsmith.build"):
        convert_precision(_graph(block_model()), DType.FLOAT16, {"*LayerNrom*": "fp32"})
    assert "'*LayerNrom*' matches no node" in caplog.text


def _check_invariants(graph, compute, declared):
    """Every node reads its converted float inputs in its compute dtype; outputs keep their declared dtype."""
    for node in graph.nodes:
        if node not in compute or node.op_type in _ANY_FLOAT_INPUT:
            continue
        for i, v in enumerate(node.inputs):
            if v is not None and v.dtype in (DType.FLOAT32, DType.FLOAT16, DType.BFLOAT16):
                want = DType.FLOAT32 if (node.op_type, i) in _KEEP_FLOAT32 else compute[node]
                assert v.dtype is want, (node.name, i, v)
    assert [o.dtype for o in graph.outputs] == declared


@pytest.mark.parametrize("seed", range(12))
def test_random_graphs_with_random_overrides_compute_the_same_function(seed):
    r = random.Random(seed)
    family = r.choice(["cnn", "seq"])
    table = CNN_BLOCKS if family == "cnn" else SEQ_BLOCKS
    model, feeds = random_model(family, [r.randrange(len(table)) for _ in range(4)], seed)
    x = torch.from_numpy(feeds["x"])
    want = _run(_graph(model), x)
    default, other = r.choice([(DType.FLOAT16, "fp32"), (DType.BFLOAT16, "fp32"), (DType.FLOAT32, "fp16"),
                               (DType.FLOAT16, "bf16")])
    graph = _graph(model)
    overrides = {name: other for name in r.sample([n.name for n in graph.nodes], k=min(3, len(graph.nodes)))}
    declared = [o.dtype for o in graph.outputs]
    compute = node_precisions(graph, default, overrides)
    convert_precision(graph, default, overrides)
    verify(graph)
    _check_invariants(graph, compute, declared)
    tol = 1e-1 if DType.BFLOAT16 in (default, parse_layer_precisions({"*": other})["*"]) else 2e-2
    for got, ref in zip(_run(graph, x), want):
        assert got.dtype == ref.dtype
        torch.testing.assert_close(got, ref, rtol=tol, atol=tol)
