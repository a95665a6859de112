"""Ops whose signature changed across opsets, at their old and new opsets, against onnxruntime.

The importer rewrites old attribute forms into the newest input form (frontends/onnx_legacy.py);
these tests build each form in code and check that tensorsmith computes what onnxruntime does
(or numpy, where onnxruntime refuses an old model). An op that is not registered yet skips.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable

import numpy as np
import onnx
import pytest
import torch
from onnx import TensorProto, helper, numpy_helper

import tensorsmith
from tensorsmith.errors import UnsupportedOperatorError

RNG = np.random.default_rng(0)
F = TensorProto.FLOAT


@dataclass
class Case:
    """One node at one opset: runtime inputs, initializers, and the outputs with their ONNX dtypes."""

    op: str
    opset: int
    inputs: list[str]
    feeds: dict[str, np.ndarray]
    outputs: list[tuple[str, int]] = field(default_factory=lambda: [("y", F)])
    attrs: dict = field(default_factory=dict)
    consts: dict[str, np.ndarray] = field(default_factory=dict)
    numpy_ref: Callable[..., list[np.ndarray]] | None = None  # used where onnxruntime refuses the model
    ort_differs: str = ""  # why onnxruntime departs from the ONNX spec here: numpy_ref is the reference

    def model(self) -> onnx.ModelProto:
        node = helper.make_node(self.op, self.inputs, [n for n, _ in self.outputs], **self.attrs)
        graph = helper.make_graph(
            [node], f"{self.op}_{self.opset}",
            [helper.make_tensor_value_info(k, helper.np_dtype_to_tensor_dtype(v.dtype), v.shape)
             for k, v in self.feeds.items()],
            [helper.make_tensor_value_info(n, t, None) for n, t in self.outputs],
            initializer=[numpy_helper.from_array(np.asarray(v), k) for k, v in self.consts.items()],
        )
        return helper.make_model(graph, opset_imports=[helper.make_opsetid("", self.opset)], ir_version=7)


def x(*shape, dtype=np.float32):
    return RNG.standard_normal(shape).astype(dtype)


def i64(*v):
    return np.array(v, np.int64)


def f32(*v):
    return np.array(v, np.float32)


def _cases() -> list[tuple[str, Case]]:
    a = x(2, 6, 3)
    img = x(1, 2, 3, 4)
    cases = [
        # Split: `split` attribute until 13, then an input.
        ("split-7-attr", Case("Split", 7, ["a"], {"a": a}, [("s0", F), ("s1", F), ("s2", F)],
                              {"axis": 1, "split": [1, 2, 3]})),
        ("split-11-attr", Case("Split", 11, ["a"], {"a": a}, [("s0", F), ("s1", F)], {"axis": -2, "split": [4, 2]})),
        ("split-11-equal", Case("Split", 11, ["a"], {"a": a}, [("s0", F), ("s1", F), ("s2", F)], {"axis": 1})),
        ("split-13-input", Case("Split", 13, ["a", "split"], {"a": a}, [("s0", F), ("s1", F), ("s2", F)],
                                {"axis": 1}, {"split": i64(1, 2, 3)})),
        ("split-18-input", Case("Split", 18, ["a", "split"], {"a": a}, [("s0", F), ("s1", F)],
                                {"axis": 2}, {"split": i64(2, 1)})),
        # Squeeze/Unsqueeze: `axes` attribute until 13.
        ("squeeze-7-attr", Case("Squeeze", 7, ["a"], {"a": x(1, 3, 1, 2)}, attrs={"axes": [0, 2]})),
        ("squeeze-7-all", Case("Squeeze", 7, ["a"], {"a": x(1, 3, 1, 2)})),
        ("squeeze-11-negative", Case("Squeeze", 11, ["a"], {"a": x(1, 3, 1, 2)}, attrs={"axes": [-2]})),
        ("squeeze-13-input", Case("Squeeze", 13, ["a", "axes"], {"a": x(1, 3, 1, 2)}, consts={"axes": i64(0, -2)})),
        ("unsqueeze-7-attr", Case("Unsqueeze", 7, ["a"], {"a": x(3, 2)}, attrs={"axes": [0, 3]})),
        ("unsqueeze-11-negative", Case("Unsqueeze", 11, ["a"], {"a": x(3, 2)}, attrs={"axes": [-1, 1]})),
        ("unsqueeze-13-input", Case("Unsqueeze", 13, ["a", "axes"], {"a": x(3, 2)}, consts={"axes": i64(1, -1)})),
        # ReduceSum: `axes` attribute until 13; ReduceMean until 18.
        ("reducesum-7-attr", Case("ReduceSum", 7, ["a"], {"a": a}, attrs={"axes": [1], "keepdims": 0})),
        ("reducesum-11-attr", Case("ReduceSum", 11, ["a"], {"a": a}, attrs={"axes": [-1, 0]})),
        ("reducesum-11-all", Case("ReduceSum", 11, ["a"], {"a": a}, attrs={"keepdims": 0})),
        ("reducesum-13-input", Case("ReduceSum", 13, ["a", "axes"], {"a": a}, attrs={"keepdims": 0},
                                    consts={"axes": i64(1, 2)})),
        ("reducesum-13-noop", Case("ReduceSum", 13, ["a", "axes"], {"a": a}, attrs={"noop_with_empty_axes": 1},
                                   consts={"axes": np.zeros(0, np.int64)})),
        ("reducemean-7-attr", Case("ReduceMean", 7, ["a"], {"a": a}, attrs={"axes": [2]})),
        ("reducemean-13-attr", Case("ReduceMean", 13, ["a"], {"a": a}, attrs={"axes": [0, -1], "keepdims": 0})),
        ("reducemean-18-input", Case("ReduceMean", 18, ["a", "axes"], {"a": a}, consts={"axes": i64(0, 2)})),
        # Slice: attributes (no steps) until 10, then inputs.
        ("slice-7-attr", Case("Slice", 7, ["a"], {"a": a}, attrs={"starts": [1, 0], "ends": [5, 2], "axes": [1, 2]})),
        ("slice-9-noaxes", Case("Slice", 9, ["a"], {"a": a}, attrs={"starts": [0, 2, 1], "ends": [1, 100, -1]})),
        ("slice-10-input", Case("Slice", 10, ["a", "starts", "ends", "axes"], {"a": a},
                                consts={"starts": i64(-4), "ends": i64(-1), "axes": i64(1)})),
        ("slice-13-steps", Case("Slice", 13, ["a", "starts", "ends", "axes", "steps"], {"a": a},
                                consts={"starts": i64(5, 0), "ends": i64(0, 3), "axes": i64(1, 2),
                                        "steps": i64(-2, 2)})),
        # Pad: attributes until 11, then inputs (constant_value, and axes from 18).
        ("pad-7-constant", Case("Pad", 7, ["a"], {"a": img}, attrs={"pads": [0, 0, 1, 2, 0, 1, 0, 1], "value": 1.5})),
        ("pad-7-reflect", Case("Pad", 7, ["a"], {"a": img}, attrs={"pads": [0, 0, 1, 1, 0, 0, 2, 2],
                                                                    "mode": "reflect"})),
        ("pad-7-edge", Case("Pad", 7, ["a"], {"a": img}, attrs={"pads": [0, 0, 2, 0, 0, 0, 0, 3], "mode": "edge"})),
        ("pad-11-input", Case("Pad", 11, ["a", "pads", "value"], {"a": img},
                              consts={"pads": i64(0, 0, 1, 2, 0, 1, 0, 1), "value": f32(-3.0)})),
        ("pad-13-reflect", Case("Pad", 13, ["a", "pads"], {"a": img}, attrs={"mode": "reflect"},
                                consts={"pads": i64(0, 0, 2, 1, 0, 0, 0, 2)})),
        ("pad-18-axes", Case("Pad", 18, ["a", "pads", "", "axes"], {"a": img},
                             consts={"pads": i64(1, 2, 0, 1), "axes": i64(2, -1)})),
        # Clip: min/max attributes until 11, then optional inputs.
        ("clip-7-attrs", Case("Clip", 7, ["a"], {"a": a}, attrs={"min": -0.5, "max": 0.7})),
        ("clip-7-min-only", Case("Clip", 7, ["a"], {"a": a}, attrs={"min": -0.2})),
        ("clip-11-inputs", Case("Clip", 11, ["a", "lo", "hi"], {"a": a}, consts={"lo": f32(-0.5)[0], "hi": f32(0.7)[0]})),
        ("clip-13-max-only", Case("Clip", 13, ["a", "", "hi"], {"a": a}, consts={"hi": np.float32(0.1)})),
        ("clip-13-int32", Case("Clip", 13, ["a", "lo", "hi"], {"a": np.arange(-5, 7, dtype=np.int32)},
                               [("y", TensorProto.INT32)], consts={"lo": np.int32(-2), "hi": np.int32(3)})),
        # TopK: `k` attribute until 10, then an input; `largest`/`sorted` from 11.
        ("topk-7-attr", Case("TopK", 7, ["a"], {"a": x(3, 8)}, [("v", F), ("i", TensorProto.INT64)], {"k": 3})),
        ("topk-9-axis", Case("TopK", 9, ["a"], {"a": x(5, 4)}, [("v", F), ("i", TensorProto.INT64)],
                             {"k": 2, "axis": 0})),
        ("topk-10-input", Case("TopK", 10, ["a", "k"], {"a": x(3, 8)}, [("v", F), ("i", TensorProto.INT64)],
                               consts={"k": i64(4)})),
        ("topk-11-smallest", Case("TopK", 11, ["a", "k"], {"a": x(3, 8)}, [("v", F), ("i", TensorProto.INT64)],
                                  {"largest": 0, "axis": -1}, {"k": i64(2)})),
        # Upsample: `scales` attribute at 7, an input at 9 (deprecated at 10).
        ("upsample-7-nearest", Case("Upsample", 7, ["a"], {"a": img}, attrs={"scales": [1.0, 1.0, 2.0, 3.0]})),
        ("upsample-7-linear", Case("Upsample", 7, ["a"], {"a": img}, attrs={"scales": [1.0, 1.0, 2.0, 2.0],
                                                                            "mode": "linear"})),
        ("upsample-9-input", Case("Upsample", 9, ["a", "scales"], {"a": img}, consts={"scales": f32(1, 1, 3, 2)})),
        # Resize: (X, scales) at 10; (X, roi, scales, sizes) from 11.
        ("resize-10-nearest", Case("Resize", 10, ["a", "scales"], {"a": img}, consts={"scales": f32(1, 1, 2, 2)})),
        ("resize-10-linear", Case("Resize", 10, ["a", "scales"], {"a": img}, attrs={"mode": "linear"},
                                  consts={"scales": f32(1, 1, 2, 1.5)})),
        ("resize-11-scales", Case("Resize", 11, ["a", "roi", "scales"], {"a": img}, attrs={"mode": "linear"},
                                  consts={"roi": np.zeros(0, np.float32), "scales": f32(1, 1, 2, 2)})),
        ("resize-13-sizes", Case("Resize", 13, ["a", "", "", "sizes"], {"a": img},
                                 attrs={"mode": "nearest", "nearest_mode": "floor"}, consts={"sizes": i64(1, 2, 5, 7)})),
        # Dropout: `ratio` attribute until 12; inference is the identity (mask of ones).
        ("dropout-7-attr", Case("Dropout", 7, ["a"], {"a": a}, attrs={"ratio": 0.3})),
        # onnxruntime fills the inference mask of Dropout-7..11 with zeros; ONNX's reference (and
        # Dropout-12's spec) keep every element: ones. Dropout-7's mask has the input's dtype.
        ("dropout-7-mask", Case("Dropout", 7, ["a"], {"a": a}, [("y", F), ("m", F)], {"ratio": 0.3},
                                numpy_ref=lambda a: [a, np.ones_like(a)], ort_differs="mask of zeros")),
        ("dropout-10-mask", Case("Dropout", 10, ["a"], {"a": a}, [("y", F), ("m", TensorProto.BOOL)], {"ratio": 0.3},
                                 numpy_ref=lambda a: [a, np.ones(a.shape, bool)], ort_differs="mask of zeros")),
        ("dropout-13-input", Case("Dropout", 13, ["a", "r"], {"a": a}, [("y", F), ("m", TensorProto.BOOL)],
                                  consts={"r": np.float32(0.3)})),
        # Softmax family: flattened to 2-D at axis (default 1) before 13; one axis (default -1) from 13.
        ("softmax-7-default", Case("Softmax", 7, ["a"], {"a": a})),
        ("softmax-11-default", Case("Softmax", 11, ["a"], {"a": a})),
        ("softmax-11-axis2", Case("Softmax", 11, ["a"], {"a": x(2, 3, 4, 2)}, attrs={"axis": 2})),
        ("softmax-13-default", Case("Softmax", 13, ["a"], {"a": a})),
        ("softmax-13-axis1", Case("Softmax", 13, ["a"], {"a": a}, attrs={"axis": 1})),
        ("logsoftmax-11-default", Case("LogSoftmax", 11, ["a"], {"a": a})),
        ("logsoftmax-13-default", Case("LogSoftmax", 13, ["a"], {"a": a})),
        ("hardmax-11-default", Case("Hardmax", 11, ["a"], {"a": a})),
        ("hardmax-13-default", Case("Hardmax", 13, ["a"], {"a": a})),
    ]
    return cases


CASES = _cases()


def build_or_skip(model: onnx.ModelProto, op: str):
    try:
        return tensorsmith.build(model)
    except UnsupportedOperatorError as e:
        pytest.skip(f"{op} is not registered yet: {e}")


def reference(case: Case, model: onnx.ModelProto) -> list[np.ndarray]:
    """onnxruntime's outputs; the case's numpy reference where onnxruntime refuses the model."""
    import onnxruntime

    if case.ort_differs:
        return case.numpy_ref(**case.feeds)
    try:
        sess = onnxruntime.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
        return sess.run(None, case.feeds)
    except Exception:
        if case.numpy_ref is None:
            raise
        return case.numpy_ref(**case.feeds)


# Known gaps of the ops, to be fixed where the op lives (strict: the mark must go once fixed).
KNOWN_FAILURES: dict[str, str] = {}


@pytest.mark.parametrize("case", [
    pytest.param(c, id=name, marks=[pytest.mark.xfail(strict=True, reason=KNOWN_FAILURES[name])]
                 if name in KNOWN_FAILURES else [])
    for name, c in CASES
])
def test_old_and_new_opsets_match_onnxruntime(case: Case):
    model = case.model()
    engine = build_or_skip(model, case.op)
    # torch feeds, so that 0-d inputs keep their rank
    got = engine.run({k: torch.from_numpy(v.copy()) for k, v in case.feeds.items()})
    want = reference(case, model)
    assert list(got) == [n for n, _ in case.outputs]
    for (name, _), w in zip(case.outputs, want):
        g = got[name].numpy()
        assert g.dtype == w.dtype, f"{name}: dtype {g.dtype}, expected {w.dtype}"
        assert g.shape == w.shape, f"{name}: shape {g.shape}, expected {w.shape}"
        np.testing.assert_allclose(g, w, rtol=1e-5, atol=1e-6, err_msg=name)


def test_softmax_opset_11_and_13_differ_on_3d_inputs():
    """The two semantics must give different results here, else the cases above prove nothing."""
    a = x(2, 3, 4)
    outs = []
    for opset in (11, 13):
        engine = build_or_skip(Case("Softmax", opset, ["a"], {"a": a}).model(), "Softmax")
        outs.append(engine.run({"a": torch.from_numpy(a)})["y"].numpy())
    np.testing.assert_allclose(outs[0].reshape(2, -1).sum(-1), 1.0, rtol=1e-5)  # one softmax over 3*4 values
    np.testing.assert_allclose(outs[1].sum(-1), 1.0, rtol=1e-5)  # one per row of 4
    assert not np.allclose(outs[0], outs[1])


def test_legacy_attributes_become_inputs_on_import():
    """After import, old nodes carry the newest signature: the attribute is gone, an input holds it."""
    model = Case("Squeeze", 11, ["a"], {"a": x(1, 3, 1)}, attrs={"axes": [0, 2]}).model()
    node = tensorsmith.import_onnx(model).nodes[0]
    assert "axes" not in node.attrs and len(node.inputs) == 2
    model = Case("TopK", 9, ["a"], {"a": x(3, 8)}, [("v", F), ("i", TensorProto.INT64)], {"k": 3}).model()
    g = tensorsmith.import_onnx(model)
    assert "k" not in g.nodes[0].attrs
    assert tuple(g.outputs[0].type.shape) == (3, 3)
