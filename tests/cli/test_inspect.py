"""`tensorsmith inspect`: graph summary, I/O, Layers and memory plan; --graph drawings."""

from __future__ import annotations

import json

import pytest

from tensorsmith.cli import drawing


def test_inspect_an_onnx_model(tsm, mlp_path):
    r = tsm("inspect", mlp_path, "--target", "cpu", "--shapes", "x:2x4")
    assert r.exit_code == 0, r.stderr
    for word in ("input", "output", "MatMul", "fc1 + bias1 + relu1", "absorbed nodes", "reference", "float32",
                 "memory plan", "arena"):
        assert word in r.stdout


def test_inspect_json(tsm, mlp_path):
    r = tsm("inspect", mlp_path, "--target", "cpu", "--shapes", "x:2x4", "--json")
    assert r.exit_code == 0, r.stderr
    data = json.loads(r.stdout)
    assert data["nodes"] == {"before": 4, "after": 4, "layers": 2}
    assert {o["op"]: o["before"] for o in data["ops"]} == {"Add": 1, "MatMul": 2, "Relu": 1}
    assert data["layers"][0]["sources"] == ["fc1", "bias1", "relu1"]
    assert data["inputs"] == [{"name": "x", "dtype": "float32", "shape": [2, 4]}]
    assert data["memory"]["activation_arena_bytes"] > 0


def test_inspect_shows_strict_and_layer_precisions(tsm, mlp_path, tmp_path):
    out = tmp_path / "strict.tsmith"
    r = tsm("build", mlp_path, "-o", out, "--target", "cpu", "--layer-precision", "fc*=fp32", "--strict")
    assert r.exit_code == 0, r.stderr
    r = tsm("inspect", out)
    assert r.exit_code == 0, r.stderr
    assert "for cpu, fp32, strict)" in r.stdout and "layer precisions: fc*=fp32" in r.stdout
    data = json.loads(tsm("inspect", out, "--json").stdout)
    assert data["strict"] is True and data["layer_precisions"] == {"fc*": "fp32"}
    plain = json.loads(tsm("inspect", mlp_path, "--target", "cpu", "--json").stdout)
    assert plain["strict"] is False and plain["layer_precisions"] == {}


def test_inspect_an_engine_file(tsm, engine_path):
    r = tsm("inspect", engine_path, "--json")
    assert r.exit_code == 0, r.stderr
    data = json.loads(r.stdout)
    assert data["kind"] == "engine" and data["nodes"]["before"] is None and len(data["layers"]) == 2


def test_graph_to_dot_and_html(tsm, engine_path, tmp_path):
    r = tsm("inspect", engine_path, "--graph", tmp_path / "g.html")
    assert r.exit_code == 0, r.stderr
    dot = (tmp_path / "g.dot").read_text()
    assert "subgraph cluster_0" in dot and "subgraph cluster_1" in dot and "fc1 + bias1 + relu1" in dot
    page = (tmp_path / "g.html").read_text()
    assert page.startswith("<!doctype html>") and "fc1 + bias1 + relu1" in page


def test_svg_without_graphviz_says_how_to_install_it(tsm, engine_path, tmp_path, monkeypatch):
    monkeypatch.setattr(drawing, "render_with_dot", lambda text, fmt: None)
    r = tsm("inspect", engine_path, "--graph", tmp_path / "g.svg")
    assert r.exit_code == 1
    assert "apt-get install graphviz" in r.stderr and "pip install graphviz" in r.stderr
    assert (tmp_path / "g.dot").exists()


def test_svg_through_graphviz(tsm, engine_path, tmp_path, monkeypatch):
    monkeypatch.setattr(drawing, "render_with_dot", lambda text, fmt: b"<svg>" + fmt.encode() + b"</svg>")
    r = tsm("inspect", engine_path, "--graph", tmp_path / "g.svg")
    assert r.exit_code == 0, r.stderr
    assert (tmp_path / "g.svg").read_bytes() == b"<svg>svg</svg>"


@pytest.mark.skipif(drawing.shutil.which("dot") is None, reason="Graphviz's dot is not installed")
def test_real_svg(tsm, engine_path, tmp_path):
    assert tsm("inspect", engine_path, "--graph", tmp_path / "g.svg").exit_code == 0
    assert b"<svg" in (tmp_path / "g.svg").read_bytes()


def test_bad_graph_suffix_and_bad_files(tsm, engine_path, tmp_path):
    r = tsm("inspect", engine_path, "--graph", tmp_path / "g.txt")
    assert r.exit_code == 2 and "g.txt" in r.stderr
    (tmp_path / "junk.onnx").write_text("junk")
    r = tsm("inspect", tmp_path / "junk.onnx", "--target", "cpu")
    assert r.exit_code == 2 and "junk.onnx" in r.stderr
    r = tsm("inspect", tmp_path)
    assert r.exit_code == 2
