"""Build a network by hand (like TensorRT's INetworkDefinition), then an engine from it."""

import numpy as np

import tensorsmith

rng = np.random.default_rng(0)
net = tensorsmith.Network()
x = net.add_input("x", "float32", (1, 3, 8, 8))
y = net.add_convolution(x, rng.standard_normal((8, 3, 3, 3)).astype(np.float32), np.zeros(8, np.float32),
                        stride=1, padding=1)
y = net.add_scale(y, scale=np.full(8, 0.5, np.float32), shift=np.full(8, 0.1, np.float32), mode="channel")
y = net.add_activation(y, "relu")
y = net.add_pooling(y, "max", window=2)              # (1, 8, 4, 4)
y = net.add_reshape(y, (1, 128))
y = net.add_matmul(y, rng.standard_normal((128, 10)).astype(np.float32))
y = net.add_elementwise(y, np.zeros(10, np.float32), "add")
y = net.add_softmax(y, axis=-1)
net.mark_output(y, "probs")
print(net)

engine = tensorsmith.build(net)
probs = engine(rng.standard_normal((1, 3, 8, 8)).astype(np.float32))
print(probs.shape, float(probs.sum()))
