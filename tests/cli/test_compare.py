"""`tensorsmith compare`: PASS against ONNX Runtime, FAIL with exit code 1, --per-layer names the node."""

from __future__ import annotations

import dataclasses
import json
import sys

import numpy as np
import pytest
import torch

from tensorsmith.ops import registry


def test_compare_passes(tsm, mlp_path):
    r = tsm("compare", mlp_path, "--target", "cpu", "--shapes", "x:4x4")
    assert r.exit_code == 0, r.stderr
    assert "PASS" in r.stdout and "FAIL" not in r.stdout
    for word in ("max abs", "max rel", "mean abs", "cosine", "onnxruntime"):
        assert word in r.stdout


def test_compare_json(tsm, mlp_path):
    r = tsm("compare", mlp_path, "--target", "cpu", "--json")
    assert r.exit_code == 0, r.stderr
    data = json.loads(r.stdout)
    (row,) = data["outputs"]
    assert row["output"] == "y" and row["passed"] and row["cosine"] > 0.9999 and row["max_abs"] < 1e-4


@pytest.fixture
def broken_relu(monkeypatch):
    """Relu computes relu(x) + 0.5: tensorsmith is now wrong from node 'relu1' on."""
    op = registry.REGISTRY[("", "Relu")]
    monkeypatch.setitem(registry.REGISTRY, ("", "Relu"),
                        dataclasses.replace(op, reference=lambda ctx, x: torch.relu(x) + 0.5))


def test_compare_fails_with_exit_code_1(tsm, mlp_path, broken_relu):
    r = tsm("compare", mlp_path, "--target", "cpu")
    assert r.exit_code == 1
    assert "FAIL" in r.stdout


def test_zero_tolerance_fails_on_rounding(tsm, mlp_path, monkeypatch):
    # The engine and ONNX Runtime round differently somewhere on enough random inputs; make it certain.
    import tensorsmith.cli.compare as compare

    real = compare.run_ort

    def nudged(model, feeds):
        return {k: v + np.float32(1e-6) for k, v in real(model, feeds).items()}

    monkeypatch.setattr(compare, "run_ort", nudged)
    assert tsm("compare", mlp_path, "--target", "cpu", "--atol", "0", "--rtol", "0").exit_code == 1
    assert tsm("compare", mlp_path, "--target", "cpu").exit_code == 0


def test_per_layer_names_the_first_bad_node(tsm, mlp_path, broken_relu):
    r = tsm("compare", mlp_path, "--target", "cpu", "--per-layer", "--json")
    assert r.exit_code == 1
    pl = json.loads(r.stdout)["per_layer"]
    first = pl["first_failure"]
    assert first["node"] == "relu1" and first["tensor"] == "h2" and first["layer"] == "fc1 + bias1 + relu1"
    passed = {row["node"]: row["passed"] for row in pl["tensors"]}
    assert passed["fc1"] and passed["bias1"] and not passed["fc2"]


def test_per_layer_text(tsm, mlp_path, broken_relu):
    r = tsm("compare", mlp_path, "--target", "cpu", "--per-layer")
    assert "first mismatch: node 'relu1' (Relu)" in r.stdout


def test_per_layer_all_pass(tsm, mlp_path):
    r = tsm("compare", mlp_path, "--target", "cpu", "--per-layer", "--opt-level", "0")
    assert r.exit_code == 0, r.stderr
    assert "within tolerance" in r.stdout


def test_compare_a_saved_engine_and_torch(tsm, mlp_path, engine_path, tmp_path, monkeypatch):
    module = tmp_path / "mlp_torch_factory.py"
    module.write_text(
        "import onnx, torch\n"
        "from onnx import numpy_helper\n"
        f"W = {{t.name: torch.from_numpy(numpy_helper.to_array(t).copy()) for t in onnx.load({str(mlp_path)!r}).graph.initializer}}\n"
        "class M(torch.nn.Module):\n"
        "    def forward(self, x):\n"
        "        return torch.relu(x @ W['w1'] + W['b1']) @ W['w2']\n"
        "def make():\n"
        "    return M()\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    r = tsm("compare", mlp_path, "--engine", engine_path, "--torch", "mlp_torch_factory:make", "--json")
    sys.modules.pop("mlp_torch_factory", None)
    assert r.exit_code == 0, r.stderr
    assert {row["reference"] for row in json.loads(r.stdout)["outputs"]} == {"onnxruntime", "torch"}


def test_compare_bad_input(tsm, mlp_path, engine_path, tmp_path):
    r = tsm("compare", engine_path)
    assert r.exit_code == 2 and "--engine" in r.stderr
    r = tsm("compare", tmp_path / "gone.onnx")
    assert r.exit_code == 2 and "gone.onnx" in r.stderr
    r = tsm("compare", mlp_path, "--engine", mlp_path)
    assert r.exit_code == 2 and "not a tensorsmith engine" in r.stderr
    r = tsm("compare", mlp_path, "--atol", "-1")
    assert r.exit_code == 2
    r = tsm("compare", mlp_path, "--target", "cpu", "--torch", "no-colon")
    assert r.exit_code == 2 and "MODULE:FACTORY" in r.stderr
