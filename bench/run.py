"""Measure tensorsmith against its peers on this GPU and print one table of ratios.

    python bench/run.py [--models resnet50,bert] [--batch 1,32] [--precision fp16,fp32]
                        [--quick] [--json out.json] [--max-autotune-timeout 120]
                        [--systems ours,eager,...] [--time-budget SECONDS]
    python bench/run.py --report out.json      # print the table of an earlier (or partial) run

Per (model, batch, precision) each system is built, run once for its error against an fp32
eager reference, then timed; results are written to the JSON after every system, so a run
cut short still leaves what it measured.
"""

from __future__ import annotations

import argparse
import datetime
import json
import logging
import os
import platform
import subprocess
import sys
import time
import traceback

if __package__ in (None, ""):          # run as a script: make `bench` importable from the checkout
    sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from bench.measure import PRECISIONS, TimingPlan  # noqa: E402
from bench.models import MODELS  # noqa: E402
from bench.report import OURS, SYSTEMS, format_table, results_markdown, systems_in  # noqa: E402

log = logging.getLogger("bench")
DEFAULT_CACHE = os.path.join(os.path.dirname(os.path.abspath(__file__)), ".cache")
MIN_SYSTEM_S = 20      # below this much time left, a system is skipped rather than started


def _csv(kind, choices=None):
    def parse(text: str) -> list:
        items = [s.strip() for s in text.split(",") if s.strip()]
        if not items:
            raise argparse.ArgumentTypeError(f"empty {kind} list")
        out = []
        for s in items:
            if kind == "batch":
                if not s.isdigit() or int(s) < 1:
                    raise argparse.ArgumentTypeError(f"batch sizes are positive integers, got '{s}'")
                out.append(int(s))
            elif s not in choices:
                raise argparse.ArgumentTypeError(f"unknown {kind} '{s}'; choose from {', '.join(choices)}")
            else:
                out.append(s)
        return list(dict.fromkeys(out))
    return parse


def parse_args(argv=None) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="python bench/run.py", description=__doc__.split("\n\n")[0],
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--models", type=_csv("model", list(MODELS)), default=list(MODELS),
                   help=f"comma-separated, from {','.join(MODELS)} (default: all)")
    p.add_argument("--batch", type=_csv("batch"), default=None,
                   help="batch sizes for every model (default: 1,32; BERT and GPT-2 1,16)")
    p.add_argument("--precision", type=_csv("precision", PRECISIONS), default=["fp16", "fp32"],
                   help=f"from {','.join(PRECISIONS)} (default: fp16,fp32)")
    p.add_argument("--systems", type=_csv("system", SYSTEMS), default=list(SYSTEMS),
                   help=f"from {','.join(SYSTEMS)} (default: all)")
    p.add_argument("--quick", action="store_true",
                   help="fewer timed iterations, no warm rebuild of torch.compile")
    p.add_argument("--json", metavar="PATH", help="write the full results here (default: in the run directory)")
    p.add_argument("--markdown", metavar="PATH", help="also write a bench/RESULTS.md entry for this run here")
    p.add_argument("--max-autotune-timeout", type=float, default=120.0, metavar="S",
                   help="stop a max-autotune build after S seconds (default: 120)")
    p.add_argument("--time-budget", type=float, default=None, metavar="S",
                   help="skip what would start after S seconds of benchmarking")
    p.add_argument("--cache-dir", default=DEFAULT_CACHE, help="exported ONNX files and run directories")
    p.add_argument("--exporter", choices=("auto", "torchscript", "dynamo"), default="auto",
                   help="ONNX exporter to try first (the other is the fallback)")
    p.add_argument("--warm-caches", action="store_true",
                   help="keep the user's Triton/Inductor caches (default: fresh ones, so cold builds are cold)")
    p.add_argument("--report", metavar="JSON", help="print the table of a results file and exit")
    args = p.parse_args(argv)
    if args.max_autotune_timeout <= 0:
        p.error("--max-autotune-timeout must be positive")
    return args


def plan_cells(models, batches, precisions) -> list[tuple[str, int, str]]:
    """(model, batch, precision) in the order they run: precision first, then the i-th batch
    of every model, so that a time budget cuts the least-asked-for cells."""
    cells = []
    for prec in precisions:
        per_model = {m: batches or list(MODELS[m].batches) for m in models}
        for i in range(max(len(b) for b in per_model.values())):
            cells += [(m, b[i], prec) for m, b in per_model.items() if i < len(b)]
    return cells


