"""Temporary: run the nn/normalization/vision op tests with the interpreter on CUDA."""
import sys

import numpy as np
import pytest
import torch

sys.path[:0] = ["src", "."]
import tensorsmith  # noqa: E402
import tests.ops.test_nn as tn  # noqa: E402
from tensorsmith.ops.interpreter import run_graph  # noqa: E402


def run(model, inputs):
    g = tensorsmith.import_onnx(model)
    feeds = {k: torch.from_numpy(np.ascontiguousarray(v).reshape(v.shape)).cuda() for k, v in inputs.items()}
    outs = run_graph(g, feeds, device="cuda")
    assert all(o.device.type == "cuda" for o in outs)
    return [o.cpu().numpy() for o in outs]


def ort_run(model, feeds):
    import onnxruntime as ort
    model.ir_version = min(model.ir_version, 10)  # the device's ORT reads IR <= 13
    sess = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    return sess.run(None, feeds)


tn.run = run
tn.ort_run = ort_run
print(torch.__version__, torch.cuda.get_device_name(0))
sys.exit(pytest.main(["-q", "-p", "no:cacheprovider", "-x" if "-x" in sys.argv else "-q",
                      "tests/ops/test_nn.py", "tests/ops/test_normalization.py", "tests/ops/test_vision.py"]))
