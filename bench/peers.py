"""The peers tensorsmith is measured against, all on the same inputs in inference mode.

- eager: the PyTorch module as it is (model.half() for fp16; channels-last for CNNs).
- cudagraph: the same eager module captured once and replayed as a CUDA graph.
- compile: torch.compile(mode="reduce-overhead") with Inductor freezing (weights become
  constants, BatchNorm folds into convolutions); its own CUDA graphs.
- max-autotune: torch.compile(mode="max-autotune"), built in a child process that is stopped
  at a deadline ("did not build in N s"), since a compile in progress cannot be interrupted.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import dataclass, field
from typing import Any, Callable

import torch

from .measure import MemoryWatch, TimingPlan, prepare_inputs, prepare_model, precision_flags, snapshot, sync, time_fn
from .models import MODELS, ModelSpec, build_model

EXIT_BUILD_TIMEOUT = 86
REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


@dataclass
class Case:
    """One cell of the benchmark: a model at a batch and precision, with its inputs."""

    spec: ModelSpec
    model: torch.nn.Module          # float32, on the CPU; each system takes a copy
    inputs: list[torch.Tensor]      # float32/int64 on the CPU
    batch: int
    precision: str
    device: torch.device
    onnx_path: str = ""
    work_dir: str = ""


@dataclass
class Built:
    """A system ready to run: fn() runs it once on the case's inputs and returns its outputs."""

    fn: Callable[[], Any]
    build_s: float
    build_warm_s: float | None = None
    info: dict = field(default_factory=dict)


def build_eager(case: Case) -> Built:
    t0 = time.perf_counter()
    model = prepare_model(case.model, case.precision, case.spec.family, case.device)
    inputs = prepare_inputs(case.inputs, case.precision, case.spec.family, case.device)
    sync()

    def fn():
        with torch.inference_mode():
            return model(*inputs)
    return Built(fn, time.perf_counter() - t0)


def build_cuda_graph(case: Case) -> Built:
    """Eager captured into one CUDA graph; each call copies the inputs in and replays it."""
    t0 = time.perf_counter()
    model = prepare_model(case.model, case.precision, case.spec.family, case.device)
    inputs = prepare_inputs(case.inputs, case.precision, case.spec.family, case.device)
    static = [t.clone() for t in inputs]
    with torch.inference_mode():
        side = torch.cuda.Stream()
        side.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(side):      # warm up cuDNN/cuBLAS choices outside the capture
            for _ in range(3):
                model(*static)
        torch.cuda.current_stream().wait_stream(side)
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph):
            static_out = model(*static)
    sync()

    def fn():
        for s, x in zip(static, inputs):
            s.copy_(x)
        graph.replay()
        return static_out
    return Built(fn, time.perf_counter() - t0, info={"graph": graph})


def _compile_calls(compiled, inputs, n: int = 3):
    # Three calls: the first compiles, the next ones record the CUDA graphs (cudagraph trees).
    with torch.inference_mode():
        for _ in range(n):
            torch.compiler.cudagraph_mark_step_begin()
            compiled(*inputs)
    sync()


def build_compile(case: Case, mode: str = "reduce-overhead", warm_rebuild: bool = True) -> Built:
    """torch.compile with freezing; build_warm_s is a second compile after dynamo.reset(),
    which finds Inductor's FX-graph and autotuning caches warm."""
    import torch._dynamo
    import torch._inductor.config as inductor_config

    torch._dynamo.reset()
    model = prepare_model(case.model, case.precision, case.spec.family, case.device)
    inputs = prepare_inputs(case.inputs, case.precision, case.spec.family, case.device)
    with inductor_config.patch(freezing=True):
        t0 = time.perf_counter()
        compiled = torch.compile(model, mode=mode)
        _compile_calls(compiled, inputs)
        cold = time.perf_counter() - t0
        warm = None
        if warm_rebuild:
            torch._dynamo.reset()
            t0 = time.perf_counter()
            compiled = torch.compile(model, mode=mode)
            _compile_calls(compiled, inputs)
            warm = time.perf_counter() - t0

    def fn():
        with torch.inference_mode():
            torch.compiler.cudagraph_mark_step_begin()
            return compiled(*inputs)
    return Built(fn, cold, warm)


