"""The network-builder API: layers by hand, typed as they are added, built into engines."""

import numpy as np
import pytest
import torch
import torch.nn.functional as F

import tensorsmith
from tensorsmith.errors import ShapeInferenceError, TensorsmithError


def _weights():
    rng = np.random.default_rng(0)
    return {"w": rng.standard_normal((4, 3, 3, 3)).astype(np.float32), "b": rng.standard_normal(4).astype(np.float32),
            "s": rng.uniform(0.5, 2, 4).astype(np.float32), "t": rng.standard_normal(4).astype(np.float32),
            "fc": rng.standard_normal((16, 5)).astype(np.float32)}


def _network(p):
    net = tensorsmith.Network()
    x = net.add_input("x", "float32", (2, 3, 8, 8))
    y = net.add_convolution(x, p["w"], p["b"], stride=1, padding=1, name="conv1")
    y = net.add_scale(y, scale=p["s"], shift=p["t"], mode="channel")
    y = net.add_activation(y, "relu")
    y = net.add_pooling(y, "max", window=2)  # 4 x 4 x 4
    z = net.add_pooling(y, "average", window=2)  # 4 x 2 x 2
    z = net.add_reshape(z, (2, 16))
    z = net.add_matmul(z, p["fc"])
    z = net.add_elementwise(z, np.float32(1.0), "add")
    out = net.add_softmax(z, axis=-1)
    net.mark_output(out, "probs")
    return net, x, y


def _torch_reference(p, x):
    t = lambda a: torch.from_numpy(a)  # noqa: E731
    y = F.conv2d(t(x), t(p["w"]), t(p["b"]), padding=1)
    y = torch.relu(y * t(p["s"]).reshape(-1, 1, 1) + t(p["t"]).reshape(-1, 1, 1))
    z = F.avg_pool2d(F.max_pool2d(y, 2), 2).reshape(2, 16)
    return torch.softmax(z @ t(p["fc"]) + 1.0, -1).numpy()


def test_layers_are_typed_as_they_are_added():
    net, x, y = _network(_weights())
    assert str(x.type) == "float32[2,3,8,8]" and str(y.type) == "float32[2,4,4,4]"
    assert [str(v) for v in net.outputs] == ["%probs: float32[2,5]"]


@pytest.mark.parametrize("opt_level", [0, 3])
def test_build_matches_torch(opt_level):
    p = _weights()
    net, _, _ = _network(p)
    engine = tensorsmith.build(net, opt_level=opt_level)
    x = np.random.default_rng(1).standard_normal((2, 3, 8, 8)).astype(np.float32)
    np.testing.assert_allclose(engine(x), _torch_reference(p, x), rtol=1e-5, atol=1e-6)
    again = tensorsmith.build(net)  # a network builds any number of engines
    np.testing.assert_allclose(again(x), engine(x), rtol=1e-5, atol=1e-6)


def test_activations():
    net = tensorsmith.Network()
    x = net.add_input("x", "float32", ("n", 6))
    outs = {k: net.add_activation(x, k, **kw) for k, kw in {
        "relu": {}, "sigmoid": {}, "tanh": {}, "leaky_relu": {"alpha": 0.1}, "gelu": {}, "silu": {},
        "clip": {"alpha": -0.5, "beta": 0.5}}.items()}
    for k, v in outs.items():
        net.mark_output(v, k)
    engine = tensorsmith.build(net)
    xs = np.linspace(-3, 3, 12, dtype=np.float32).reshape(2, 6)
    got = engine.run({"x": xs})
    t = torch.from_numpy(xs)
    want = {"relu": torch.relu(t), "sigmoid": torch.sigmoid(t), "tanh": torch.tanh(t),
            "leaky_relu": F.leaky_relu(t, 0.1), "gelu": F.gelu(t), "silu": F.silu(t), "clip": t.clamp(-0.5, 0.5)}
    for k in want:
        np.testing.assert_allclose(got[k], want[k].numpy(), rtol=1e-5, atol=1e-6, err_msg=k)


def test_shape_errors_name_the_layer():
    net = tensorsmith.Network()
    x = net.add_input("x", "float32", (1, 3, 8, 8))
    with pytest.raises(ShapeInferenceError, match="bad_mm"):
        net.add_matmul(x, np.zeros((5, 4), np.float32), name="bad_mm")
    assert not net._graph.nodes  # the failed layer left nothing behind
    with pytest.raises(TensorsmithError, match="unknown activation 'swishy'"):
        net.add_activation(x, "swishy")
    other = tensorsmith.Network().add_input("z", "float32", (1,))
    with pytest.raises(TensorsmithError, match="not a tensor of this network"):
        net.add_activation(other, "relu")
    with pytest.raises(TensorsmithError, match="no outputs"):
        tensorsmith.build(net)


def test_refit_by_weight_name():
    net = tensorsmith.Network()
    x = net.add_input("x", "float32", (1, 4))
    net.mark_output(net.add_matmul(x, net.add_constant(np.eye(4, dtype=np.float32), "proj")), "y")
    engine = tensorsmith.build(net)
    engine.refit({"proj": 2 * np.eye(4, dtype=np.float32)})
    np.testing.assert_allclose(engine(np.ones((1, 4), np.float32)), 2 * np.ones((1, 4)))
