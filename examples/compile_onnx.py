"""One call: an ONNX file in, a callable engine out (the GPU if there is one, else the CPU)."""

import os
import tempfile

import numpy as np
import onnx
from onnx import TensorProto, helper

import tensorsmith

# A tiny model: y = relu(x @ W + b).
rng = np.random.default_rng(0)
graph = helper.make_graph(
    [helper.make_node("MatMul", ["x", "W"], ["h"]), helper.make_node("Add", ["h", "b"], ["z"]),
     helper.make_node("Relu", ["z"], ["y"])],
    "tiny", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 8])],
    [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 4])],
    initializer=[onnx.numpy_helper.from_array(rng.standard_normal((8, 4)).astype(np.float32), "W"),
                 onnx.numpy_helper.from_array(rng.standard_normal(4).astype(np.float32), "b")])
path = os.path.join(tempfile.mkdtemp(), "model.onnx")
onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]), path)

engine = tensorsmith.compile(path, precision="fp16")  # fp16 on a GPU; the CPU runs fp32
x = rng.standard_normal((2, 8)).astype(np.float32)
print(engine)
print(engine(x))
