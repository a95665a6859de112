"""Refit: swap an engine's weights by their original names, without rebuilding."""

import numpy as np

import tensorsmith

net = tensorsmith.Network()
x = net.add_input("x", "float32", (1, 4))
net.mark_output(net.add_matmul(x, net.add_constant(np.eye(4, dtype=np.float32), "proj")), "y")
engine = tensorsmith.build(net, refittable=True)  # keeps weight-changing folds off

ones = np.ones((1, 4), np.float32)
print("before:", engine(ones))
refitter = tensorsmith.Refitter(engine)
print("refittable:", refitter.refittable)
refitter.set_weights({"proj": 3 * np.eye(4, dtype=np.float32)})
refitter.refit()  # or engine.refit({...})
print("after: ", engine(ones))
