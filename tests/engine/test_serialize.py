"""Engine files: save and load give the same engine; every bad file is a typed error."""

import time

import numpy as np
import onnx
import pytest
import torch
from onnx import TensorProto, helper

import tensorsmith
from tensorsmith.engine.serialize import HEADER_SIZE
from tensorsmith.errors import (
    EngineCorruptError,
    EngineFormatError,
    EngineTacticError,
    EngineTargetError,
    EngineVersionError,
)
from tests.conftest import make_mlp_model
from tests.engine.engine_files import edit, seal, split
from tests.runtime.layered import build_layered

RT = tensorsmith.Runtime()


@pytest.fixture(scope="module")
def mlp_blob() -> bytes:
    return tensorsmith.build(make_mlp_model()).serialize()


def _if_model() -> onnx.ModelProto:
    """Control flow (subgraphs reading an outer value), a Constant with a tensor attribute, ints/floats attrs."""
    then = helper.make_graph([helper.make_node("Add", ["x", "x"], ["t"])], "then", [],
                             [helper.make_tensor_value_info("t", TensorProto.FLOAT, [2, 3])])
    other = helper.make_graph([helper.make_node("Neg", ["x"], ["e"])], "else", [],
                              [helper.make_tensor_value_info("e", TensorProto.FLOAT, [2, 3])])
    nodes = [
        helper.make_node("Constant", [], ["c"], value=helper.make_tensor("cv", TensorProto.FLOAT, [3], [1, 2, 3])),
        helper.make_node("ReduceSum", ["x"], ["s"], keepdims=0),
        helper.make_node("Greater", ["s", "zero"], ["cond"]),
        helper.make_node("If", ["cond"], ["r"], then_branch=then, else_branch=other),
        helper.make_node("Mul", ["r", "c"], ["m"]),
        helper.make_node("LeakyRelu", ["m"], ["y"], alpha=0.25),
    ]
    g = helper.make_graph(nodes, "ifmodel", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 3])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 3])],
                          initializer=[onnx.numpy_helper.from_array(np.array(0.0, np.float32), "zero")])
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])


def test_round_trip_identical_outputs(tmp_path):
    engine = tensorsmith.build(make_mlp_model())
    path = tmp_path / "model.tsmith"
    engine.save(path)
    loaded = tensorsmith.load(path)
    x = np.random.default_rng(1).standard_normal((5, 4)).astype(np.float32)
    np.testing.assert_array_equal(loaded.run({"x": x})["y"], engine.run({"x": x})["y"])
    assert [str(s) for s in loaded.inputs] == [str(s) for s in engine.inputs] == ["x: float32[N,4]"]


@pytest.mark.parametrize("opt_level", [0, 3])
def test_round_trip_subgraphs_and_tensor_attributes(opt_level):
    engine = tensorsmith.build(_if_model(), opt_level=opt_level)
    loaded = RT.deserialize(engine.serialize())
    for x in (np.ones((2, 3), np.float32), -np.ones((2, 3), np.float32)):
        np.testing.assert_array_equal(loaded.run({"x": x})["y"], engine.run({"x": x})["y"])
    assert str(loaded.plan.graph) == str(engine.plan.graph)


def test_round_trip_of_a_plan_of_layers():
    """The GPU target's shape of engine (Layers with tactics), run on the CPU with the reference tactic."""
    engine = build_layered(make_mlp_model(), profiles=[{"x": {"min": (1, 4), "opt": (8, 4), "max": (16, 4)}}])
    loaded = RT.deserialize(engine.serialize())
    assert [(lp.name, lp.tactic) for lp in loaded.plan.layers] == [(lp.name, lp.tactic) for lp in engine.plan.layers]
    x = np.random.default_rng(2).standard_normal((11, 4)).astype(np.float32)
    np.testing.assert_array_equal(loaded.run({"x": x})["y"], engine.run({"x": x})["y"])


