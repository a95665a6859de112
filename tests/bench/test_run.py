"""The command line, the order of the work, and one system measured on the CPU (no GPU needed)."""

import json

import pytest
import torch

from bench import run
from bench.measure import TimingPlan, as_list, error_vs, prepare_inputs, time_fn
from bench.models import InputSpec, ModelSpec, build_model
from bench.peers import Case, build_eager


def test_defaults():
    args = run.parse_args([])
    assert args.models == ["resnet50", "mobilenetv3", "efficientnet", "vit", "bert", "gpt2"]
    assert args.batch is None and args.precision == ["fp16", "fp32"]
    assert args.systems == ["ours", "eager", "cudagraph", "compile", "max-autotune"]
    assert args.max_autotune_timeout == 120 and not args.quick and args.json is None


def test_lists_and_flags():
    args = run.parse_args(["--models", "resnet50,bert", "--batch", "1,32", "--precision", "fp16,tf32",
                           "--quick", "--json", "out.json", "--max-autotune-timeout", "60",
                           "--systems", "ours,eager", "--time-budget", "400"])
    assert args.models == ["resnet50", "bert"] and args.batch == [1, 32] and args.precision == ["fp16", "tf32"]
    assert args.quick and args.json == "out.json" and args.max_autotune_timeout == 60
    assert args.systems == ["ours", "eager"] and args.time_budget == 400
    assert run.parse_args(["--batch", "8,8,1"]).batch == [8, 1]


@pytest.mark.parametrize("argv", [["--models", "resnet18"], ["--batch", "0"], ["--batch", "one"],
                                  ["--precision", "int8"], ["--models", ","], ["--max-autotune-timeout", "0"],
                                  ["--systems", "tensorrt"]])
def test_bad_arguments_exit_with_a_message(argv, capsys):
    with pytest.raises(SystemExit):
        run.parse_args(argv)
    assert "error" in capsys.readouterr().err


def test_cells_run_precision_first_then_each_models_ith_batch():
    cells = run.plan_cells(["resnet50", "bert"], None, ["fp16", "fp32"])
    assert cells[:4] == [("resnet50", 1, "fp16"), ("bert", 1, "fp16"), ("resnet50", 32, "fp16"), ("bert", 16, "fp16")]
    assert len(cells) == 8 and cells[4] == ("resnet50", 1, "fp32")
    assert run.plan_cells(["gpt2"], [4], ["fp16"]) == [("gpt2", 4, "fp16")]


def test_report_prints_the_table_of_a_results_file(tmp_path, capsys):
    data = {"meta": {}, "results": [{"model": "bert", "batch": 1, "precision": "fp16", "roofline": None,
                                     "systems": {"ours": {"status": "ok", "median_ms": 2.0},
                                                 "eager": {"status": "ok", "median_ms": 5.0}}}]}
    path = tmp_path / "r.json"
    path.write_text(json.dumps(data))
    md = tmp_path / "r.md"
    assert run.main(["--report", str(path), "--markdown", str(md)]) == 0
    out = capsys.readouterr().out
    assert "2.50x eager" in out and "cudagraph" not in out.splitlines()[0]
    assert "| bert | 1 | fp16 | 2.00 | 5.00 | 2.50x eager |" in md.read_text()