# --- environment ---------------------------------------------------------------------------------

def environment(argv) -> dict:
    import importlib.metadata as md

    import torch

    versions = {"python": platform.python_version()}
    for pkg in ("tensorsmith", "torch", "triton", "onnx", "onnxruntime", "torchvision", "timm", "transformers"):
        try:
            versions[pkg] = md.version(pkg)
        except md.PackageNotFoundError:
            versions[pkg] = None
    versions["cuda"] = torch.version.cuda
    meta = {"date": datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC"),
            "command": " ".join(["python bench/run.py", *argv]), "versions": versions, "commit": _commit()}
    if torch.cuda.is_available():
        props = torch.cuda.get_device_properties(0)
        meta.update(gpu=props.name, compute_capability=f"{props.major}.{props.minor}",
                    gpu_memory_gb=round(props.total_memory / 2**30, 1))
    return meta


def _commit() -> str | None:
    here = os.path.dirname(os.path.abspath(__file__))
    try:
        sha = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=here, capture_output=True,
                             text=True, timeout=10).stdout.strip()
        dirty = subprocess.run(["git", "status", "--porcelain"], cwd=here, capture_output=True, text=True,
                               timeout=10).stdout.strip()
        return (sha + (" (with uncommitted changes)" if dirty else "")) or None
    except (OSError, subprocess.SubprocessError):
        return None


def _fresh_caches(run_dir: str) -> None:
    # Set before Triton and Inductor first read them, so every system's cold build is cold.
    os.environ["TRITON_CACHE_DIR"] = os.path.join(run_dir, "triton-cache")
    os.environ["TORCHINDUCTOR_CACHE_DIR"] = os.path.join(run_dir, "inductor-cache")


# --- one cell ------------------------------------------------------------------------------------

def build_ours(case, input_names: list[str], cache_path: str):
    """tensorsmith.build twice: cold (empty timing cache), then warm (the cache it just wrote)."""
    import torch

    import tensorsmith
    from bench.measure import release, sync
    from bench.peers import Built

    shapes = {n: tuple(t.shape) for n, t in zip(input_names, case.inputs)}

    def build():
        t0 = time.perf_counter()
        engine = tensorsmith.build(case.onnx_path, target=case.device.type, precision=case.precision,
                                   input_shapes=shapes, timing_cache=cache_path)
        return engine, time.perf_counter() - t0
    engine, cold = build()
    del engine
    release()
    engine, warm = build()
    feeds = {n: t.to(case.device) for n, t in zip(input_names, case.inputs)}   # float32 I/O at any precision
    sync()

    def fn():
        with torch.inference_mode():
            return engine.run(feeds)
    return Built(fn, cold, warm, info={"layers": len(engine.layers)})


def _reason(e: BaseException) -> str:
    text = str(e).strip().splitlines()
    return f"{type(e).__name__}: {text[0][:160]}" if text else type(e).__name__


def measure_system(name: str, builder, case, reference, timing: TimingPlan) -> dict:
    from bench.measure import MemoryWatch, error_vs, release, snapshot, time_fn

    watch = MemoryWatch()
    watch.start()
    built = None
    try:
        built = builder(case)
        watch.built()
        result = {"status": "ok", "build_s": round(built.build_s, 3)}
        if built.build_warm_s is not None:
            result["build_warm_s"] = round(built.build_warm_s, 3)
        result.update(error_vs(snapshot(built.fn()), reference))
        result.update(time_fn(built.fn, timing))
        result.update(watch.result())
        result.update({k: v for k, v in built.info.items() if isinstance(v, (int, float, str))})
    except Exception as e:      # noqa: BLE001 - one system failing must not stop the run
        log.error("%s on %s b%d %s failed:\n%s", name, case.spec.name, case.batch, case.precision,
                  traceback.format_exc())
        result = {"status": "failed", "reason": _reason(e)}
    finally:
        del built
        if name == "compile":
            from bench.peers import release_compiled

            release_compiled()
        release()
    return result


