"""The engine file (`.tsmith`): a fixed header, a JSON manifest, and the weights as safetensors.

    offset 0   8 bytes   magic b"TSMITH\\r\\n" (the CR LF catches text-mode transfers)
           8   u32 LE    format version
          12   u64 LE    manifest length in bytes
          20   u64 LE    weights length in bytes
          28   32 bytes  SHA-256 of manifest + weights
          60   manifest (UTF-8 JSON), then weights (safetensors)

Nothing in the file is executable: the manifest is data (the optimized graph, the I/O, the
profiles, each Layer's tactic name and JSON config), the weights are raw tensors. Loading
never unpickles; runners are compiled again from the installed tactics. Every way a file can
be wrong surfaces as a subclass of `EngineFormatError` that says what to do.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import logging
import struct
from dataclasses import dataclass, field
from typing import Any

import torch

from ..errors import EngineCorruptError, EngineFormatError, EngineTargetError, EngineVersionError
from ..ir import Graph
from .graph_codec import decode_type, encode_type, graph_from_data, graph_to_data
from .plan import IOTensor, LayerPlan, Plan
from .profile import OptimizationProfile

MAGIC = b"TSMITH\r\n"
FORMAT_VERSION = 1
_HEADER = struct.Struct("<8sIQQ32s")
HEADER_SIZE = _HEADER.size
log = logging.getLogger("tensorsmith.engine")

REBUILD = "rebuild the engine from the model with this tensorsmith (tensorsmith.build or `tensorsmith build`)"


@dataclass
class EngineData:
    """Everything an engine file holds, decoded (what the runtime builds an Engine from)."""

    plan: Plan
    profiles: list[OptimizationProfile] = field(default_factory=list)
    profile_layers: list[list[LayerPlan]] = field(default_factory=list)  # tuned plan per profile (GPU)
    refittable: dict[str, dict] | None = None  # original weight name -> {"dtype", "shape"}
    manifest: dict = field(default_factory=dict)  # the manifest as read, for inspection


# -- writing ---------------------------------------------------------------------------
def environment() -> dict:
    """Versions of what built the engine (recorded, and compared with a warning on load)."""
    from importlib import metadata

    from .. import __version__

    try:
        triton = metadata.version("triton")
    except metadata.PackageNotFoundError:
        triton = None
    return {"tensorsmith": __version__, "torch": torch.__version__, "triton": triton, "cuda": torch.version.cuda}


def target_of(plan: Plan) -> dict:
    if plan.target != "cuda":
        return {"kind": plan.target}
    props = torch.cuda.get_device_properties(torch.cuda.current_device())
    return {"kind": "cuda", "gpu": props.name, "capability": [props.major, props.minor]}


def _layer_data(lp: LayerPlan) -> dict:
    return {"name": lp.name, "tactic": lp.tactic, "config": lp.config, "inputs": list(lp.inputs),
            "outputs": list(lp.outputs), "ms": lp.ms}


def _memory_data(memory: Any) -> dict | None:
    if memory is None:
        return None
    if dataclasses.is_dataclass(memory):
        memory = dataclasses.asdict(memory)
    json.dumps(memory)  # must be plain data
    return memory


def dump_engine(data: EngineData) -> bytes:
    """The bytes of an engine file for `data`."""
    plan = data.plan
    tensors: dict[str, torch.Tensor] = {}
    manifest = {
        "format_version": FORMAT_VERSION,
        "producer": environment(),
        "target": target_of(plan),
        "precision": plan.precision,
        "strict": plan.strict,
        "layer_precisions": dict(plan.layer_precisions),
        "inputs": [{"name": s.name, "type": encode_type(s.type)} for s in plan.inputs],
        "outputs": [{"name": s.name, "type": encode_type(s.type)} for s in plan.outputs],
        "profiles": [p.to_data() for p in data.profiles],
        "layers": [_layer_data(lp) for lp in plan.layers],
        "profile_layers": [[_layer_data(lp) for lp in lps] for lps in data.profile_layers],
        "memory": _memory_data(getattr(plan, "memory", None) or None),
        "refittable": data.refittable,
        "graph": graph_to_data(plan.graph, tensors),
    }
    from safetensors.torch import save

    body = json.dumps(manifest, separators=(",", ":")).encode("utf-8")
    weights = save(tensors, metadata={"format": "pt"})
    h = hashlib.sha256(body)
    h.update(weights)
    digest = h.digest()
    return _HEADER.pack(MAGIC, FORMAT_VERSION, len(body), len(weights), digest) + body + weights


# -- reading ---------------------------------------------------------------------------
def read_header(blob: bytes, where: str) -> tuple[int, int, int, bytes]:
    if len(blob) < len(MAGIC) or blob[: len(MAGIC)] != MAGIC:
        raise EngineFormatError(where, "not a tensorsmith engine file (no TSMITH header)",
                                "pass a file written by Engine.save(); to build from an ONNX model use tensorsmith.build")
    if len(blob) < HEADER_SIZE:
        raise EngineCorruptError(where, f"truncated: {len(blob)} bytes, shorter than the {HEADER_SIZE}-byte header",
                                 "copy the file again, or " + REBUILD)
    _, version, n_manifest, n_weights, digest = _HEADER.unpack_from(blob)
    if version != FORMAT_VERSION:
        raise EngineVersionError(where, f"engine format version {version}, this tensorsmith reads version {FORMAT_VERSION}",
                                 REBUILD + " (engines are not portable across format versions)")
    expected = HEADER_SIZE + n_manifest + n_weights
    if len(blob) != expected:
        what = "truncated" if len(blob) < expected else "has trailing bytes"
        raise EngineCorruptError(where, f"{what}: {len(blob)} bytes, the header promises {expected}",
                                 "copy the file again, or " + REBUILD)
    return version, n_manifest, n_weights, digest


def load_engine(blob: bytes, where: str = "<bytes>", check_target: bool = True) -> EngineData:
    """Decode an engine file. Raises an `EngineFormatError` subclass for anything wrong with it."""
    if not isinstance(blob, bytes):
        blob = bytes(blob)
    _, n_manifest, n_weights, digest = read_header(blob, where)
    view = memoryview(blob)
    body = bytes(view[HEADER_SIZE: HEADER_SIZE + n_manifest])
    weights = view[HEADER_SIZE + n_manifest:]  # no copy: safetensors reads from the view
    h = hashlib.sha256(body)
    h.update(weights)
    if h.digest() != digest:
        raise EngineCorruptError(where, "the body does not match its checksum (the file is corrupt)",
                                 "copy the file again, or " + REBUILD)
    try:
        manifest = json.loads(body.decode("utf-8"))
        if not isinstance(manifest, dict):
            raise ValueError("the manifest is not a JSON object")
    except (UnicodeDecodeError, ValueError) as e:
        raise EngineCorruptError(where, f"the manifest is not valid JSON ({e})", REBUILD) from None
    if manifest.get("format_version") != FORMAT_VERSION:
        raise EngineVersionError(where, f"the manifest says format version {manifest.get('format_version')!r}, "
                                        f"this tensorsmith reads {FORMAT_VERSION}", REBUILD)
    if check_target:
        check_engine_target(manifest, where)
    _warn_on_other_versions(manifest, where)
    try:
        from safetensors.torch import load

        tensors = load(bytes(weights))
    except Exception as e:
        raise EngineCorruptError(where, f"the weights do not decode as safetensors ({type(e).__name__}: {e})",
                                 REBUILD) from None
    try:
        return _decode(manifest, tensors)
    except EngineFormatError:
        raise
    except Exception as e:  # any malformed field: name it, never a bare traceback
        raise EngineCorruptError(where, f"the manifest is malformed ({type(e).__name__}: {e})", REBUILD) from None


def _decode(manifest: dict, tensors: dict[str, torch.Tensor]) -> EngineData:
    from ..ir import verify
    from ..ops import lookup

    graph: Graph = graph_from_data(manifest["graph"], tensors)
    verify(graph, lambda n: lookup(n.op_type, n.domain, n.opset, n.name))  # structure, and every op known
    kind = manifest["target"]["kind"]
    if kind not in ("cpu", "cuda"):
        raise ValueError(f"unknown target kind {kind!r}")
    inputs = [IOTensor(str(d["name"]), decode_type(d["type"])) for d in manifest["inputs"]]
    outputs = [IOTensor(str(d["name"]), decode_type(d["type"])) for d in manifest["outputs"]]
    if [s.name for s in inputs] != [v.name for v in graph.inputs] or \
            [s.name for s in outputs] != [v.name for v in graph.outputs]:
        raise ValueError("the I/O tensors do not match the graph's inputs and outputs")
    plan = Plan(graph, kind, inputs, outputs, [_layer_plan(d) for d in manifest["layers"]],
                precision=str(manifest["precision"]), **_precision_settings(manifest))
    profiles = [OptimizationProfile.from_data(p, inputs, i) for i, p in enumerate(manifest["profiles"])]
    profile_layers = [[_layer_plan(d) for d in lps] for lps in manifest["profile_layers"]]
    refittable = manifest.get("refittable")
    if refittable is not None and not isinstance(refittable, dict):
        raise ValueError("'refittable' is not an object")
    memory = manifest.get("memory")
    if memory is not None and not isinstance(memory, dict):
        raise ValueError("'memory' is not an object")
    plan.memory = memory or {}
    return EngineData(plan, profiles, profile_layers, refittable, manifest)


def _precision_settings(manifest: dict) -> dict:
    """strict and layer_precisions; files written before they were recorded are non-strict, with no overrides."""
    strict = manifest.get("strict", False)
    if not isinstance(strict, bool):
        raise ValueError("'strict' is not true or false")
    overrides = manifest.get("layer_precisions") or {}
    if not isinstance(overrides, dict) or not all(isinstance(k, str) and isinstance(v, str)
                                                  for k, v in overrides.items()):
        raise ValueError("'layer_precisions' is not an object of pattern: precision")
    return {"strict": strict, "layer_precisions": overrides}


def _layer_plan(d: dict) -> LayerPlan:
    config = d["config"]
    if not isinstance(config, dict):
        raise ValueError(f"layer '{d['name']}' config is not an object")
    ms = d.get("ms")
    return LayerPlan(str(d["name"]), str(d["tactic"]), config, [str(n) for n in d["inputs"]],
                     [str(n) for n in d["outputs"]], float(ms) if ms is not None else None)


def check_engine_target(manifest: dict, where: str) -> None:
    """An engine built for a GPU runs only on a GPU of the same compute capability."""
    target = manifest.get("target")
    if not isinstance(target, dict) or target.get("kind") not in ("cpu", "cuda"):
        raise EngineCorruptError(where, f"the manifest's target {target!r} is not 'cpu' or 'cuda'", REBUILD)
    if target["kind"] != "cuda":
        return
    built = f"{target.get('gpu')} (compute capability {_cc(target.get('capability'))})"
    if not torch.cuda.is_available():
        raise EngineTargetError(where, f"built for the GPU {built}, and this machine has no CUDA GPU",
                                "load it on such a GPU, or rebuild with target='cpu' here")
    props = torch.cuda.get_device_properties(torch.cuda.current_device())
    here = [props.major, props.minor]
    if list(target.get("capability") or []) != here:
        raise EngineTargetError(where, f"built for {built}, this GPU is {props.name} (compute capability {_cc(here)})",
                                "rebuild the engine on this GPU (kernels are tuned and compiled per architecture)")
    if target.get("gpu") != props.name:
        log.warning("engine '%s' was built on %s, running on %s (same architecture); timings may differ",
                    where, target.get("gpu"), props.name)


def _cc(cap: Any) -> str:
    return ".".join(str(c) for c in cap) if isinstance(cap, list) else "?"


def _warn_on_other_versions(manifest: dict, where: str) -> None:
    built = manifest.get("producer") if isinstance(manifest.get("producer"), dict) else {}
    target = manifest.get("target")
    on_gpu = isinstance(target, dict) and target.get("kind") == "cuda"
    here = environment()
    for k in ("tensorsmith", "torch", "triton", "cuda"):
        if built.get(k) != here[k] and (on_gpu or k == "tensorsmith"):
            log.warning("engine '%s' was built with %s %s, this is %s; kernels are recompiled, results may differ "
                        "slightly; rebuild to re-tune", where, k, built.get(k), here[k])
