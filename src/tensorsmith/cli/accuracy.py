"""Accuracy checks for `compare`: error metrics, the reference runners, and every intermediate value.

The references are ONNX Runtime (CPU) and, optionally, a PyTorch module. For `--per-layer`,
a copy of the ONNX model returns every node output (as `polygraphy --mark-all`), and the
engine returns every value it computes: each Layer's outputs on a plan of Layers (what its
tactic wrote), each node's output on the CPU engine (its op-by-op interpreter).
"""

from __future__ import annotations

import importlib
from dataclasses import dataclass

import numpy as np
import onnx
import torch

from .common import EXIT_FAILURE, CliError


@dataclass
class Errors:
    """How far `actual` is from `expected`; `passed` as numpy.isclose: |a - e| <= atol + rtol * |e|."""

    shape: list
    max_abs: float
    max_rel: float
    mean_abs: float
    cosine: float
    passed: bool
    reason: str = ""

    @staticmethod
    def of(actual, expected, atol: float, rtol: float) -> "Errors":
        a, e = np.asarray(actual), np.asarray(expected)
        if a.shape != e.shape:
            return Errors(list(a.shape), float("inf"), float("inf"), float("inf"), float("nan"), False,
                          f"shape {list(a.shape)} differs from the reference's {list(e.shape)}")
        a, e = _as_float(a), _as_float(e)
        if a.size == 0:
            return Errors([], 0.0, 0.0, 0.0, 1.0, True)
        nan_a, nan_e = np.isnan(a), np.isnan(e)
        same_nan = nan_a & nan_e
        diff = np.where(same_nan, 0.0, np.abs(a - e))
        with np.errstate(invalid="ignore", divide="ignore"):
            rel = np.where(same_nan, 0.0, diff / np.maximum(np.abs(e), np.finfo(np.float64).tiny))
            ok = (diff <= atol + rtol * np.abs(e)) | same_nan | (a == e)
        fa, fe = np.nan_to_num(a.ravel()), np.nan_to_num(e.ravel())
        na, ne = float(np.linalg.norm(fa)), float(np.linalg.norm(fe))
        cosine = 1.0 if na == 0 and ne == 0 else float(fa @ fe / (na * ne)) if na and ne else 0.0
        return Errors(list(a.shape), float(np.nanmax(diff)), float(np.nanmax(rel)), float(np.nanmean(diff)), cosine,
                      bool(ok.all()), "" if ok.all() else f"{int((~ok).sum())} of {ok.size} values out of tolerance")


def _as_float(a: np.ndarray) -> np.ndarray:
    return a.astype(np.float64)  # also bool, integers, and bfloat16/float8 (ml_dtypes)


# -- references ------------------------------------------------------------------------
def ort_session(model: onnx.ModelProto | str):
    try:
        import onnxruntime as ort
    except ImportError:
        raise CliError("compare needs ONNX Runtime: pip install onnxruntime", EXIT_FAILURE) from None
    src = model.SerializeToString() if isinstance(model, onnx.ModelProto) else model
    opts = ort.SessionOptions()
    opts.log_severity_level = 3
    try:
        return ort.InferenceSession(src, opts, providers=["CPUExecutionProvider"])
    except Exception as e:
        raise CliError(f"ONNX Runtime cannot load the model: {str(e).splitlines()[0]}", EXIT_FAILURE) from None


def run_ort(model: onnx.ModelProto | str, feeds: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    sess = ort_session(model)
    names = [o.name for o in sess.get_outputs()]
    wanted = {i.name for i in sess.get_inputs()}
    try:
        values = sess.run(names, {k: v for k, v in feeds.items() if k in wanted})
    except Exception as e:
        raise CliError(f"ONNX Runtime failed to run the model: {str(e).splitlines()[0]}", EXIT_FAILURE) from None
    return dict(zip(names, values))


def run_torch(spec: str, feeds: dict[str, np.ndarray], output_names: list[str]) -> dict[str, np.ndarray]:
    """`MODULE:FACTORY`: FACTORY() returns a torch.nn.Module (or callable) that takes the inputs in order."""
    module_name, sep, factory_name = spec.partition(":")
    if not sep or not module_name or not factory_name:
        raise CliError(f"--torch '{spec}' is not MODULE:FACTORY (e.g. mypkg.models:make_model)")
    try:
        factory = getattr(importlib.import_module(module_name), factory_name)
    except (ImportError, AttributeError) as e:
        raise CliError(f"--torch '{spec}': cannot import it ({e})") from None
    model = factory()
    if hasattr(model, "eval"):
        model.eval()
    with torch.no_grad():
        res = model(*(torch.from_numpy(np.ascontiguousarray(a)) for a in feeds.values()))
    res = [res] if isinstance(res, torch.Tensor) else list(res.values()) if isinstance(res, dict) else list(res)
    if len(res) != len(output_names):
        raise CliError(f"--torch '{spec}' returned {len(res)} outputs, the model has {len(output_names)}")
    return {n: t.detach().cpu().float().numpy() if t.dtype == torch.bfloat16 else t.detach().cpu().numpy()
            for n, t in zip(output_names, res)}


# -- every intermediate value ----------------------------------------------------------
def mark_all_outputs(model: onnx.ModelProto) -> onnx.ModelProto:
    """A copy of `model` whose graph also returns every node output (typed where inference knows it)."""
    copy = onnx.ModelProto()
    copy.CopyFrom(model)
    try:
        copy = onnx.shape_inference.infer_shapes(copy)
    except Exception:
        pass  # untyped outputs are fine for ONNX Runtime
    graph = copy.graph
    known = {vi.name: vi for vi in graph.value_info}
    present = {o.name for o in graph.output}
    for node in graph.node:
        for name in node.output:
            if name and name not in present:
                vi = known.get(name) or onnx.helper.make_empty_tensor_value_info(name)
                graph.output.append(vi)
                present.add(name)
    return copy


class _AllValues:
    """A graph seen by `run_graph` as returning every node output (nothing is freed)."""

    def __init__(self, graph):
        self.nodes = graph.nodes
        self.initializers = graph.initializers
        self.outputs = [v for n in graph.nodes for v in n.outputs if v is not None]


def engine_values(engine, feeds: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    """Every value the engine computes on `feeds`, by name, as numpy."""
    from ..ops.interpreter import run_graph
    from ..runtime.engine import _to_numpy
    from ..runtime.feeds import check_feeds

    tensors = {n: t.to(engine.device) for n, t in check_feeds(feeds, engine.inputs).items()}
    with torch.inference_mode():
        if engine.plan.layers:
            shapes = {n: tuple(t.shape) for n, t in tensors.items()}
            executor = engine.executor_for(engine.select_profile(shapes), shapes)
            env = dict(executor.constants)
            env.update(tensors)
            for runner, ins, outs, _free in executor.steps:
                env.update(zip(outs, runner([env[n] for n in ins])))
            values = {n: t for n, t in env.items() if n not in tensors}
        else:
            view = _AllValues(engine.plan.graph)
            values = dict(zip((v.name for v in view.outputs), run_graph(view, tensors)))
    return {n: _to_numpy(t) for n, t in values.items() if isinstance(t, torch.Tensor)}
