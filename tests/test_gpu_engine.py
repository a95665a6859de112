"""The GPU target end to end (runs on the device machine; skipped without a GPU)."""

import numpy as np
import pytest
import torch

import tensorsmith

from .conftest import make_mlp_model, ort_run
from .engine.test_report import conv_bn_relu_model
from .test_end_to_end import ResidualBlock, _randomize_bn, export, transformer_block_model

pytestmark = pytest.mark.gpu

TOL = {"fp32": (1e-4, 1e-4), "tf32": (5e-3, 5e-3), "fp16": (3e-2, 3e-2), "bf16": (8e-2, 8e-2)}


@pytest.mark.parametrize("precision", ["fp32", "tf32", "fp16", "bf16"])
def test_resnet_block_matches_onnxruntime(precision):
    model = ResidualBlock(16)
    _randomize_bn(model)
    proto = export(model, (torch.randn(2, 3, 32, 32),), ["x"])
    x = np.random.default_rng(0).standard_normal((4, 3, 32, 32)).astype(np.float32)
    engine = tensorsmith.build(proto, target="cuda", precision=precision, input_shapes={"x": x.shape})
    rtol, atol = TOL[precision]
    np.testing.assert_allclose(engine.run({"x": x})["out"], ort_run(proto, {"x": x})[0], rtol=rtol, atol=atol)


@pytest.mark.parametrize("precision", ["fp32", "fp16"])
def test_transformer_block_matches_onnxruntime(precision):
    _, (x, mask), proto = transformer_block_model(opset=13)
    feeds = {"x": x.numpy(), "mask": mask.numpy()}
    engine = tensorsmith.build(proto, target="cuda", precision=precision,
                               input_shapes={"x": x.shape, "mask": mask.shape})
    rtol, atol = TOL[precision]
    np.testing.assert_allclose(engine.run(feeds)["out"], ort_run(proto, feeds)[0], rtol=rtol, atol=atol)


def test_cuda_graphs_on_and_off_agree_and_outputs_stay_on_device():
    x = torch.randn(2, 3, 8, 8, device="cuda")
    with_graphs = tensorsmith.build(conv_bn_relu_model(), target="cuda", input_shapes={"x": x.shape})
    without = tensorsmith.build(conv_bn_relu_model(), target="cuda", input_shapes={"x": x.shape}, cuda_graphs=False)
    a, b = with_graphs.run({"x": x})["y"], without.run({"x": x})["y"]
    assert a.is_cuda and b.is_cuda
    torch.testing.assert_close(a, b)
    a2 = with_graphs.run({"x": x * 2})["y"]  # replay with new data
    torch.testing.assert_close(a2, without.run({"x": x * 2})["y"])


def test_timing_cache_makes_the_second_build_skip_tuning(tmp_path):
    path = tmp_path / "cache.json"
    tensorsmith.build(make_mlp_model(), target="cuda", input_shapes={"x": (8, 4)}, timing_cache=path)
    from tensorsmith.tuner import TimingCache

    cache = TimingCache(path)
    tensorsmith.build(make_mlp_model(), target="cuda", input_shapes={"x": (8, 4)}, timing_cache=cache)
    assert cache.hits > 0 and cache.misses == 0


def test_every_registered_tactic_is_checked_against_the_reference_on_gpu():
    from tensorsmith.testing.layers import check_tactic, layer_contexts
    from tensorsmith.tactics import TACTICS

    lcs = layer_contexts(conv_bn_relu_model(), input_shapes={"x": (2, 3, 8, 8)}, device="cuda", precision="fp16")
    lcs += layer_contexts(transformer_block_model(13)[2], input_shapes={"x": (2, 7, 32), "mask": (2, 1, 1, 7)},
                          device="cuda", precision="fp16")
    tried = 0
    for lc in lcs:
        for tactic in TACTICS.values():
            if tactic.applies(lc):
                for config in tactic.configs(lc)[:3]:
                    assert check_tactic(tactic, lc, config) <= 0, (tactic.name, config, lc.layer.name)
                    tried += 1
    assert tried > len(lcs)


def test_loaded_engine_with_shape_weights_captures_a_cuda_graph(tmp_path):
    """Reshape targets are weights read on the host: after a load they must stay on the CPU
    (on the H200 a loaded BERT engine failed CUDA graph capture before engine/weights.py)."""
    _, (x, mask), proto = transformer_block_model(opset=13)
    shapes = {"x": x.shape, "mask": mask.shape}
    engine = tensorsmith.build(proto, target="cuda", precision="fp16", input_shapes=shapes)
    path = tmp_path / "block.tsmith"
    engine.save(path)
    loaded = tensorsmith.load(path)
    feeds = {"x": x.cuda(), "mask": mask.cuda()}
    torch.testing.assert_close(loaded.run(feeds)["out"], engine.run(feeds)["out"])