class Bench:
    """One run: the models, their ONNX files and references, and the rows measured so far."""

    def __init__(self, args, run_dir: str, argv, device: str = "cuda"):
        self.args, self.run_dir, self.device = args, run_dir, device
        self.timing = TimingPlan.quick() if args.quick else TimingPlan()
        self.models, self.onnx, self.onnx_protos, self.refs, self.model_errors = {}, {}, {}, {}, {}
        self.start = time.perf_counter()
        self.json_path = args.json or os.path.join(run_dir, "results.json")
        os.makedirs(os.path.dirname(os.path.abspath(self.json_path)), exist_ok=True)
        self.data = {"meta": environment(argv), "models": self.onnx, "results": []}

    def remaining(self) -> float:
        if self.args.time_budget is None:
            return float("inf")
        return self.args.time_budget - (time.perf_counter() - self.start)

    def save(self) -> None:
        tmp = self.json_path + ".tmp"
        with open(tmp, "w") as f:
            json.dump(self.data, f, indent=1, default=str)
        os.replace(tmp, self.json_path)

    def say(self, text: str) -> None:
        print(f"[{time.perf_counter() - self.start:7.1f} s] {text}", file=sys.stderr, flush=True)

    def model(self, name: str):
        from bench.models import build_model, cached_onnx

        import onnx

        from bench.roofline import skeleton

        if name in self.model_errors:       # don't pay for a failed build or export at every batch
            raise self.model_errors[name]
        if name not in self.models:
            spec = MODELS[name]
            try:
                model = build_model(spec)
                record = cached_onnx(spec, os.path.join(self.args.cache_dir, "onnx"), model,
                                     exporter=self.args.exporter)
            except Exception as e:
                self.model_errors[name] = e
                raise
            proto = onnx.load(record["path"])
            inits = {t.name for t in proto.graph.initializer}
            record["inputs"] = [i.name for i in proto.graph.input if i.name not in inits]
            self.models[name], self.onnx[name], self.onnx_protos[name] = model, record, skeleton(proto)
            self.say(f"{name}: ONNX from the {record['exporter']} exporter ({record['path']})")
        return self.models[name]

    def reference(self, case) -> list:
        """fp32 eager outputs on the GPU, TF32 off: what every system's error is measured against."""
        import torch

        from bench.measure import precision_flags, prepare_inputs, prepare_model, release, snapshot

        key = (case.spec.name, case.batch)
        if key not in self.refs:
            with precision_flags("fp32"), torch.inference_mode():
                m = prepare_model(case.model, "fp32", case.spec.family, case.device)
                self.refs[key] = snapshot(m(*prepare_inputs(case.inputs, "fp32", case.spec.family, case.device)))
            del m
            release()
        return self.refs[key]

    def roofline(self, case) -> dict | None:
        from bench.roofline import bound_ms, graph_cost

        peaks = self.data["meta"].get("peaks")
        names = self.onnx[case.spec.name]["inputs"]
        cost = graph_cost(self.onnx_protos[case.spec.name], {n: t.shape for n, t in zip(names, case.inputs)})
        out = cost.to_dict(case.precision)
        if peaks:
            out["bound_ms"] = bound_ms(cost.flops, out["bytes"], peaks["matrix_tflops"][case.precision],
                                       peaks["copy_gbps"])
        return out

    def run_cell(self, model_name: str, batch: int, precision: str, row: dict) -> None:
        import torch

        from bench.measure import precision_flags
        from bench.peers import PEERS, Case, build_compile, run_max_autotune
        from bench.roofline import fractions

        spec = MODELS[model_name]
        model = self.model(model_name)
        case = Case(spec, model, spec.make_inputs(batch), batch, precision, torch.device(self.device),
                    self.onnx[model_name]["path"], self.run_dir)
        ref = self.reference(case)
        try:
            row["roofline"] = self.roofline(case)
        except Exception as e:   # noqa: BLE001 - the times are still worth having
            row["roofline"] = {"error": _reason(e)}
        tc_dir = os.path.join(self.run_dir, "timing-caches")
        os.makedirs(tc_dir, exist_ok=True)
        builders = {OURS: lambda c: build_ours(c, self.onnx[model_name]["inputs"],
                                               os.path.join(tc_dir, f"{model_name}-b{batch}-{precision}.json")),
                    **PEERS}
        if self.args.quick:
            builders["compile"] = lambda c: build_compile(c, warm_rebuild=False)
        for name in self.args.systems:
            left = self.remaining()
            if left < MIN_SYSTEM_S:
                row["systems"][name] = {"status": "skipped", "reason": "time budget spent"}
                continue
            self.say(f"{model_name} b{batch} {precision}: {name} ...")
            with precision_flags(precision):
                if name == "max-autotune":
                    # The child needs about a minute beyond its build deadline (model, timing).
                    limit = min(self.args.max_autotune_timeout, left - 60)
                    if limit < 30:
                        row["systems"][name] = {"status": "skipped", "reason": "time budget spent"}
                        continue
                    res = run_max_autotune(case, limit, self.timing, os.path.join(self.run_dir, "max-autotune.log"))
                    if res.get("status") == "ok":
                        from bench.measure import error_vs

                        res.update(error_vs(res.pop("outputs"), ref))
                else:
                    res = measure_system(name, builders[name], case, ref, self.timing)
            if res.get("status") == "ok":
                res["throughput"] = round(batch * 1e3 / res["median_ms"], 2)
                roof = row.get("roofline") or {}
                if roof.get("bound_ms"):
                    peaks = self.data["meta"]["peaks"]
                    res.update(fractions(res["median_ms"], roof["flops"], roof["bytes"],
                                         peaks["matrix_tflops"][precision], peaks["copy_gbps"]))
                warm = f", warm {res['build_warm_s']:.1f} s" if "build_warm_s" in res else ""
                self.say(f"{model_name} b{batch} {precision}: {name} {res['median_ms']:.3f} ms "
                         f"(build {res.get('build_s', 0):.1f} s{warm}, rel err {res.get('rel_err', 0):.1e})")
            else:
                self.say(f"{model_name} b{batch} {precision}: {name} {res['status']}: {res.get('reason')}")
            row["systems"][name] = res
            self.save()

    def run(self) -> None:
        cells = plan_cells(self.args.models, self.args.batch, self.args.precision)
        rows = self.data["results"]
        try:
            for model_name, batch, precision in cells:
                row = {"model": model_name, "batch": batch, "precision": precision, "roofline": None, "systems": {}}
                rows.append(row)
                if self.remaining() < MIN_SYSTEM_S:
                    row["systems"] = {s: {"status": "skipped", "reason": "time budget spent"}
                                      for s in self.args.systems}
                    continue
                try:
                    self.run_cell(model_name, batch, precision, row)
                except Exception as e:    # noqa: BLE001 - building the model or its reference failed
                    log.error("%s b%d %s:\n%s", model_name, batch, precision, traceback.format_exc())
                    self.say(f"{model_name} b{batch} {precision}: {_reason(e)}")
                    for s in self.args.systems:
                        row["systems"].setdefault(s, {"status": "failed", "reason": _reason(e)})
                self.save()
        except KeyboardInterrupt:
            self.say("interrupted: writing what was measured")
            for row in rows:
                for s in self.args.systems:
                    row["systems"].setdefault(s, {"status": "skipped", "reason": "run interrupted"})
            done = {(r["model"], r["batch"], r["precision"]) for r in rows}
            rows += [{"model": m, "batch": b, "precision": p, "roofline": None,
                      "systems": {s: {"status": "skipped", "reason": "run interrupted"} for s in self.args.systems}}
                     for m, b, p in cells if (m, b, p) not in done]
        self.save()


