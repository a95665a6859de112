"""Build once, save the engine file, load it elsewhere, run it from two threads with a context each."""

import os
import tempfile
import threading
import time

import numpy as np

import tensorsmith

net = tensorsmith.Network()
x = net.add_input("x", "float32", ("batch", 16))
h = net.add_activation(net.add_matmul(x, np.random.default_rng(0).standard_normal((16, 16)).astype(np.float32)), "gelu")
net.mark_output(h, "y")
engine = tensorsmith.build(net)

path = os.path.join(tempfile.mkdtemp(), "model.tsmith")
engine.save(path)  # manifest (JSON) + weights (safetensors); no code, no pickle
t0 = time.perf_counter()
loaded = tensorsmith.load(path)  # same as tensorsmith.Runtime().load(path)
print(f"loaded {os.path.getsize(path)} bytes in {(time.perf_counter() - t0) * 1e3:.1f} ms: {loaded}")


def worker(seed: int) -> None:
    context = loaded.create_execution_context()  # own activations, shared weights
    batch = np.random.default_rng(seed).standard_normal((seed, 16)).astype(np.float32)
    out = context.run_numpy({"x": batch})["y"]  # or context.execute({"x": device_tensor}, stream=s)
    assert np.allclose(out, engine.run({"x": batch})["y"])
    print(f"thread {seed}: {out.shape}")


threads = [threading.Thread(target=worker, args=(s,)) for s in (2, 3)]
for t in threads:
    t.start()
for t in threads:
    t.join()