def test_manifest_records_versions_target_io_profiles(mlp_blob):
    engine = tensorsmith.build(make_mlp_model(), profiles=[{"x": {"min": (1, 4), "opt": (4, 4), "max": (9, 4)}}])
    manifest, weights = split(engine.serialize())
    assert manifest["format_version"] == 1
    assert set(manifest["producer"]) == {"tensorsmith", "torch", "triton", "cuda"}
    assert manifest["producer"]["torch"] == torch.__version__
    assert manifest["target"] == {"kind": "cpu"} and manifest["precision"] == "fp32"
    assert manifest["inputs"] == [{"name": "x", "type": {"dtype": "float32", "shape": ["N", 4]}}]
    assert manifest["profiles"] == [{"x": {"min": [1, 4], "opt": [4, 4], "max": [9, 4]}}]
    assert set(manifest["refittable"]["weights"]) == {"w1", "b1", "w2"}
    assert manifest["graph"]["initializers"] == {"w1": "w1", "b1": "b1", "w2": "w2"}
    assert weights[:8] != b"" and b"pickle" not in weights
    loaded = RT.deserialize(engine.serialize())
    assert loaded.profiles == engine.profiles


def test_strict_and_layer_precisions_round_trip():
    overrides = {"fc*": "fp32", "relu1": "fp32"}
    engine = tensorsmith.build(make_mlp_model(), layer_precisions=overrides, strict=True)
    manifest, _ = split(engine.serialize())
    assert manifest["strict"] is True and manifest["layer_precisions"] == overrides
    loaded = RT.deserialize(engine.serialize())
    assert loaded.plan.strict and list(loaded.plan.layer_precisions.items()) == list(overrides.items())


def test_a_file_from_before_strict_and_overrides_loads_as_non_strict(mlp_blob):
    def drop(m):
        del m["strict"], m["layer_precisions"]
    loaded = RT.deserialize(edit(mlp_blob, drop))
    assert not loaded.plan.strict and loaded.plan.layer_precisions == {}


@pytest.mark.parametrize("field, value", [("strict", "yes"), ("layer_precisions", ["fc1", "fp32"]),
                                          ("layer_precisions", {"fc1": 32})])
def test_malformed_precision_settings_are_typed(mlp_blob, field, value):
    with pytest.raises(EngineCorruptError, match=f"malformed.*'{field}'"):
        RT.deserialize(edit(mlp_blob, lambda m: m.update({field: value})))


def test_not_an_engine_file(mlp_blob):
    with pytest.raises(EngineFormatError, match="not a tensorsmith engine file.*tensorsmith.build"):
        RT.deserialize(make_mlp_model().SerializeToString())


def test_missing_file(tmp_path):
    with pytest.raises(EngineFormatError, match="no such file"):
        RT.load(tmp_path / "nope.tsmith")


def test_other_format_version(mlp_blob):
    manifest, weights = split(mlp_blob)
    with pytest.raises(EngineVersionError, match="format version 2.*rebuild"):
        RT.deserialize(seal(manifest, weights, version=2))


@pytest.mark.parametrize("cut", [10, HEADER_SIZE + 5, -1])
def test_truncated(mlp_blob, cut):
    with pytest.raises(EngineCorruptError, match="truncated"):
        RT.deserialize(mlp_blob[:cut])


def test_corrupt_body_fails_the_checksum(mlp_blob):
    blob = bytearray(mlp_blob)
    blob[-3] ^= 0xFF
    with pytest.raises(EngineCorruptError, match="checksum.*copy the file again"):
        RT.deserialize(bytes(blob))


@pytest.mark.skipif(torch.cuda.is_available(), reason="checks the message on a machine without a GPU")
def test_gpu_engine_on_a_machine_without_gpu(mlp_blob):
    blob = edit(mlp_blob, lambda m: m.update(target={"kind": "cuda", "gpu": "NVIDIA H200", "capability": [9, 0]}))
    with pytest.raises(EngineTargetError, match="NVIDIA H200 \\(compute capability 9.0\\).*no CUDA GPU.*target='cpu'"):
        RT.deserialize(blob)


