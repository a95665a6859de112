"""build() with per-Layer precision overrides and strict mode: each Layer tuned (and, after a load,
compiled again) at its own precision; the choices recorded in the plan and the engine file."""

from __future__ import annotations

import logging

import numpy as np
import pytest
import torch

import tensorsmith
import tensorsmith.tuner
from tensorsmith.builder import plan_layers
from tensorsmith.engine import Plan
from tensorsmith.errors import PrecisionError
from tensorsmith.ir import DType
from tensorsmith.passes import group_layers, run_passes
from tensorsmith.passes.precision import convert_precision
from tensorsmith.runtime import Engine, specialize
from tensorsmith.tactics import LayerContext

from .conftest import ort_run
from .passes.test_precision import block_model
from .test_end_to_end import transformer_block_model

CPU = torch.device("cpu")
LN = "block/LayerNorm"


@pytest.fixture
def tuned(monkeypatch):
    """{Layer name: (dtype, strict)} of every LayerContext the tuner is handed."""
    seen = {}
    real = tensorsmith.tuner.choose_tactic

    def spy(lc, **kw):
        seen[lc.layer.name] = (lc.dtype, lc.strict)
        return real(lc, **kw)

    monkeypatch.setattr(tensorsmith.tuner, "choose_tactic", spy)
    return seen


@pytest.fixture
def compiled(monkeypatch):
    """{Layer name: (dtype, strict)} of every LayerContext the loader compiles a runner from."""
    seen = {}

    class Recording(LayerContext):
        def __post_init__(self):
            super().__post_init__()
            seen[self.layer.name] = (self.dtype, self.strict)

    monkeypatch.setattr(specialize, "LayerContext", Recording)
    return seen


def _half_graph_with_a_float32_norm():
    graph = tensorsmith.import_onnx(block_model())
    run_passes(graph)
    convert_precision(graph, DType.FLOAT16, {"*LayerNorm*": "fp32"})
    group_layers(graph)
    return graph


def _norm_layer(graph) -> str:
    return next(layer.name for layer in graph.layers if LN in layer.sources)


def test_each_layer_is_tuned_at_its_own_precision_and_strictness(tuned):
    graph = _half_graph_with_a_float32_norm()
    plan_layers(graph, CPU, "fp16", tune=False, allowed={"reference"}, strict=True)
    norm = _norm_layer(graph)
    assert tuned[norm] == (torch.float32, True)
    assert {v for name, v in tuned.items() if name != norm} == {(torch.float16, True)}


def test_a_loaded_engine_compiles_each_layer_at_the_precision_it_was_tuned_at(tuned, compiled):
    """The GPU target's engine shape (a plan of Layers) on the CPU, with the reference tactic."""
    graph = _half_graph_with_a_float32_norm()
    plan = Plan.from_graph(graph, "cpu", "fp16", strict=True, layer_precisions={"*LayerNorm*": "fp32"})
    plan.layers, runners = plan_layers(graph, CPU, "fp16", tune=False, allowed={"reference"}, strict=True)
    engine = Engine(plan, runners=runners)
    loaded = tensorsmith.Runtime().deserialize(engine.serialize())
    assert compiled == tuned and compiled[_norm_layer(graph)] == (torch.float32, True)
    assert loaded.plan.strict and loaded.plan.layer_precisions == {"*LayerNorm*": "fp32"}
    x = np.random.default_rng(0).standard_normal((2, 8)).astype(np.float32)
    np.testing.assert_array_equal(loaded.run({"x": x})["y"], engine.run({"x": x})["y"])
    report = {layer.name: layer.precision for layer in loaded.layer_report()}
    assert report[_norm_layer(graph)] == "float32" and set(report.values()) == {"float16", "float32"}


def test_the_cpu_target_records_float32_overrides_and_strict():
    engine = tensorsmith.build(block_model(), layer_precisions={"*LayerNorm*": "fp32"}, strict=True)
    assert engine.plan.strict and engine.plan.layer_precisions == {"*LayerNorm*": "fp32"}
    x = np.random.default_rng(0).standard_normal((2, 8)).astype(np.float32)
    np.testing.assert_array_equal(engine.run({"x": x})["y"], tensorsmith.build(block_model()).run({"x": x})["y"])


@pytest.mark.parametrize("options, message", [
    ({"layer_precisions": {"*LayerNorm*": "fp16"}}, r"layer_precisions\['\*LayerNorm\*'\] = 'fp16' needs target"),
    ({"layer_precisions": {"*LayerNorm*": "half"}}, r"is not a precision; choose one of \['fp32', 'fp16', 'bf16'\]"),
    ({"layer_precisions": {"*LayerNrom*": "fp32"}, "strict": True}, r"'\*LayerNrom\*' matches no node"),
    ({"precision": "fp16"}, "needs target='cuda'"),
])
def test_bad_precision_settings_are_typed_errors(options, message):
    with pytest.raises(PrecisionError, match=message):
        tensorsmith.build(block_model(), target="cpu", **options)


def test_an_unmatched_pattern_only_warns_when_not_strict(caplog):
    with caplog.at_level(logging.WARNING, logger="tensorsmith.build"):
        engine = tensorsmith.build(block_model(), layer_precisions={"*LayerNrom*": "fp32"})
    assert "'*LayerNrom*' matches no node" in caplog.text and not engine.plan.strict


# -- on the GPU ------------------------------------------------------------------------------
FP16_TOL = {"rtol": 3e-2, "atol": 3e-2}


