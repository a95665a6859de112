"""build(): model in, Engine out. The stages of DESIGN.md, in order."""

from __future__ import annotations

import logging
import time
from typing import Any, Iterable, Mapping

import torch

from .engine import LayerPlan, Plan
from .engine.weights import place_weights
from .errors import PrecisionError, TensorsmithError
from .frontends import import_onnx
from .ir import DType, Graph, TensorType, verify
from .ops.inference import infer_graph
from .passes import DEFAULT_OPT_LEVEL, check_pass_options, group_layers, run_passes
from .passes.precision import convert_precision, parse_layer_precisions
from .engine.profile import parse_profiles
from .runtime import Engine
from .runtime.refit import weight_record
from .runtime.specialize import shape_key, specialize_graph

TARGETS = ("cpu", "cuda")
PRECISIONS = {"fp32": None, "tf32": None, "fp16": DType.FLOAT16, "bf16": DType.BFLOAT16}
log = logging.getLogger("tensorsmith.build")
# Passes that replace weights by new ones computed from them: off when building refittable.
REFIT_UNSAFE_PASSES = ("batchnorm_folding", "scale_shift_folding", "residual_bias_merging")


def build(
    model: Any,
    target: str = "cpu",
    opt_level: int = DEFAULT_OPT_LEVEL,
    disable_passes: Iterable[str] = (),
    precision: str = "fp32",
    input_shapes: Mapping[str, Iterable[int]] | None = None,
    timing_cache: Any = None,
    workspace: int | None = None,
    tune: bool = True,
    cuda_graphs: bool = True,
    profiles: Iterable[Mapping[str, Any]] | None = None,
    refittable: bool = False,
    layer_precisions: Mapping[str, str] | None = None,
    strict: bool = False,
) -> Engine:
    """Build an Engine from an ONNX path, bytes, onnx.ModelProto or an IR Graph.

    - `target`: "cpu" runs the graph op by op on PyTorch; "cuda" tunes a tactic per Layer on
      the current GPU and runs the plan (replayed as a CUDA graph unless `cuda_graphs=False`).
    - `opt_level` (0..5) selects the graph passes (0 changes nothing numerically); any pass can
      be switched off by name with `disable_passes` (see `tensorsmith.passes.describe_passes()`).
    - `precision`: "fp32", "tf32" (float32 with TF32 matrix math), "fp16" or "bf16" (GPU).
    - `layer_precisions`: per-Layer overrides, {glob pattern: "fp32" | "fp16" | "bf16"}, e.g.
      {"*LayerNorm*": "fp32"} in an fp16 build. A pattern (fnmatch, case-sensitive) matches a node
      by its name or by a model node name it absorbed; the last matching pattern wins. Casts are
      inserted where values cross precisions (see tensorsmith.passes.precision).
    - `strict`: tactics compute exactly the Layer's ops at its precision (no approximations such
      as a tanh GELU for an erf GELU), and a `layer_precisions` pattern that matches no node is an
      error rather than a warning.
    - `input_shapes`: concrete shapes for inputs with symbolic dims (the GPU target tunes at
      concrete shapes), e.g. {"x": (32, 3, 224, 224)}.
    - `timing_cache`: a path (or TimingCache) whose entries skip tuning for Layers seen before.
    - `workspace`: the most scratch memory in bytes a tactic may use.
    - `profiles`: optimization profiles, e.g. [{"x": {"min": (1, 3, 224, 224), "opt": (8, 3, 224, 224),
      "max": (32, 3, 224, 224)}}]; the graph keeps its symbolic dims, the GPU target tunes each
      profile at `opt`, and contexts run any shape in range (see tensorsmith.engine.profile).
    - `refittable`: keep the passes that fold weights into other weights (batchnorm_folding,
      scale_shift_folding) off, so that `engine.refit` can replace them by name.
    - `model` may also be a `tensorsmith.Network`.
    """
    if target not in TARGETS:
        raise TensorsmithError(f"unknown target '{target}'; choose one of {list(TARGETS)}")
    if precision not in PRECISIONS:
        raise PrecisionError(f"unknown precision '{precision}'; choose one of {list(PRECISIONS)}")
    if target == "cpu" and precision != "fp32":
        raise PrecisionError(f"precision '{precision}' needs target='cuda'; the CPU target runs fp32")
    layer_precisions = dict(layer_precisions or {})
    for pattern, dtype in parse_layer_precisions(layer_precisions).items():
        if target == "cpu" and dtype is not DType.FLOAT32:
            raise PrecisionError(f"layer_precisions['{pattern}'] = '{layer_precisions[pattern]}' needs target='cuda'; "
                                 "the CPU target runs fp32 (drop the override, or build for cuda)")
    if target == "cuda" and not torch.cuda.is_available():
        raise TensorsmithError("target 'cuda' needs a CUDA GPU and a CUDA build of torch; use target='cpu'")
    disable_passes = list(disable_passes)
    if refittable:
        disable_passes += [p for p in REFIT_UNSAFE_PASSES if p not in disable_passes]
    check_pass_options(opt_level, disable_passes)
    t0 = time.perf_counter()
    if hasattr(model, "to_graph"):  # a tensorsmith.Network
        model = model.to_graph()
    graph = model if isinstance(model, Graph) else import_onnx(model)
    verify(graph)
    if input_shapes:
        specialize_shapes(graph, input_shapes)
    profiles = parse_profiles(profiles, Plan.from_graph(graph, target).inputs)
    originals = dict(graph.initializers)
    nodes_before = len(graph.nodes)
    for run in run_passes(graph, opt_level, disable_passes):
        log.debug("pass %-34s %3d changes %7.1f ms", run.name, run.changes, run.seconds * 1e3)
    weights = weight_record(graph, originals)
    half = PRECISIONS[precision]
    if half is not None or layer_precisions:
        copies = convert_precision(graph, half or DType.FLOAT32, layer_precisions, strict)
        _not_refittable(weights, copies)
        graph.layers = None
    if graph.layers is None:
        group_layers(graph, fuse=opt_level >= 3 and "layer_fusion" not in disable_passes)
    verify(graph)
    log.info("optimized %d nodes into %d nodes in %d layers", nodes_before, len(graph.nodes), len(graph.layers))
    plan = Plan.from_graph(graph, target, precision, strict, layer_precisions)
    if target == "cpu":
        return Engine(plan, profiles=profiles, refittable=weights)
    from .tuner import TimingCache

    cache = timing_cache if isinstance(timing_cache, TimingCache) or timing_cache is None else TimingCache(timing_cache)
    tuned_graph, profile_layers, prebuilt = graph, None, None
    with _matmul_precision(precision):
        if profiles:
            tuned_graph, profile_layers, prebuilt = _plan_profiles(graph, plan, profiles, precision, cache, workspace, tune)
            plan.layers, runners = profile_layers[0], None
        else:
            plan.layers, runners = plan_layers(graph, torch.device("cuda"), precision, cache, workspace, tune,
                                               strict=strict)
    if cache is not None:
        cache.save()
    from .engine.memory import plan_memory
    from .tactics.base import output_binding

    # profile 0's runners (the first tuned): the values they write into the context's arena
    tuned_runners = runners if runners is not None else next(iter(prebuilt.values()))
    written = {n for lp, r in zip(plan.layers, tuned_runners) for n, w in zip(lp.outputs, output_binding(r)) if w}
    plan.memory = plan_memory(tuned_graph, plan.layers, written).summary()
    log.info("activations: %.1f MiB arena (%.1f MiB without reuse), %.1f MiB bound in %.1f MiB; weights %.1f MiB",
             plan.memory["activation_arena_bytes"] / 2**20, plan.memory["activation_naive_bytes"] / 2**20,
             plan.memory["arena_bound_bytes"] / 2**20, plan.memory["device_arena_bytes"] / 2**20,
             plan.memory["weight_bytes"] / 2**20)
    log.info("built in %.1f s", time.perf_counter() - t0)
    return Engine(plan, runners=runners, cuda_graphs=cuda_graphs, profiles=profiles, profile_layers=profile_layers,
                  refittable=weights, prebuilt=prebuilt)