@pytest.mark.gpu
def test_gpu_engine_of_another_architecture(mlp_blob):
    blob = edit(mlp_blob, lambda m: m.update(target={"kind": "cuda", "gpu": "Old GPU", "capability": [3, 5]}))
    with pytest.raises(EngineTargetError, match="compute capability 3.5.*rebuild the engine on this GPU"):
        RT.deserialize(blob)


def test_missing_tactic():
    blob = build_layered(make_mlp_model(), profiles=[{"x": {"min": (1, 4), "opt": (2, 4), "max": (4, 4)}}]).serialize()

    def rename(m):
        m["layers"][0]["tactic"] = m["profile_layers"][0][0]["tactic"] = "triton_from_the_future"
    with pytest.raises(EngineTacticError, match="tactic 'triton_from_the_future'.*install the tensorsmith version"):
        RT.deserialize(edit(blob, rename))


def test_malformed_manifest_is_typed(mlp_blob):
    with pytest.raises(EngineCorruptError, match="malformed"):
        RT.deserialize(edit(mlp_blob, lambda m: m["graph"]["nodes"][0].update(inputs=["undefined_value"])))
    with pytest.raises(EngineCorruptError, match="malformed.*Frobnicate"):
        RT.deserialize(edit(mlp_blob, lambda m: m["graph"]["nodes"][0].update(op_type="Frobnicate")))
    manifest, weights = split(mlp_blob)
    with pytest.raises(EngineCorruptError, match="not valid JSON"):
        RT.deserialize(seal(b"{not json", weights))


def test_load_time_small_model(mlp_blob, tmp_path, record_property):
    path = tmp_path / "m.tsmith"
    path.write_bytes(mlp_blob)
    t0 = time.perf_counter()
    for _ in range(20):
        tensorsmith.load(path)
    ms = (time.perf_counter() - t0) / 20 * 1e3
    record_property("load_ms", ms)
    assert ms < 200


def test_compile_one_call(tmp_path):
    path = tmp_path / "mlp.onnx"
    onnx.save(make_mlp_model(), path)
    engine = tensorsmith.compile(str(path), precision="fp16")
    x = np.ones((2, 4), np.float32)
    tol = 1e-5 if engine.target == "cpu" else 2e-2
    np.testing.assert_allclose(engine(x), tensorsmith.build(make_mlp_model()).run({"x": x})["y"], rtol=tol, atol=tol)


@pytest.mark.gpu
@pytest.mark.parametrize("precision", ["fp32", "fp16"])
def test_gpu_round_trip_identical_outputs(tmp_path, precision):
    engine = tensorsmith.build(make_mlp_model(), target="cuda", precision=precision, input_shapes={"x": (6, 4)})
    engine.save(tmp_path / "gpu.tsmith")
    t0 = time.perf_counter()
    loaded = tensorsmith.load(tmp_path / "gpu.tsmith")
    print(f"GPU engine load: {(time.perf_counter() - t0) * 1e3:.1f} ms")
    assert [lp.tactic for lp in loaded.plan.layers] == [lp.tactic for lp in engine.plan.layers]
    x = torch.randn(6, 4, device="cuda")
    a = engine.create_execution_context().execute({"x": x})["y"]
    b = loaded.create_execution_context().execute({"x": x})["y"]
    torch.testing.assert_close(a, b, rtol=0, atol=0)
    assert loaded.plan.memory == engine.plan.memory


@pytest.mark.gpu
def test_gpu_round_trip_with_profiles(tmp_path):
    profiles = [{"x": {"min": (1, 4), "opt": (8, 4), "max": (32, 4)}}]
    engine = tensorsmith.build(make_mlp_model(), target="cuda", profiles=profiles)
    loaded = RT.deserialize(engine.serialize())
    for n in (1, 8, 17):
        x = torch.randn(n, 4, device="cuda")
        torch.testing.assert_close(loaded.run({"x": x})["y"], engine.run({"x": x})["y"], rtol=0, atol=0)
