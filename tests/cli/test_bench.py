"""`tensorsmith bench` on the CPU engine: wall-clock figures, per-Layer profile, JSON."""

from __future__ import annotations

import json

from tensorsmith.cli.timing import stats


def test_bench_prints_throughput_and_latency_percentiles(tsm, engine_path):
    r = tsm("bench", engine_path, "--warmup", "2", "--iterations", "20")
    assert r.exit_code == 0, r.stderr
    for word in ("throughput", "qps", "p90", "p95", "p99", "median", "wall clock", "CPU engine"):
        assert word in r.stdout


def test_bench_json_has_the_same_figures(tsm, mlp_path):
    r = tsm("bench", mlp_path, "--target", "cpu", "--shapes", "x:8x4", "--iterations", "10", "--json")
    assert r.exit_code == 0, r.stderr
    data = json.loads(r.stdout)
    assert data["iterations"] == 10 and data["inputs"] == {"x": [8, 4]}
    assert set(data["latency_ms"]) == {"min", "mean", "median", "p90", "p95", "p99", "max"}
    assert data["throughput_qps"] > 0
    assert data["enqueue_ms"] is None and data["h2d_ms"] is None  # no GPU: not measured


def test_bench_duration(tsm, engine_path):
    r = tsm("bench", engine_path, "--duration", "0.05", "--warmup", "0", "--json")
    assert r.exit_code == 0, r.stderr
    assert json.loads(r.stdout)["iterations"] >= 1


def test_profile_table_and_export(tsm, engine_path, tmp_path):
    out = tmp_path / "profile.json"
    r = tsm("bench", engine_path, "--iterations", "5", "--profile", "--export-profile", out)
    assert r.exit_code == 0, r.stderr
    assert "per-Layer" in r.stdout and "fc1 + bias1 + relu1" in r.stdout and "%" in r.stdout
    data = json.loads(out.read_text())
    times = [row["ms"] for row in data["layers"]]
    assert times == sorted(times, reverse=True)
    assert abs(sum(row["percent"] for row in data["layers"]) - 100) < 1e-6
    assert {row["name"] for row in data["layers"]} == {"fc1 + bias1 + relu1", "fc2"}


def test_bench_bad_arguments(tsm, engine_path, tmp_path):
    assert tsm("bench", engine_path, "--iterations", "3", "--duration", "1").exit_code == 2
    assert tsm("bench", engine_path, "--iterations", "0").exit_code == 2
    r = tsm("bench", tmp_path / "absent.tsmith")
    assert r.exit_code == 2 and "absent.tsmith" in r.stderr


def test_stats():
    s = stats([1.0, 2.0, 3.0, 4.0])
    assert s["min"] == 1 and s["max"] == 4 and s["median"] == 2.5 and s["mean"] == 2.5
    assert stats([]) is None