def _plan_profiles(graph: Graph, plan: Plan, profiles, precision: str, cache, workspace, tune,
                   device: torch.device = torch.device("cuda"), allowed: set[str] | None = None):
    """Tune each profile's Layers at its `opt` shapes, on a copy of the graph specialized to them.

    The graph keeps its symbolic dims; other shapes in range recompile the same tactics and configs
    at run time (runtime/specialize.py). Returns (profile 0's graph, LayerPlans per profile, runners)."""
    profile_layers, prebuilt, first = [], {}, None
    for i, p in enumerate(profiles):
        shapes = p.opt_shapes(plan.inputs)
        g = specialize_graph(graph, shapes)
        log.info("profile %d: tuning at %s", i, shapes)
        layers, runners = plan_layers(g, device, precision, cache, workspace, tune, allowed, plan.strict)
        profile_layers.append(layers)
        prebuilt[(i, shape_key(shapes))] = runners
        first = first or g
    for layer, lp in zip(graph.layers, profile_layers[0]):
        layer.attrs.update(tactic=lp.tactic, config=lp.config)
    return first, profile_layers, prebuilt


def _not_refittable(record: dict, copies: dict[str, list[str]]) -> None:
    """A weight stored in two precisions cannot be refit: the refitter replaces one tensor by name."""
    for name in copies:
        if record["weights"].pop(name, None) is not None:
            record["folded"] = sorted({*record["folded"], name})


