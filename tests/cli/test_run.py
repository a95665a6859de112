"""`tensorsmith run`: given or random inputs, ONNX or engine files, outputs saved."""

from __future__ import annotations

import json

import numpy as np

from tests.conftest import make_mlp_model, ort_run


def test_run_with_random_inputs_saves_outputs(tsm, mlp_path, tmp_path):
    out = tmp_path / "out.npz"
    r = tsm("run", mlp_path, "--target", "cpu", "--shapes", "x:3x4", "--save-outputs", out)
    assert r.exit_code == 0, r.stderr
    assert "y" in r.stdout
    with np.load(out) as data:
        assert data["y"].shape == (3, 3)


def test_run_on_given_inputs_matches_onnxruntime(tsm, engine_path, tmp_path):
    x = np.random.default_rng(1).standard_normal((2, 4)).astype(np.float32)
    np.save(tmp_path / "x.npy", x)
    out = tmp_path / "out.npz"
    r = tsm("run", engine_path, "--input", f"x={tmp_path / 'x.npy'}", "--save-outputs", out)
    assert r.exit_code == 0, r.stderr
    (want,) = ort_run(make_mlp_model(), {"x": x})
    with np.load(out) as data:
        np.testing.assert_allclose(data["y"], want, rtol=1e-5, atol=1e-5)


def test_run_inputs_from_npz_and_json(tsm, engine_path, tmp_path):
    np.savez(tmp_path / "in.npz", x=np.ones((5, 4), np.float32))
    r = tsm("run", engine_path, "--inputs", tmp_path / "in.npz", "--json")
    assert r.exit_code == 0, r.stderr
    data = json.loads(r.stdout)
    assert data["outputs"][0]["name"] == "y" and data["outputs"][0]["shape"] == "5x3"


def test_random_inputs_are_seeded(tsm, engine_path, tmp_path):
    outs = []
    for seed in ("0", "0", "1"):
        path = tmp_path / f"o{len(outs)}.npz"
        assert tsm("run", engine_path, "--seed", seed, "--save-outputs", path).exit_code == 0
        with np.load(path) as data:
            outs.append(data["y"])
    assert np.array_equal(outs[0], outs[1]) and not np.array_equal(outs[0], outs[2])


def test_bad_inputs_exit_2_naming_the_problem(tsm, engine_path, tmp_path):
    r = tsm("run", engine_path, "--input", f"x={tmp_path / 'missing.npy'}")
    assert r.exit_code == 2 and "missing.npy" in r.stderr
    (tmp_path / "junk.npz").write_bytes(b"junk")
    r = tsm("run", engine_path, "--inputs", tmp_path / "junk.npz")
    assert r.exit_code == 2 and "junk.npz" in r.stderr
    np.save(tmp_path / "x.npy", np.ones((2, 4), np.float32))
    r = tsm("run", engine_path, "--input", f"nope={tmp_path / 'x.npy'}")
    assert r.exit_code == 2 and "nope" in r.stderr
    r = tsm("run", engine_path, "--input", "no-equals-sign")
    assert r.exit_code == 2 and "NAME=FILE.npy" in r.stderr
    np.save(tmp_path / "wrong.npy", np.ones((2, 5), np.float32))
    r = tsm("run", engine_path, "--input", f"x={tmp_path / 'wrong.npy'}")
    assert r.exit_code == 2 and "'x'" in r.stderr


def test_build_options_are_refused_for_engine_files(tsm, engine_path):
    r = tsm("run", engine_path, "--opt-level", "1")
    assert r.exit_code == 2 and "--opt-level" in r.stderr


def test_corrupt_engine_file(tsm, engine_path):
    blob = bytearray(engine_path.read_bytes())
    blob[-10] ^= 0xFF
    engine_path.write_bytes(bytes(blob))
    r = tsm("run", engine_path)
    assert r.exit_code == 2 and str(engine_path) in r.stderr and "Traceback" not in r.stderr
