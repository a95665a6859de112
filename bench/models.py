"""The benchmark models: built with random weights from a fixed seed, exported to ONNX once.

Each model is a `ModelSpec`: how to build the torch module (importing torchvision, timm or
transformers only when asked, so this file imports anywhere), which inputs it takes and the
batches the benchmark runs it at. `export_onnx` writes a model with a symbolic batch dim,
trying the TorchScript exporter and then the dynamo one (or the reverse), and caches the file.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import time
from dataclasses import dataclass, field
from typing import Callable, Sequence

import torch

log = logging.getLogger("bench.models")
SEED = 0
OPSET = 17
EXPORTERS = ("torchscript", "dynamo")


@dataclass(frozen=True)
class InputSpec:
    """One model input: its name, the shape after the batch dim, and how its values are drawn."""

    name: str
    shape: tuple[int, ...]
    kind: str = "float"          # "float": N(0, 1); "tokens": ints in [0, high); "mask": 1s then 0s per row
    high: int = 0

    def make(self, batch: int, gen: torch.Generator) -> torch.Tensor:
        shape = (batch, *self.shape)
        if self.kind == "float":
            return torch.randn(shape, generator=gen)
        if self.kind == "tokens":
            return torch.randint(0, self.high, shape, generator=gen, dtype=torch.int64)
        if self.kind == "mask":
            # Padded batches, as a server sees them: each row keeps between half and all of its tokens.
            seq = shape[-1]
            lengths = torch.randint(seq // 2, seq + 1, (batch,), generator=gen)
            return (torch.arange(seq)[None, :] < lengths[:, None]).to(torch.int64)
        raise ValueError(f"unknown input kind '{self.kind}'")


@dataclass(frozen=True)
class ModelSpec:
    name: str
    family: str                  # "cnn" (channels-last helps it) or "transformer"
    build: Callable[..., torch.nn.Module]   # build(tiny: bool, attn: str | None) -> eval module
    inputs: tuple[InputSpec, ...]
    batches: tuple[int, ...]
    needs: tuple[str, ...]       # packages it is built from, any one of which is enough
    tiny_inputs: tuple[InputSpec, ...] = field(default=())

    def input_specs(self, tiny: bool = False) -> tuple[InputSpec, ...]:
        return self.tiny_inputs if tiny and self.tiny_inputs else self.inputs

    @property
    def input_names(self) -> list[str]:
        return [i.name for i in self.inputs]

    def make_inputs(self, batch: int, seed: int = SEED, tiny: bool = False) -> list[torch.Tensor]:
        """The same inputs every time for one (batch, seed): CPU tensors, float32 or int64."""
        gen = torch.Generator().manual_seed(seed + 1000 * batch)
        return [i.make(batch, gen) for i in self.input_specs(tiny)]

    def available(self) -> bool:
        import importlib.util

        return any(importlib.util.find_spec(p) is not None for p in self.needs)


def build_model(spec: ModelSpec, tiny: bool = False, attn: str | None = None) -> torch.nn.Module:
    """The module in eval mode with float32 weights on the CPU, the same for every call."""
    torch.manual_seed(SEED)
    model = spec.build(tiny=tiny, attn=attn)
    model.eval().requires_grad_(False)
    _randomize_zero_layers(model)
    if spec.family == "cnn":
        _settle_batchnorm(model, spec.make_inputs(4, seed=SEED + 7, tiny=tiny))
    return model


def _randomize_zero_layers(model: torch.nn.Module) -> None:
    """Give Linear layers initialised to zeros random weights (std 0.02, as trained heads have).

    torchvision's ViT starts with a zero classifier head: every output would be 0, for any
    engine, and the accuracy column would compare zeros with zeros.
    """
    with torch.no_grad():
        for m in model.modules():
            if isinstance(m, torch.nn.Linear) and not m.weight.any():
                m.weight.normal_(0.0, 0.02)
                if m.bias is not None and not m.bias.any():
                    m.bias.normal_(0.0, 0.02)


def _settle_batchnorm(model: torch.nn.Module, inputs: Sequence[torch.Tensor]) -> None:
    """Give BatchNorm running statistics from one forward pass on random data.

    Freshly initialised BN layers (mean 0, variance 1) let activations grow block after block,
    which puts fp16 near overflow and makes error numbers meaningless; trained models don't.
    """
    bns = [m for m in model.modules() if isinstance(m, torch.nn.modules.batchnorm._BatchNorm)]
    if not bns:
        return
    for bn in bns:
        bn.reset_running_stats()
        bn.momentum = None       # cumulative average: one pass sets the statistics exactly
        bn.train()
    with torch.no_grad():
        model(*inputs)
    for bn in bns:
        bn.momentum = 0.1
        bn.eval()


# --- model constructors: each imports its package when called --------------------------------

def _vision(tv_name: str, timm_name: str):
    def build(tiny: bool = False, attn: str | None = None) -> torch.nn.Module:
        try:
            import torchvision

            return getattr(torchvision.models, tv_name)(weights=None)
        except ImportError:
            import timm

            return timm.create_model(timm_name, pretrained=False)
    return build


def _vit(tiny: bool = False, attn: str | None = None) -> torch.nn.Module:
    try:
        import torchvision

        if tiny:
            from torchvision.models.vision_transformer import VisionTransformer

            return VisionTransformer(image_size=32, patch_size=16, num_layers=2, num_heads=2,
                                     hidden_dim=32, mlp_dim=64, num_classes=10)
        return torchvision.models.vit_b_16(weights=None)
    except ImportError:
        import timm

        if tiny:
            return timm.create_model("vit_base_patch16_224", pretrained=False, img_size=32, depth=2,
                                     embed_dim=32, num_heads=2, num_classes=10)
        return timm.create_model("vit_base_patch16_224", pretrained=False)


class _Encoder(torch.nn.Module):
    """A transformers encoder as f(input_ids, attention_mask) -> last_hidden_state."""

    def __init__(self, model: torch.nn.Module):
        super().__init__()
        self.model = model

    def forward(self, input_ids, attention_mask):
        return self.model(input_ids=input_ids, attention_mask=attention_mask, return_dict=True).last_hidden_state


class _Decoder(torch.nn.Module):
    """A transformers decoder as f(input_ids) -> last_hidden_state (no KV cache)."""

    def __init__(self, model: torch.nn.Module):
        super().__init__()
        self.model = model

    def forward(self, input_ids):
        return self.model(input_ids=input_ids, use_cache=False, return_dict=True).last_hidden_state


def _attention(cfg, attn: str | None):
    """Ask for an attention implementation ("eager", "sdpa") on the config the model is built from."""
    if attn:
        cfg._attn_implementation = attn
    return cfg


def _bert(tiny: bool = False, attn: str | None = None) -> torch.nn.Module:
    from transformers import BertConfig, BertModel

    cfg = BertConfig(hidden_size=64, num_hidden_layers=2, num_attention_heads=2, intermediate_size=128,
                     vocab_size=1000) if tiny else BertConfig()
    return _Encoder(BertModel(_attention(cfg, attn), add_pooling_layer=False))


def _gpt2(tiny: bool = False, attn: str | None = None) -> torch.nn.Module:
    from transformers import GPT2Config, GPT2Model

    cfg = GPT2Config(n_embd=64, n_layer=2, n_head=2, vocab_size=1000, use_cache=False) if tiny \
        else GPT2Config(use_cache=False)
    return _Decoder(GPT2Model(_attention(cfg, attn)))


_IMAGE = (InputSpec("input", (3, 224, 224)),)
_IMAGE_TINY = (InputSpec("input", (3, 64, 64)),)
VISION = ("torchvision", "timm")

MODELS: dict[str, ModelSpec] = {s.name: s for s in [
    ModelSpec("resnet50", "cnn", _vision("resnet50", "resnet50"), _IMAGE, (1, 32), VISION, _IMAGE_TINY),
    ModelSpec("mobilenetv3", "cnn", _vision("mobilenet_v3_large", "mobilenetv3_large_100"), _IMAGE, (1, 32),
              VISION, _IMAGE_TINY),
    ModelSpec("efficientnet", "cnn", _vision("efficientnet_b0", "efficientnet_b0"), _IMAGE, (1, 32), VISION,
              _IMAGE_TINY),
    ModelSpec("vit", "transformer", _vit, _IMAGE, (1, 32), VISION, (InputSpec("input", (3, 32, 32)),)),
    ModelSpec("bert", "transformer", _bert,
              (InputSpec("input_ids", (128,), "tokens", 30522), InputSpec("attention_mask", (128,), "mask")),
              (1, 16), ("transformers",),
              (InputSpec("input_ids", (16,), "tokens", 1000), InputSpec("attention_mask", (16,), "mask"))),
    ModelSpec("gpt2", "transformer", _gpt2, (InputSpec("input_ids", (512,), "tokens", 50257),),
              (1, 16), ("transformers",), (InputSpec("input_ids", (32,), "tokens", 1000),)),
]}


# --- export ----------------------------------------------------------------------------------

def export_onnx(model: torch.nn.Module, inputs: Sequence[torch.Tensor], input_names: Sequence[str],
                path: str, exporter: str) -> None:
    """Export `model` to `path` as one file (opset 17, symbolic batch dim 'batch', one output 'output')."""
    args = tuple(inputs)
    if exporter == "torchscript":
        axes = {n: {0: "batch"} for n in [*input_names, "output"]}
        torch.onnx.export(model, args, path, input_names=list(input_names), output_names=["output"],
                          dynamic_axes=axes, opset_version=OPSET, dynamo=False, do_constant_folding=True)
    elif exporter == "dynamo":
        batch = torch.export.Dim("batch", min=1, max=4096)
        shapes = tuple({0: batch} for _ in args)
        program = torch.onnx.export(model, args, input_names=list(input_names), output_names=["output"],
                                    dynamic_shapes=shapes, opset_version=max(OPSET, 18), dynamo=True)
        program.save(path, external_data=False)
    else:
        raise ValueError(f"unknown exporter '{exporter}'; choose one of {EXPORTERS}")


def check_onnx(path: str, model: torch.nn.Module, inputs: Sequence[torch.Tensor], tol: float = 1e-2) -> None:
    """Run the file in ONNX Runtime at another batch than the export's and compare with torch.

    A traced export can bake the example's batch into a shape computation and still write a
    file; this catches that (and any other wrong graph) before the benchmark relies on it.
    """
    try:
        import onnxruntime as ort
    except ImportError:
        return
    sess = ort.InferenceSession(path, providers=["CPUExecutionProvider"])
    names = [i.name for i in sess.get_inputs()]
    got = sess.run(None, {n: t.numpy() for n, t in zip(names, inputs)})[0]
    with torch.no_grad():
        want = model(*inputs)
    got = torch.from_numpy(got)
    if got.shape != want.shape:
        raise ValueError(f"ONNX Runtime gives shape {list(got.shape)} at batch {inputs[0].shape[0]}, "
                         f"torch {list(want.shape)}: the export fixed a dim")
    err = (got - want).abs().max().item() / max(want.abs().max().item(), 1e-6)
    if not err <= tol:
        raise ValueError(f"ONNX Runtime and torch differ by {err:.2e} (relative) at batch {inputs[0].shape[0]}")


def export_order(preferred: str) -> list[str]:
    """'auto' tries TorchScript first (mature, needs no onnxscript), then dynamo."""
    if preferred == "auto":
        return list(EXPORTERS)
    if preferred not in EXPORTERS:
        raise ValueError(f"unknown exporter '{preferred}'; choose auto or one of {EXPORTERS}")
    return [preferred, *[e for e in EXPORTERS if e != preferred]]


def _versions() -> dict:
    import importlib.metadata as md

    out = {"torch": torch.__version__}
    for pkg in ("torchvision", "timm", "transformers"):
        try:
            out[pkg] = md.version(pkg)
        except md.PackageNotFoundError:
            out[pkg] = None
    return out


def cached_onnx(spec: ModelSpec, cache_dir: str, model: torch.nn.Module | None = None,
                exporter: str = "auto", tiny: bool = False) -> dict:
    """The ONNX file of `spec` in `cache_dir`, exported on first use; returns its record.

    The record says which exporter (and attention implementation) produced it and how long
    export took. The file name holds a hash of the package versions, so that new weights
    initialisation code never meets a stale file.
    """
    os.makedirs(cache_dir, exist_ok=True)
    # "init" counts changes to build_model's weights: a new value re-exports every model.
    key = json.dumps({"v": _versions(), "opset": OPSET, "seed": SEED, "tiny": tiny, "init": 2}, sort_keys=True)
    stem = f"{spec.name}{'-tiny' if tiny else ''}-{hashlib.sha1(key.encode()).hexdigest()[:10]}"
    path = os.path.join(cache_dir, stem + ".onnx")
    meta_path = path + ".json"
    if os.path.exists(path) and os.path.exists(meta_path):
        with open(meta_path) as f:
            return json.load(f)
    inputs = spec.make_inputs(2, tiny=tiny)    # batch 2: an exporter may specialise a dim of size 1
    errors = []
    # Transformers models: if the default attention does not export, the eager one (same weights) may.
    attns = [None, "eager"] if spec.family == "transformer" and "transformers" in spec.needs else [None]
    for attn in attns:
        m = model if (attn is None and model is not None) else build_model(spec, tiny=tiny, attn=attn)
        for exp in export_order(exporter):
            t0 = time.perf_counter()
            try:
                export_onnx(m, inputs, [i.name for i in spec.input_specs(tiny)], path + ".tmp", exp)
                check_onnx(path + ".tmp", m, spec.make_inputs(1, tiny=tiny))
                os.replace(path + ".tmp", path)
            except Exception as e:     # noqa: BLE001 - any exporter failure means: try the next way
                if os.path.exists(path + ".tmp"):
                    os.remove(path + ".tmp")
                errors.append(f"{exp}{'/' + attn if attn else ''}: {type(e).__name__}: {str(e)[:300]}")
                log.warning("export of %s with %s failed: %s", spec.name, exp, errors[-1])
                continue
            record = {"model": spec.name, "path": path, "exporter": exp, "attention": attn or "default",
                      "export_s": round(time.perf_counter() - t0, 2), "versions": _versions()}
            with open(meta_path, "w") as f:
                json.dump(record, f, indent=1)
            return record
    raise RuntimeError(f"could not export {spec.name} to ONNX: " + " | ".join(errors))