class _matmul_precision:
    """TF32 for float32 matrix math only when asked for (precision='tf32'), as TensorRT's --tf32."""

    def __init__(self, precision: str):
        self.allow = precision == "tf32"

    def __enter__(self):
        self.saved = (torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32)
        torch.backends.cuda.matmul.allow_tf32 = torch.backends.cudnn.allow_tf32 = self.allow

    def __exit__(self, *exc):
        torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32 = self.saved


def specialize_shapes(graph: Graph, input_shapes: Mapping[str, Iterable[int]]) -> None:
    """Give inputs concrete shapes (symbols bound consistently) and infer every value again."""
    by_name = {v.name: v for v in graph.inputs}
    for name, shape in input_shapes.items():
        if name not in by_name:
            raise TensorsmithError(f"input_shapes names '{name}', which is not an input; inputs: {sorted(by_name)}")
        v = by_name[name]
        shape = tuple(int(d) for d in shape)
        declared = v.type.shape if v.type is not None else None
        if declared is not None and len(declared) != len(shape):
            raise TensorsmithError(f"input_shapes['{name}'] has rank {len(shape)}, the input is {v.type}")
        for d, n in zip(declared or (), shape):
            if isinstance(d, int) and d != n:
                raise TensorsmithError(f"input_shapes['{name}'] = {list(shape)} conflicts with the model's {v.type}")
        v.type = TensorType(v.type.dtype if v.type else None, shape)
    for n in graph.nodes:
        for v in n.outputs:
            v.type = None
    infer_graph(graph)


def plan_layers(graph: Graph, device: torch.device, precision: str = "fp32", cache=None,
                workspace: int | None = None, tune: bool = True, allowed: set[str] | None = None,
                strict: bool = False):
    """Choose a tactic for each Layer of a grouped graph; returns (LayerPlans, runners).

    Each Layer is tuned at its own precision (tactics.base.layer_dtype: a half build holds float32
    Layers where overrides keep them so); `strict` keeps approximate tactics out."""
    from .tactics import LayerContext
    from .tactics.base import activation_layout_for, layer_dtype
    from .tuner import choose_tactic

    half = PRECISIONS[precision]
    dtype = half.torch if half is not None else torch.float32
    weights = place_weights(graph, device)
    plans, runners = [], []
    formats: dict[str, str] = {}  # the layout each activation will have at run time
    layout = activation_layout_for(graph, dtype)
    n = len(graph.layers)
    t0 = time.perf_counter()
    for i, layer in enumerate(graph.layers):
        layer_weights = {v.name: weights[v.name] for v in layer.weights(graph)}
        lc = LayerContext(layer, graph, layer_weights, device, layer_dtype(layer, graph, dtype),
                          activation_layout=layout, strict=strict)
        choice = choose_tactic(lc, cache=cache, workspace_limit=workspace, allowed=allowed, tune=tune,
                               input_formats=[formats.get(v.name, "contiguous") for v in lc.inputs])
        formats.update((v.name, f) for v, f in zip(lc.outputs, choice.output_formats))
        log.info("[%d/%d %5.1fs] %s: %s%s", i + 1, n, time.perf_counter() - t0, layer.name, choice.tactic,
                 " (cached)" if choice.cached else "")
        layer.attrs.update(tactic=choice.tactic, config=choice.config)
        plans.append(LayerPlan(layer.name, choice.tactic, choice.config, [v.name for v in lc.inputs],
                               [v.name for v in lc.outputs], choice.ms))
        runners.append(choice.runner)
    return plans, runners
