"""Model specs and ONNX export (tiny models; the real ones need torchvision/timm/transformers)."""

import onnx
import onnxruntime as ort
import pytest
import torch

from bench.models import MODELS, InputSpec, ModelSpec, build_model, cached_onnx, check_onnx, export_onnx, export_order


class TinyNet(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.conv = torch.nn.Conv2d(3, 4, 3, padding=1)
        self.bn = torch.nn.BatchNorm2d(4)
        self.fc = torch.nn.Linear(4, 5)

    def forward(self, x):
        return self.fc(torch.relu(self.bn(self.conv(x))).mean((2, 3)))


TINY = ModelSpec("tinynet", "cnn", lambda tiny=False, attn=None: TinyNet(), (InputSpec("input", (3, 16, 16)),),
                 (1, 4), ("torch",))


def test_inputs_are_the_same_for_one_batch_and_seed():
    a, b = TINY.make_inputs(2), TINY.make_inputs(2)
    assert torch.equal(a[0], b[0]) and a[0].shape == (2, 3, 16, 16)
    assert not torch.equal(TINY.make_inputs(2, seed=1)[0], a[0])


def test_token_and_mask_inputs():
    gen = torch.Generator().manual_seed(0)
    ids = InputSpec("input_ids", (128,), "tokens", 30522).make(4, gen)
    mask = InputSpec("attention_mask", (128,), "mask").make(4, gen)
    assert ids.dtype == mask.dtype == torch.int64 and 0 <= ids.min() and ids.max() < 30522
    lengths = mask.sum(1)
    assert ((lengths >= 64) & (lengths <= 128)).all()
    assert torch.equal(mask, (torch.arange(128)[None] < lengths[:, None]).long())   # ones, then padding


def test_build_is_deterministic_and_settles_batchnorm():
    a, b = build_model(TINY), build_model(TINY)
    assert all(torch.equal(p, q) for p, q in zip(a.state_dict().values(), b.state_dict().values()))
    assert not a.training and not any(p.requires_grad for p in a.parameters())
    assert a.bn.running_var.ne(1).any()        # statistics come from data, not the init


def test_a_zero_initialised_head_gets_random_weights():
    class ZeroHead(TinyNet):  # as torchvision's ViT: its classifier starts at zero
        def __init__(self):
            super().__init__()
            torch.nn.init.zeros_(self.fc.weight)
            torch.nn.init.zeros_(self.fc.bias)

    spec = ModelSpec("zerohead", "cnn", lambda tiny=False, attn=None: ZeroHead(), TINY.inputs, (1,), ("torch",))
    model = build_model(spec)
    assert model.fc.weight.any() and model.fc.bias.any()
    assert model(*spec.make_inputs(2)).abs().max() > 0
    assert torch.equal(model.conv.weight, build_model(TINY).conv.weight)  # other layers keep their init


def test_torchscript_export_has_a_symbolic_batch(tmp_path):
    model = build_model(TINY)
    path = str(tmp_path / "tiny.onnx")
    export_onnx(model, TINY.make_inputs(2), ["input"], path, "torchscript")
    m = onnx.load(path)
    assert m.graph.input[0].type.tensor_type.shape.dim[0].dim_param == "batch"
    sess = ort.InferenceSession(path, providers=["CPUExecutionProvider"])
    for batch in (1, 3):
        x = TINY.make_inputs(batch)[0]
        got = sess.run(None, {"input": x.numpy()})[0]
        torch.testing.assert_close(torch.from_numpy(got), model(x), rtol=1e-4, atol=1e-5)
    check_onnx(path, model, TINY.make_inputs(5))


def test_check_catches_a_batch_baked_into_the_graph(tmp_path):
    class Baked(torch.nn.Module):
        def forward(self, x):
            return x.reshape(2, -1)       # a traced export keeps the example's batch of 2
    path = str(tmp_path / "baked.onnx")
    export_onnx(Baked(), [torch.randn(2, 3)], ["input"], path, "torchscript")
    with pytest.raises(Exception):
        check_onnx(path, Baked(), [torch.randn(1, 3)])


def test_cached_export_falls_back_and_is_reused(tmp_path, monkeypatch):
    calls = []
    import bench.models as models

    real = models.export_onnx

    def export(model, inputs, names, path, exporter):
        calls.append(exporter)
        if exporter == "dynamo":
            raise RuntimeError("dynamo exporter unavailable here")
        return real(model, inputs, names, path, exporter)
    monkeypatch.setattr(models, "export_onnx", export)
    record = cached_onnx(TINY, str(tmp_path), exporter="dynamo")
    assert calls == ["dynamo", "torchscript"] and record["exporter"] == "torchscript"
    assert onnx.load(record["path"]).graph.input[0].name == "input"
    assert cached_onnx(TINY, str(tmp_path), exporter="dynamo") == record and len(calls) == 2


def test_export_order():
    assert export_order("auto") == ["torchscript", "dynamo"]
    assert export_order("dynamo") == ["dynamo", "torchscript"]
    with pytest.raises(ValueError):
        export_order("tensorrt")


def test_the_benchmark_models_and_their_batches():
    assert set(MODELS) == {"resnet50", "mobilenetv3", "efficientnet", "vit", "bert", "gpt2"}
    assert MODELS["bert"].input_names == ["input_ids", "attention_mask"] and MODELS["bert"].batches == (1, 16)
    assert MODELS["gpt2"].inputs[0].shape == (512,) and MODELS["resnet50"].batches == (1, 32)


@pytest.mark.parametrize("name", sorted(MODELS))
def test_tiny_versions_export_and_match_torch(name, tmp_path):
    spec = MODELS[name]
    if not spec.available():
        pytest.skip(f"needs one of {spec.needs}")
    if name in ("resnet50", "efficientnet", "mobilenetv3"):
        pytest.importorskip("torchvision")
    record = cached_onnx(spec, str(tmp_path), tiny=True)   # check_onnx has compared it with torch
    assert onnx.load(record["path"]).graph.input[0].type.tensor_type.shape.dim[0].dim_param
