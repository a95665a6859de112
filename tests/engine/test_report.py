"""The layer report: a user sees which source nodes became one Layer (as --dumpLayerInfo)."""

import json

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

import tensorsmith


def conv_bn_relu_model() -> onnx.ModelProto:
    rng = np.random.default_rng(0)
    c = 4

    def init(name, arr):
        return numpy_helper.from_array(np.asarray(arr, np.float32), name)

    inits = [
        init("w", rng.standard_normal((c, 3, 3, 3)) * 0.3), init("gamma", rng.uniform(0.5, 1.5, c)),
        init("beta", rng.standard_normal(c)), init("mean", rng.standard_normal(c) * 0.1),
        init("var", rng.uniform(0.5, 1.5, c)), init("fc_w", rng.standard_normal((c, 5))),
    ]
    nodes = [
        helper.make_node("Conv", ["x", "w"], ["c1"], name="conv1", pads=[1, 1, 1, 1]),
        helper.make_node("BatchNormalization", ["c1", "gamma", "beta", "mean", "var"], ["b1"], name="bn1"),
        helper.make_node("Relu", ["b1"], ["r1"], name="relu"),
        helper.make_node("GlobalAveragePool", ["r1"], ["p"], name="pool"),
        helper.make_node("Flatten", ["p"], ["f"], name="flatten"),
        helper.make_node("MatMul", ["f", "fc_w"], ["y"], name="fc"),
    ]
    g = helper.make_graph(nodes, "convnet", [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", 3, 8, 8])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["N", 5])], initializer=inits)
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])


def test_conv_bn_relu_become_one_layer():
    engine = tensorsmith.build(conv_bn_relu_model())
    report = engine.layer_report()
    layer = report.find("conv1")
    assert layer.sources == ["conv1", "bn1", "relu"]
    assert layer.name == "conv1 + bn1 + relu"
    assert layer.kind == "convolution"
    assert layer.ops == ["Conv", "Relu"]
    assert [str(t) for t in layer.inputs] == ["x: float32[N,3,8,8]"]
    assert layer.outputs[0].shape == ["N", 4, 8, 8]
    assert "conv1 + bn1 + relu" in report.to_text()


def test_every_source_node_is_in_exactly_one_layer():
    report = tensorsmith.build(conv_bn_relu_model()).layer_report()
    sources = [s for layer in report for s in layer.sources]
    assert sorted(sources) == sorted(["conv1", "bn1", "relu", "pool", "flatten", "fc"])


def test_report_as_json():
    report = tensorsmith.build(conv_bn_relu_model()).layer_report()
    data = json.loads(report.to_json())
    assert [l["kind"] for l in data["layers"]] == ["convolution", "reduction", "shuffle", "matmul"]
    assert data["layers"][0]["outputs"][0]["dtype"] == "float32"


def test_level_zero_keeps_every_node_in_its_own_layer():
    engine = tensorsmith.build(conv_bn_relu_model(), opt_level=0)
    assert [l.sources for l in engine.layer_report()] == [[n] for n in ["conv1", "bn1", "relu", "pool", "flatten", "fc"]]


def test_fused_engine_matches_unfused():
    x = np.random.default_rng(1).standard_normal((2, 3, 8, 8)).astype(np.float32)
    fused = tensorsmith.build(conv_bn_relu_model()).run({"x": x})["y"]
    plain = tensorsmith.build(conv_bn_relu_model(), opt_level=0).run({"x": x})["y"]
    np.testing.assert_allclose(fused, plain, rtol=1e-4, atol=1e-5)
