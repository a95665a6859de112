"""Whole models exported from PyTorch run on the CPU engine like ONNX Runtime and PyTorch."""

import io
import warnings

import numpy as np
import onnx
import pytest
import torch

import tensorsmith

from .conftest import ort_run


def export(module: torch.nn.Module, args: tuple, names: list[str], dynamic_batch: bool = True,
           opset: int = 17) -> onnx.ModelProto:
    """Export with the TorchScript exporter (the dynamo one needs onnxscript), keeping BatchNorm
    nodes as a training-mode export would, so that tensorsmith's own folding is what is tested."""
    f = io.BytesIO()
    axes = {n: {0: "batch"} for n in names + ["out"]} if dynamic_batch else None
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        torch.onnx.export(module.eval(), args, f, input_names=names, output_names=["out"],
                          dynamic_axes=axes, opset_version=opset, dynamo=False,
                          training=torch.onnx.TrainingMode.PRESERVE)
    return onnx.load_from_string(f.getvalue())


class ResidualBlock(torch.nn.Module):
    """A ResNet basic block: conv-bn-relu-conv-bn + identity, relu; then pool and a classifier."""

    def __init__(self, c: int = 8):
        super().__init__()
        self.stem = torch.nn.Conv2d(3, c, 3, padding=1)
        self.conv1 = torch.nn.Conv2d(c, c, 3, padding=1, bias=False)
        self.bn1 = torch.nn.BatchNorm2d(c)
        self.conv2 = torch.nn.Conv2d(c, c, 3, padding=1, bias=False)
        self.bn2 = torch.nn.BatchNorm2d(c)
        self.fc = torch.nn.Linear(c, 10)

    def forward(self, x):
        x = torch.relu(self.stem(x))
        y = torch.relu(self.bn1(self.conv1(x)))
        y = self.bn2(self.conv2(y))
        y = torch.relu(x + y)
        y = torch.nn.functional.adaptive_avg_pool2d(y, 1).flatten(1)
        return self.fc(y)


def _randomize_bn(m: torch.nn.Module) -> None:
    g = torch.Generator().manual_seed(0)
    for mod in m.modules():
        if isinstance(mod, torch.nn.BatchNorm2d):
            mod.running_mean.copy_(torch.randn(mod.num_features, generator=g) * 0.1)
            mod.running_var.copy_(torch.rand(mod.num_features, generator=g) + 0.5)


def test_resnet_block_matches_onnxruntime_and_torch():
    torch.manual_seed(0)
    model = ResidualBlock()
    _randomize_bn(model)
    x = torch.randn(2, 3, 16, 16)
    proto = export(model, (x,), ["x"])
    engine = tensorsmith.build(proto)
    got = engine.run({"x": x.numpy()})["out"]
    (expected,) = ort_run(proto, {"x": x.numpy()})
    np.testing.assert_allclose(got, expected, rtol=1e-4, atol=1e-5)
    with torch.no_grad():
        np.testing.assert_allclose(got, model(x).numpy(), rtol=1e-4, atol=1e-5)
    # the batch dim stays symbolic: another batch size runs on the same engine
    x5 = torch.randn(5, 3, 16, 16)
    np.testing.assert_allclose(engine.run({"x": x5.numpy()})["out"], ort_run(proto, {"x": x5.numpy()})[0], rtol=1e-4, atol=1e-5)


class TransformerBlock(torch.nn.Module):
    """A pre-norm encoder block written out (as BERT/ViT exports look): attention with a mask, GELU MLP."""

    def __init__(self, d: int = 32, heads: int = 4):
        super().__init__()
        self.heads = heads
        self.ln1, self.ln2 = torch.nn.LayerNorm(d), torch.nn.LayerNorm(d)
        self.qkv = torch.nn.Linear(d, 3 * d)
        self.proj = torch.nn.Linear(d, d)
        self.fc1, self.fc2 = torch.nn.Linear(d, 4 * d), torch.nn.Linear(4 * d, d)

    def forward(self, x, mask):
        b, s, d = x.shape
        q, k, v = self.qkv(self.ln1(x)).split(d, dim=-1)
        q, k, v = (t.reshape(b, s, self.heads, d // self.heads).transpose(1, 2) for t in (q, k, v))
        scores = q @ k.transpose(-1, -2) / (d // self.heads) ** 0.5 + mask
        y = (scores.softmax(-1) @ v).transpose(1, 2).reshape(b, s, d)
        x = x + self.proj(y)
        return x + self.fc2(torch.nn.functional.gelu(self.fc1(self.ln2(x))))


def transformer_block_model(opset: int = 17):
    torch.manual_seed(0)
    block = TransformerBlock()
    x = torch.randn(2, 7, 32)
    mask = torch.zeros(2, 1, 1, 7)
    mask[1, ..., 5:] = -1e4
    return block, (x, mask), export(block, (x, mask), ["x", "mask"], opset=opset)


def test_transformer_block_matches_onnxruntime_and_torch():
    block, (x, mask), proto = transformer_block_model()
    feeds = {"x": x.numpy(), "mask": mask.numpy()}
    got = tensorsmith.build(proto).run(feeds)["out"]
    (expected,) = ort_run(proto, feeds)
    np.testing.assert_allclose(got, expected, rtol=1e-4, atol=1e-5)
    with torch.no_grad():
        np.testing.assert_allclose(got, block(x, mask).numpy(), rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("dtype", [np.float32])
def test_public_one_liner(dtype):
    """What the README promises: import tensorsmith; build; run."""
    from .conftest import make_mlp_model

    x = np.random.default_rng(0).standard_normal((3, 4)).astype(dtype)
    out = tensorsmith.build(make_mlp_model()).run({"x": x})
    np.testing.assert_allclose(out["y"], ort_run(make_mlp_model(), {"x": x})[0], rtol=1e-5, atol=1e-6)


def test_resnet_block_is_folded_and_fused():
    model = ResidualBlock()
    _randomize_bn(model)
    proto = export(model, (torch.randn(2, 3, 16, 16),), ["x"])
    assert [n.op_type for n in proto.graph.node].count("BatchNormalization") == 2
    engine = tensorsmith.build(proto)
    ops = [n.op_type for n in engine.plan.graph.nodes]
    assert "BatchNormalization" not in ops
    kinds = [(l.kind, [n.op_type for n in l.nodes]) for l in engine.layers]
    assert ("convolution", ["Conv", "Add", "Relu"]) in kinds  # conv2 + bn2 + residual add + relu


def test_transformer_block_patterns_are_recognized():
    """At opset 13 the exporter writes LayerNorm and GELU out op by op; the passes rebuild them."""
    block, (x, mask), proto = transformer_block_model(opset=13)
    engine = tensorsmith.build(proto)
    ops = [n.op_type for n in engine.plan.graph.nodes]
    assert ops.count("LayerNormalization") == 2 and ops.count("Gelu") == 1 and ops.count("Attention") == 1
    assert "Softmax" not in ops and "Erf" not in ops
    feeds = {"x": x.numpy(), "mask": mask.numpy()}
    np.testing.assert_allclose(engine.run(feeds)["out"], ort_run(proto, feeds)[0], rtol=1e-4, atol=1e-5)
