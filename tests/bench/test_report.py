"""The results table: cells, ratios, footnotes, error flags (no GPU needed)."""

from bench.report import best_peer, format_markdown, format_ms, format_table, results_markdown, speedup, systems_in


def ok(ms, rel_err=1e-4):
    return {"status": "ok", "median_ms": ms, "rel_err": rel_err}


def row(systems, model="resnet50", batch=1, precision="fp16", roofline=None):
    return {"model": model, "batch": batch, "precision": precision, "roofline": roofline, "systems": systems}


def test_speedup_is_best_peer_time_over_ours():
    r = row({"ours": ok(1.0), "eager": ok(4.0), "compile": ok(2.0),
             "max-autotune": {"status": "timeout", "reason": "did not build in 120 s"}})
    assert best_peer(r) == ("compile", 2.0)
    assert speedup(r) == ("compile", 2.0)


def test_no_ratio_without_ours_or_peers():
    assert speedup(row({"ours": {"status": "failed", "reason": "x"}, "eager": ok(1.0)})) is None
    assert speedup(row({"ours": ok(1.0), "eager": {"status": "failed", "reason": "x"}})) is None


def test_table_shows_times_ratio_and_footnoted_failures():
    rows = [
        row({"ours": ok(0.5), "eager": ok(2.0), "cudagraph": ok(1.0), "compile": ok(0.75),
             "max-autotune": {"status": "timeout", "reason": "did not build in 120 s"}},
            roofline={"bound_ms": 0.25, "flops": 1, "bytes": 1}),
        row({"ours": {"status": "failed", "reason": "UnsupportedOpError: Foo"}, "eager": ok(12.5),
             "cudagraph": {"status": "failed", "reason": "RuntimeError: capture"},
             "compile": {"status": "skipped", "reason": "time budget spent"},
             "max-autotune": {"status": "timeout", "reason": "did not build in 120 s"}},
            model="bert", batch=16, precision="fp32"),
    ]
    text = format_table(rows)
    lines = text.splitlines()
    assert lines[0].split()[:8] == ["model", "batch", "prec", "ours", "eager", "cudagraph", "compile", "max-autotune"]
    first = lines[2].split()
    assert first[:8] == ["resnet50", "1", "fp16", "0.500", "2.00", "1.00", "0.750", "t/o[1]"]
    assert "1.50x" in first and "compile" in first
    assert first[-2:] == ["0.250", "50%"]
    second = lines[3].split()
    assert second[3] == "fail[2]" and second[4] == "12.50" and second[7] == "t/o[1]"   # one note per reason
    assert "[1] timeout: did not build in 120 s" in text
    assert "[2] failed: UnsupportedOpError: Foo" in text
    assert "skip[4]" in lines[3] and "[4] skipped: time budget spent" in text
    # every row lines up with the header
    assert len({len(line) for line in lines[:4] if not line.startswith("-")}) == 1


def test_results_out_of_tolerance_are_flagged():
    text = format_table([row({"ours": ok(1.0, rel_err=0.5), "eager": ok(2.0)})], ["ours", "eager"])
    assert "1.00!" in text and "max abs error above" in text
    assert "!" not in format_table([row({"ours": ok(1.0, rel_err=1e-3), "eager": ok(2.0)})], ["ours", "eager"])


def test_systems_not_run_show_a_dash_and_subsets_of_columns():
    text = format_table([row({"ours": ok(1.0)})], ["ours", "eager"])
    assert text.splitlines()[2].split()[3:5] == ["1.00", "-"]
    assert systems_in([row({"eager": ok(1.0), "ours": ok(1.0)})]) == ["ours", "eager"]


def test_markdown_table_and_results_entry():
    rows = [row({"ours": ok(1.0), "eager": ok(3.0)})]
    md = format_markdown(rows, ["ours", "eager"])
    assert md.splitlines()[0].startswith("| model | batch | prec | ours | eager |")
    assert "| resnet50 | 1 | fp16 | 1.00 | 3.00 | 3.00x eager |" in md
    entry = results_markdown({"meta": {"date": "2026-01-01 00:00 UTC", "gpu": "NVIDIA H200",
                                       "versions": {"torch": "2.11.0", "timm": None},
                                       "peaks": {"matrix_tflops": {"fp16": 700.0}, "copy_gbps": 4300.0}},
                              "results": rows})
    assert entry.startswith("## 2026-01-01 00:00 UTC — NVIDIA H200")
    assert "torch 2.11.0" in entry and "timm" not in entry and "fp16 700.0 TFLOP/s; copy 4300.0 GB/s" in entry


def test_format_ms_keeps_three_significant_figures_or_so():
    assert [format_ms(x) for x in (0.01234, 1.2345, 123.45)] == ["0.012", "1.23", "123.5"]