def norm_mlp_model():
    """block_model at sizes where the GPU tactics (cuBLAS, Triton norms) apply: x[64,8]."""
    model = block_model()
    for v in (*model.graph.input, *model.graph.output):
        v.type.tensor_type.shape.dim[0].dim_value = 64
    return model


@pytest.mark.gpu
def test_gpu_float32_norm_in_an_fp16_build_matches_and_survives_a_load(tuned, tmp_path):
    model = norm_mlp_model()
    x = np.random.default_rng(0).standard_normal((64, 8)).astype(np.float32)
    engine = tensorsmith.build(model, target="cuda", precision="fp16", input_shapes={"x": x.shape},
                               layer_precisions={"*LayerNorm*": "fp32"})
    norm = engine.layer_report().find(LN)
    assert norm.precision == "float32" and tuned[norm.name] == (torch.float32, False)
    assert {tuned[lp.name][0] for lp in engine.plan.layers if lp.name != norm.name} == {torch.float16}
    layer = next(layer for layer in engine.layers if layer.name == norm.name)
    assert layer.anchor.outputs[0].dtype is DType.FLOAT32
    weights = engine.plan.graph.initializers
    assert (weights["g"].dtype, weights["b"].dtype, weights["w2"].dtype) == (torch.float32,) * 2 + (torch.float16,)
    got = engine.run({"x": x})["y"]
    np.testing.assert_allclose(got, ort_run(model, {"x": x})[0], **FP16_TOL)
    engine.save(tmp_path / "m.tsmith")
    loaded = tensorsmith.load(tmp_path / "m.tsmith")
    assert loaded.plan.layer_precisions == {"*LayerNorm*": "fp32"} and not loaded.plan.strict
    np.testing.assert_array_equal(loaded.run({"x": x})["y"], got)


@pytest.mark.gpu
def test_gpu_strict_transformer_with_float32_norms_and_gelu(tuned, compiled, tmp_path):
    _, (x, mask), proto = transformer_block_model(opset=13)
    feeds = {"x": x.numpy(), "mask": mask.numpy()}
    overrides = {"/ln*": "fp32", "/fc1/*": "fp32"}
    engine = tensorsmith.build(proto, target="cuda", precision="fp16", layer_precisions=overrides, strict=True,
                               input_shapes={"x": x.shape, "mask": mask.shape})
    report = engine.layer_report()
    assert {report.find(s).precision for s in ("/ln1/Sqrt", "/ln2/Sqrt", "/fc1/MatMul")} == {"float32"}
    assert {report.find(s).precision for s in ("/qkv/MatMul", "/Softmax", "/fc2/MatMul")} == {"float16"}
    assert {layer.name: layer.precision for layer in report} == \
        {name: str(DType.from_torch(dtype)) for name, (dtype, _) in tuned.items()}
    assert all(strict for _, strict in tuned.values())
    got = engine.run(feeds)["out"]
    np.testing.assert_allclose(got, ort_run(proto, feeds)[0], **FP16_TOL)
    compiled.clear()
    engine.save(tmp_path / "t.tsmith")
    loaded = tensorsmith.load(tmp_path / "t.tsmith")
    assert compiled == tuned and loaded.plan.strict
    np.testing.assert_array_equal(loaded.run(feeds)["out"], got)


@pytest.mark.gpu
def test_gpu_half_overrides_in_an_fp32_build():
    model = norm_mlp_model()
    x = np.random.default_rng(1).standard_normal((64, 8)).astype(np.float32)
    engine = tensorsmith.build(model, target="cuda", input_shapes={"x": x.shape}, layer_precisions={"fc*": "bf16"})
    assert engine.layer_report().find("fc2").precision == "bfloat16"
    assert engine.layer_report().find(LN).precision == "float32"
    np.testing.assert_allclose(engine.run({"x": x})["y"], ort_run(model, {"x": x})[0], rtol=8e-2, atol=8e-2)


@pytest.mark.gpu
def test_gpu_a_weight_stored_in_two_precisions_is_not_refittable():
    model = block_model(shared_weight=True)
    feeds = {n: np.random.default_rng(2).standard_normal((2, 8)).astype(np.float32) for n in ("x", "x2")}
    engine = tensorsmith.build(model, target="cuda", precision="fp16", layer_precisions={"fc3": "fp32"},
                               input_shapes={"x": (2, 8), "x2": (2, 8)})
    assert "w1" not in engine.refittable_weights and "w2" in engine.refittable_weights
    with pytest.raises(tensorsmith.errors.RefitError, match="'w1' cannot be refit"):
        engine.refit({"w1": np.zeros((8, 16), np.float32)})
    want = ort_run(model, feeds)
    got = engine.run(feeds)
    np.testing.assert_allclose(got["y"], want[0], **FP16_TOL)
    np.testing.assert_allclose(got["z"], want[1], rtol=1e-4, atol=1e-4)  # fc3 ran in float32


@pytest.mark.gpu
def test_gpu_float32_conv_in_a_channels_last_fp16_engine():
    from .test_end_to_end import ResidualBlock, _randomize_bn, export

    model = ResidualBlock(16)
    _randomize_bn(model)
    proto = export(model, (torch.randn(2, 3, 32, 32),), ["x"])
    x = np.random.default_rng(0).standard_normal((4, 3, 32, 32)).astype(np.float32)
    engine = tensorsmith.build(proto, target="cuda", precision="fp16", input_shapes={"x": x.shape},
                               layer_precisions={"/conv1/*": "fp32"})
    assert engine.layer_report().find("/conv1/Conv").precision == "float32"
    np.testing.assert_allclose(engine.run({"x": x})["out"], ort_run(proto, {"x": x})[0], **FP16_TOL)
