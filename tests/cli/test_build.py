"""`tensorsmith build`: options reach the builder, the engine file loads, bad input exits 2."""

from __future__ import annotations

import io
import logging

import pytest

import tensorsmith
from tensorsmith.cli.progress import show_progress


def test_build_writes_an_engine_that_loads(tsm, mlp_path, tmp_path):
    out = tmp_path / "m.tsmith"
    r = tsm("build", mlp_path, "-o", out, "--target", "cpu", "--opt-level", "2", "--shapes", "x:2x4")
    assert r.exit_code == 0, r.stderr
    assert "m.tsmith" in r.stdout
    engine = tensorsmith.load(str(out))
    assert [tuple(s.type.shape) for s in engine.inputs] == [(2, 4)]


def test_default_output_name_is_the_model_with_tsmith(tsm, mlp_path):
    assert tsm("build", mlp_path, "--target", "cpu").exit_code == 0
    assert mlp_path.with_suffix(".tsmith").exists()


def test_a_profile_from_min_opt_max_shapes(tsm, mlp_path, tmp_path):
    out = tmp_path / "p.tsmith"
    r = tsm("build", mlp_path, "-o", out, "--target", "cpu", "--min-shapes", "x:1x4", "--opt-shapes", "x:4x4",
            "--max-shapes", "x:8x4")
    assert r.exit_code == 0, r.stderr
    (profile,) = tensorsmith.load(str(out)).profiles
    assert profile.to_data() == {"x": {"min": [1, 4], "opt": [4, 4], "max": [8, 4]}}


@pytest.fixture
def builder_kwargs(monkeypatch) -> dict:
    """The keyword arguments the CLI hands tensorsmith.builder.build (filled when it is called)."""
    import tensorsmith.builder

    seen = {}
    real = tensorsmith.builder.build

    def spy(model, **kw):
        seen.update(kw)
        return real(model, **kw)

    monkeypatch.setattr(tensorsmith.builder, "build", spy)
    return seen


def test_disable_pass_reaches_the_builder(tsm, mlp_path, builder_kwargs):
    seen = builder_kwargs
    r = tsm("build", mlp_path, "--target", "cpu", "--disable-pass", "layer_fusion", "--disable-pass",
            "constant_folding", "--workspace", "64", "--timing-cache", mlp_path.parent / "cache.json")
    assert r.exit_code == 0, r.stderr
    assert seen["disable_passes"] == ["layer_fusion", "constant_folding"]
    assert seen["workspace"] == 64 * 2**20 and seen["precision"] == "fp32" and seen["target"] == "cpu"


def test_layer_precision_and_strict_reach_the_builder(tsm, mlp_path, builder_kwargs):
    seen = builder_kwargs
    out = mlp_path.parent / "strict.tsmith"
    r = tsm("build", mlp_path, "-o", out, "--target", "cpu", "--layer-precision", "fc*=fp32",
            "--layer-precision", "relu1=FP32", "--strict")
    assert r.exit_code == 0, r.stderr
    assert seen["layer_precisions"] == {"fc*": "fp32", "relu1": "fp32"} and seen["strict"] is True
    engine = tensorsmith.load(str(out))
    assert engine.plan.strict and engine.plan.layer_precisions == {"fc*": "fp32", "relu1": "fp32"}


@pytest.mark.parametrize("args, message", [
    (["--int8"], "INT8 is not supported yet (quantization lands later)"),
    (["--fp16", "--bf16"], "choose one precision"),
    (["--fp16", "--target", "cpu"], "needs target='cuda'"),
    (["--disable-pass", "no_such_pass"], "no_such_pass"),
    (["--opt-level", "9"], "--opt-level"),
    (["--shapes", "x:1xq"], "--shapes"),
    (["--shapes", "y:1x4", "--target", "cpu"], "'y'"),
    (["--min-shapes", "x:1x4", "--max-shapes", "x:8x4"], "--opt-shapes"),
    (["--shapes", "x:2x4", "--min-shapes", "x:1x4", "--opt-shapes", "x:2x4", "--max-shapes", "x:8x4"], "not both"),
    (["--layer-precision", "fc1"], "'--layer-precision': 'fc1' is not PATTERN=PRECISION"),
    (["--layer-precision", "=fp32"], "'--layer-precision'"),
    (["--layer-precision", "fc1=fp8"], "unknown precision 'fp8'; choose one of fp32, fp16, bf16"),
    (["--layer-precision", "fc1=fp16", "--target", "cpu"], "needs target='cuda'"),
    (["--layer-precision", "nope*=fp32", "--strict", "--target", "cpu"], "'nope*' matches no node"),
])
def test_bad_arguments_exit_2_with_one_line(tsm, mlp_path, args, message):
    r = tsm("build", mlp_path, *args)
    assert r.exit_code == 2
    assert r.stderr.startswith("error: ") and message in r.stderr
    assert "Traceback" not in r.stderr


def test_missing_model(tsm, tmp_path):
    r = tsm("build", tmp_path / "nope.onnx")
    assert r.exit_code == 2 and "nope.onnx" in r.stderr and "no such file" in r.stderr


def test_garbage_model(tsm, tmp_path):
    bad = tmp_path / "garbage.onnx"
    bad.write_bytes(b"\x00\x01 this is not a protobuf \xff")
    r = tsm("build", bad, "--target", "cpu")
    assert r.exit_code == 2 and "garbage.onnx" in r.stderr and r.stderr.count("\n") == 1


def test_building_an_engine_file_is_refused(tsm, engine_path):
    r = tsm("build", engine_path)
    assert r.exit_code == 2 and "already a built engine" in r.stderr


@pytest.mark.parametrize("command", ["run", "inspect", "bench"])
def test_precision_flags_are_refused_for_an_engine_file(tsm, engine_path, command):
    r = tsm(command, engine_path, "--layer-precision", "fc*=fp32", "--strict")
    assert r.exit_code == 2 and "build options (--layer-precision, --strict) apply to ONNX models only" in r.stderr


def test_progress_line_shows_layer_i_of_n_and_time():
    stream = io.StringIO()
    log = logging.getLogger("tensorsmith.build")
    with show_progress(stream, enabled=True):
        log.info("optimized %d nodes", 4)  # not a Layer record: ignored
        log.info("[%d/%d %5.1fs] %s: %s%s", 1, 3, 0.5, "conv1", "cudnn", "")
        log.info("[%d/%d %5.1fs] %s: %s%s", 2, 3, 1.25, "fc", "triton_gemm", " (cached)")
    text = stream.getvalue()
    assert "Layer 1/3" in text and "Layer 2/3" in text and "1.2s" in text and "(cached)" in text
    assert "optimized" not in text and text.endswith("\n")


def test_no_progress_line_when_disabled():
    stream = io.StringIO()
    with show_progress(stream, enabled=False):
        logging.getLogger("tensorsmith.build").info("[%d/%d %5.1fs] %s: %s%s", 1, 1, 0.1, "a", "b", "")
    assert stream.getvalue() == ""


def test_verbose_logs_the_build(tsm, mlp_path):
    r = tsm("build", mlp_path, "--target", "cpu", "--verbose")
    assert r.exit_code == 0
    assert "[tensorsmith.build]" in r.stderr and "pass " in r.stderr
