"""Small ONNX models for op tests."""

from __future__ import annotations

import numpy as np
import onnx
from onnx import helper, numpy_helper


def one_node_model(op, ins, n_out=1, opset=18, shapes=None, **attrs):
    """A model of one node. ins: (name, array) pairs in input order; name '' omits an optional
    input; names starting with 'c_' become initializers, the others graph inputs (whose shape
    may be overridden through `shapes`, e.g. with symbols). Returns (model, feeds)."""
    graph_inputs, inits, feeds = [], [], {}
    for name, arr in ins:
        if not name:
            continue
        if name.startswith("c_"):
            inits.append(numpy_helper.from_array(np.asarray(arr), name))
            continue
        arr = np.asarray(arr)
        shape = (shapes or {}).get(name, arr.shape)
        graph_inputs.append(helper.make_tensor_value_info(name, helper.np_dtype_to_tensor_dtype(arr.dtype), shape))
        feeds[name] = arr
    outs = [f"y{i}" for i in range(n_out)]
    node = helper.make_node(op, [n for n, _ in ins], outs, **attrs)
    g = helper.make_graph([node], "one", graph_inputs, [onnx.ValueInfoProto(name=o) for o in outs], initializer=inits)
    model = helper.make_model(g, opset_imports=[helper.make_opsetid("", opset)])
    model.ir_version = min(model.ir_version, 10)  # what the installed onnxruntime reads
    return model, feeds


