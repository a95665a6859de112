"""Optimization profiles: one engine for batch 1..32 and 33..64; the context picks by shape."""

import numpy as np

import tensorsmith
from tensorsmith.errors import ShapeOutOfProfileError

net = tensorsmith.Network()
x = net.add_input("x", "float32", ("batch", 3, 8, 8))
y = net.add_pooling(net.add_activation(x, "relu"), "average", window=8)
net.mark_output(y, "y")
engine = tensorsmith.build(net, profiles=[
    {"x": {"min": (1, 3, 8, 8), "opt": (8, 3, 8, 8), "max": (32, 3, 8, 8)}},
    {"x": {"min": (33, 3, 8, 8), "opt": (48, 3, 8, 8), "max": (64, 3, 8, 8)}},
])
context = engine.create_execution_context()
for batch in (1, 8, 40):
    out = context.run_numpy({"x": np.ones((batch, 3, 8, 8), np.float32)})["y"]
    print(batch, "-> profile", engine.select_profile({"x": (batch, 3, 8, 8)}), out.shape)
context.set_profile(1)  # or pin a profile
try:
    context.run_numpy({"x": np.ones((100, 3, 8, 8), np.float32)})
except ShapeOutOfProfileError as e:
    print("typed error:", e)
