"""The timing cache: which tactic and config won for a Layer signature on a GPU, as JSON.

A key holds what decides the winner: the layer's ops with their attributes, the shapes and
dtypes of its inputs, outputs and weights, the GPU (name, compute capability) and the versions
of torch, triton and tensorsmith. A second build of the same (or a similar) model reuses it.
"""

from __future__ import annotations

import hashlib
import json
import os
from dataclasses import dataclass

import torch

from ..errors import TensorsmithError
from ..tactics import LayerContext

CACHE_FORMAT = 1


def _attr_repr(a) -> object:
    if isinstance(a, torch.Tensor):
        return ["tensor", str(a.dtype), list(a.shape), a.flatten().tolist() if a.numel() <= 16 else None]
    if isinstance(a, (list, tuple)):
        return [_attr_repr(x) for x in a]
    if isinstance(a, (int, float, str, bool)) or a is None:
        return a
    return type(a).__name__


def environment_key(device: torch.device) -> dict:
    from .. import __version__

    env = {"tensorsmith": __version__, "torch": torch.__version__}
    try:
        import triton

        env["triton"] = triton.__version__
    except ImportError:
        env["triton"] = None
    if device.type == "cuda":
        props = torch.cuda.get_device_properties(device)
        env.update(gpu=props.name, cc=f"{props.major}.{props.minor}", cuda=torch.version.cuda)
    else:
        env["gpu"] = "cpu"
    return env


def layer_signature(lc: LayerContext) -> str:
    """A stable hash of what a tactic's speed depends on (names of values excluded)."""
    index = {}
    for v in lc.inputs:
        index[v.name] = f"in{len(index)}"
    nodes = []
    for n in lc.nodes:
        args = []
        for v in n.inputs:
            if v is None:
                args.append(None)
            elif v.name in lc.weights:
                w = lc.weights[v.name]
                args.append(["w", str(w.dtype), list(w.shape)])
            else:
                args.append([index.get(v.name, "tmp"), str(v.type.dtype) if v.type else None,
                             list(v.type.shape) if v.type and v.type.shape is not None else None])
        nodes.append([n.op_type, n.domain, sorted((k, _attr_repr(a)) for k, a in n.attrs.items()), args])
    signature = {"nodes": nodes, "dtype": str(lc.dtype),
                 "outputs": [[str(v.type.dtype), list(v.type.shape)] for v in lc.outputs]}
    if lc.strict:  # a strict build may not reuse a choice that approximates (non-strict keys stay as they were)
        signature["strict"] = True
    blob = json.dumps(signature, sort_keys=True)
    return hashlib.sha256(blob.encode()).hexdigest()[:32]


@dataclass
class CacheEntry:
    tactic: str
    config: dict
    ms: float


class TimingCache:
    def __init__(self, path: str | os.PathLike | None = None):
        self.path = os.fspath(path) if path is not None else None
        self.entries: dict[str, CacheEntry] = {}
        self.hits = self.misses = 0
        if self.path and os.path.exists(self.path):
            self._load()

    def _load(self) -> None:
        try:
            with open(self.path) as f:
                data = json.load(f)
            if data.get("format") != CACHE_FORMAT:
                raise ValueError(f"format {data.get('format')}, expected {CACHE_FORMAT}")
            self.entries = {k: CacheEntry(e["tactic"], e["config"], e["ms"]) for k, e in data["entries"].items()}
        except (OSError, ValueError, KeyError, TypeError) as e:
            raise TensorsmithError(
                f"timing cache '{self.path}' cannot be read ({e}); delete it and the next build writes a new one"
            ) from None

    def key(self, lc: LayerContext, layout: str = "") -> str:
        env = environment_key(lc.device)
        return layer_signature(lc) + f"|layout={layout}|" + "|".join(f"{k}={env[k]}" for k in sorted(env))

    def get(self, lc: LayerContext, layout: str = "") -> CacheEntry | None:
        e = self.entries.get(self.key(lc, layout))
        if e is None:
            self.misses += 1
        else:
            self.hits += 1
        return e

    def put(self, lc: LayerContext, entry: CacheEntry, layout: str = "") -> None:
        self.entries[self.key(lc, layout)] = entry

    def save(self) -> None:
        if not self.path:
            return
        tmp = self.path + ".tmp"
        with open(tmp, "w") as f:
            json.dump({"format": CACHE_FORMAT,
                       "entries": {k: e.__dict__ for k, e in sorted(self.entries.items())}}, f, indent=0)
        os.replace(tmp, self.path)