class Small(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = torch.nn.Linear(8, 4)

    def forward(self, x):
        return self.fc(x)


SMALL = ModelSpec("small", "transformer", lambda tiny=False, attn=None: Small(), (InputSpec("x", (8,)),), (1,),
                  ("torch",))


def _case(precision="fp32"):
    return Case(SMALL, build_model(SMALL), SMALL.make_inputs(3), 3, precision, torch.device("cpu"))


def test_measure_system_on_the_cpu():
    case = _case()
    ref = [case.model(*case.inputs)]
    res = run.measure_system("eager", build_eager, case, ref, TimingPlan(warmup=2, min_iters=3, max_iters=5,
                                                                         target_s=0.01))
    assert res["status"] == "ok" and res["max_abs_err"] == 0 and 3 <= res["iters"] <= 5
    assert res["median_ms"] > 0 and "build_s" in res


def test_a_failing_system_is_reported_not_raised():
    def broken(case):
        raise RuntimeError("no kernel for this op\nmore detail")
    res = run.measure_system("ours", broken, _case(), [], TimingPlan.quick())
    assert res == {"status": "failed", "reason": "RuntimeError: no kernel for this op"}


def test_error_is_measured_against_the_reference():
    ref = [torch.tensor([1.0, -4.0])]
    assert error_vs([torch.tensor([1.5, -4.0], dtype=torch.float16)], ref) == {"max_abs_err": 0.5, "rel_err": 0.125}
    assert error_vs([torch.tensor([float("nan"), 0.0])], ref)["max_abs_err"] == float("inf")
    with pytest.raises(ValueError):
        error_vs([torch.zeros(3)], ref)


def test_inputs_for_a_half_precision_peer():
    floats, ints = torch.randn(2, 3, 4, 4), torch.ones(2, 5, dtype=torch.int64)
    a, b = prepare_inputs([floats, ints], "fp16", "cnn", torch.device("cpu"))
    assert a.dtype == torch.float16 and a.is_contiguous(memory_format=torch.channels_last)
    assert b.dtype == torch.int64
    (c,) = prepare_inputs([floats], "fp32", "cnn", torch.device("cpu"))   # true fp32 keeps NCHW
    assert c.dtype == torch.float32 and c.is_contiguous()


def test_outputs_in_order_and_timing_plan():
    t = torch.zeros(1)
    assert len(as_list({"a": t, "b": t})) == 2 and len(as_list((t, [t, t]))) == 3
    timing = time_fn(lambda: None, TimingPlan(warmup=1, min_iters=4, max_iters=4, target_s=0))
    assert timing["iters"] == 4 and timing["p10_ms"] <= timing["median_ms"] <= timing["p90_ms"]


@pytest.mark.parametrize("device", ["cpu", pytest.param("cuda", marks=pytest.mark.gpu)])
def test_a_whole_run_writes_json_and_a_table(device, tmp_path, monkeypatch):
    """The run loop end to end with a tiny model: tensorsmith, eager and CUDA-graph eager."""
    import bench.models
    from bench.report import format_table

    from .test_models import TINY
    monkeypatch.setattr(run, "MODELS", {"tinynet": TINY})
    monkeypatch.setattr(bench.models, "MODELS", {"tinynet": TINY})
    out = tmp_path / "out.json"
    argv = ["--models", "tinynet", "--precision", "fp32", "--systems", "ours,eager,cudagraph", "--quick",
            "--cache-dir", str(tmp_path), "--json", str(out)]
    b = run.Bench(run.parse_args(argv), str(tmp_path), argv, device=device)
    b.run()
    data = json.loads(out.read_text())
    assert [(r["model"], r["batch"]) for r in data["results"]] == [("tinynet", 1), ("tinynet", 4)]
    row = data["results"][1]
    ours, eager = row["systems"]["ours"], row["systems"]["eager"]
    assert ours["status"] == eager["status"] == "ok", (ours, eager)
    assert ours["max_abs_err"] < 1e-4 and ours["build_warm_s"] >= 0 and ours["throughput"] > 0
    assert row["roofline"]["flops"] > 0 and data["models"]["tinynet"]["exporter"] == "torchscript"
    table = format_table(data["results"], ["ours", "eager", "cudagraph"])
    assert "tinynet" in table
    if device == "cpu":       # no GPU to capture on: reported in the table, and the run went on
        assert row["systems"]["cudagraph"]["status"] == "failed" and "fail[1]" in table
    else:
        assert row["systems"]["cudagraph"]["status"] == "ok" and row["systems"]["cudagraph"]["max_abs_err"] < 1e-4
        assert ours["run_peak_mb"] >= 0