def main(argv=None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    args = parse_args(argv)
    if args.report:
        with open(args.report) as f:
            data = json.load(f)
        rows = data.get("results", [])
        print(format_table(rows, systems_in(rows) or SYSTEMS))
        if args.markdown:
            with open(args.markdown, "w") as f:
                f.write(results_markdown(data))
        return 0
    import torch

    if not torch.cuda.is_available():
        print("the benchmark needs a CUDA GPU and a CUDA build of torch (tests/bench run without one)",
              file=sys.stderr)
        return 2
    run_dir = os.path.join(args.cache_dir, "runs", time.strftime("%Y%m%d-%H%M%S"))
    os.makedirs(run_dir, exist_ok=True)
    if not args.warm_caches:
        _fresh_caches(run_dir)
    logging.basicConfig(filename=os.path.join(run_dir, "bench.log"), level=logging.INFO,
                        format="%(asctime)s %(name)s %(levelname)s %(message)s")
    bench = Bench(args, run_dir, argv)
    bench.say(f"{bench.data['meta'].get('gpu')}; run directory {run_dir}")
    from bench.roofline import measure_peaks

    bench.data["meta"]["peaks"] = measure_peaks(args.precision)
    bench.say(f"measured peaks: {bench.data['meta']['peaks']}")
    bench.save()
    bench.run()
    print(format_table(bench.data["results"], [s for s in SYSTEMS if s in args.systems]))
    print(f"\nfull results: {bench.json_path}")
    if args.markdown:
        with open(args.markdown, "w") as f:
            f.write(results_markdown(bench.data))
    return 0


if __name__ == "__main__":
    sys.exit(main())
