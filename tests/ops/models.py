"""Small ONNX models for op tests, and the helpers that run them.

One builder, `one_node`, serves every op test file; `one_node_model` is its form for tests that
list inputs in order as (name, array) pairs.
"""

from __future__ import annotations

import numpy as np
import onnx
import torch
from onnx import helper, numpy_helper

import tensorsmith


def one_node(op: str, inputs: dict, attrs: dict | None = None, opset: int = 18, *, consts: dict | None = None,
             input_names: list[str] | None = None, n_outputs: int = 1, out_dtype: int | None = None,
             shapes: dict | None = None) -> onnx.ModelProto:
    """A model of one node. `inputs` (name -> array) become graph inputs typed after their arrays
    (`shapes` overrides a shape, e.g. with symbols), `consts` initializers. The node reads them in
    that order unless `input_names` says otherwise ('' for an omitted optional input). Outputs
    y0, y1, ... are untyped unless `out_dtype` is given: their types are what inference (ours and
    ORT's) must find."""
    shapes = shapes or {}
    consts = consts or {}
    names = input_names if input_names is not None else [*inputs, *consts]
    ins = [helper.make_tensor_value_info(name, helper.np_dtype_to_tensor_dtype(a.dtype), shapes.get(name, a.shape))
           for name, a in inputs.items()]
    inits = [numpy_helper.from_array(np.asarray(a), name) for name, a in consts.items()]
    outs = [helper.make_tensor_value_info(f"y{i}", out_dtype, None) if out_dtype else onnx.ValueInfoProto(name=f"y{i}")
            for i in range(n_outputs)]
    node = helper.make_node(op, names, [o.name for o in outs], **(attrs or {}))
    g = helper.make_graph([node], op.lower(), ins, outs, initializer=inits)
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", opset)])


def one_node_model(op, ins, n_out=1, opset=18, shapes=None, **attrs):
    """A model of one node. ins: (name, array) pairs in input order; name '' omits an optional
    input; names starting with 'c_' become initializers, the others graph inputs (whose shape
    may be overridden through `shapes`, e.g. with symbols). Returns (model, feeds)."""
    feeds = {name: np.asarray(arr) for name, arr in ins if name and not name.startswith("c_")}
    consts = {name: arr for name, arr in ins if name.startswith("c_")}
    model = one_node(op, feeds, attrs, opset, consts=consts, input_names=[n for n, _ in ins], n_outputs=n_out,
                     shapes=shapes)
    model.ir_version = min(model.ir_version, 10)  # what the installed onnxruntime reads
    return model, feeds


def out_type(model: onnx.ModelProto, i: int = 0):
    """The type inference gives output i."""
    return tensorsmith.import_onnx(model).outputs[i].type


def engine_output(model: onnx.ModelProto, feeds: dict) -> np.ndarray:
    """Output y0 of the model built by tensorsmith (torch feeds, so that 0-d inputs keep their rank)."""
    y = tensorsmith.build(model).run({k: torch.from_numpy(np.array(v)) for k, v in feeds.items()})["y0"]
    return y.numpy() if isinstance(y, torch.Tensor) else y


def assert_matches_ort(got: list[np.ndarray], want: list[np.ndarray], op: str, rtol: float, atol: float) -> None:
    """Outputs equal onnxruntime's (`want`) in dtype and shape, and in value within tolerance."""
    for g, w in zip(got, want):
        assert g.dtype == w.dtype, (op, g.dtype, w.dtype)
        assert g.shape == w.shape, (op, g.shape, w.shape)
        np.testing.assert_allclose(g.astype(np.float64), w.astype(np.float64), rtol=rtol, atol=atol, err_msg=op)