def release_compiled() -> None:
    """Drop compiled code and its CUDA graphs (cudagraph trees hold their memory pool)."""
    import torch._dynamo

    torch._dynamo.reset()


PEERS: dict[str, Callable[[Case], Built]] = {
    "eager": build_eager,
    "cudagraph": build_cuda_graph,
    "compile": build_compile,
}


# --- max-autotune in a child process ------------------------------------------------------------

def run_max_autotune(case: Case, build_timeout_s: float, timing: TimingPlan, log_path: str) -> dict:
    """Build and measure torch.compile(mode="max-autotune") in a child with a build deadline.

    Returns the child's measurements plus "outputs" (float32 CPU tensors) for the error check,
    or {"status": "timeout", "reason": "did not build in N s"} / {"status": "failed", ...}.
    """
    with tempfile.TemporaryDirectory(prefix="bench-maxat-") as tmp:
        job = {"model": case.spec.name, "batch": case.batch, "precision": case.precision,
               "build_timeout_s": build_timeout_s, "timing": timing.__dict__,
               "result": os.path.join(tmp, "result.json"), "outputs": os.path.join(tmp, "outputs.pt")}
        env = dict(os.environ, PYTHONPATH=os.pathsep.join(filter(None, [REPO, os.environ.get("PYTHONPATH")])))
        # The child also builds the model and measures; give that time beyond the build deadline.
        hard_limit = build_timeout_s + 60
        with open(log_path, "a") as log:
            proc = subprocess.Popen([sys.executable, "-m", "bench.peers", "child", json.dumps(job)], cwd=REPO,
                                    env=env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
            try:
                rc = proc.wait(timeout=hard_limit)
            except subprocess.TimeoutExpired:
                rc = None
            finally:
                _kill_group(proc)        # Inductor's compile workers live in the child's group
        if rc == EXIT_BUILD_TIMEOUT and not os.path.exists(job["result"]):
            return {"status": "timeout", "reason": f"did not build in {build_timeout_s:.0f} s"}
        if rc is None and not os.path.exists(job["result"]):
            return {"status": "timeout", "reason": f"stopped after {hard_limit:.0f} s (model, build and timing)"}
        if not os.path.exists(job["result"]):
            return {"status": "failed", "reason": f"child exited with {rc}; see {os.path.basename(log_path)}"}
        with open(job["result"]) as f:
            result = json.load(f)
        if result.get("status") == "ok":
            result["outputs"] = torch.load(job["outputs"])
        return result


def _kill_group(proc: subprocess.Popen) -> None:
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass
    proc.wait()


def _child(job: dict) -> None:
    spec = MODELS[job["model"]]
    device = torch.device("cuda")
    case = Case(spec, build_model(spec), spec.make_inputs(job["batch"]), job["batch"], job["precision"], device)
    result: dict = {"status": "failed"}
    try:
        with precision_flags(case.precision):
            watch = MemoryWatch()
            watch.start()
            deadline = threading.Timer(job["build_timeout_s"], os._exit, (EXIT_BUILD_TIMEOUT,))
            deadline.daemon = True
            deadline.start()
            built = build_compile(case, mode="max-autotune", warm_rebuild=False)
            deadline.cancel()
            watch.built()
            torch.save(snapshot(built.fn()), job["outputs"])
            timing = time_fn(built.fn, TimingPlan(**job["timing"]))
            result = {"status": "ok", "build_s": built.build_s, **timing, **watch.result()}
    except Exception as e:       # noqa: BLE001 - reported to the parent as a failed system
        first = (str(e).strip().splitlines() or [""])[0][:200]
        result = {"status": "failed", "reason": f"{type(e).__name__}: {first}"}
        import traceback

        traceback.print_exc()
    with open(job["result"], "w") as f:
        json.dump(result, f)
    sys.stdout.flush()
    os._exit(0)      # skip interpreter teardown of compile workers; the parent kills the group


if __name__ == "__main__":
    if len(sys.argv) == 3 and sys.argv[1] == "child":
        _child(json.loads(sys.argv[2]))
    else:
        sys.exit("usage: python -m bench.peers child '<job json>' (started by bench/run.py)")
