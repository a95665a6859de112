"""RNN, GRU and LSTM against onnxruntime: directions, sequence_lens, initial states, layout,
activations with alpha/beta, clip, peepholes, and the inferred output types."""

from __future__ import annotations

import numpy as np
import pytest
from onnx import TensorProto as TP
from onnx import helper

import tensorsmith
from tensorsmith.ir import DType

F32 = TP.FLOAT
SEQ, BATCH, INPUT, HIDDEN = 4, 3, 5, 6
GATES = {"RNN": 1, "GRU": 3, "LSTM": 4}


def rnn_model(op, opset, dirs, attrs, with_lens=False, with_init=False, with_peep=False, layout=0, elem=F32):
    g = GATES[op]
    x_shape = [BATCH, SEQ, INPUT] if layout else [SEQ, BATCH, INPUT]
    state = [BATCH, dirs, HIDDEN] if layout else [dirs, BATCH, HIDDEN]
    ins = [("X", x_shape), ("W", [dirs, g * HIDDEN, INPUT]), ("R", [dirs, g * HIDDEN, HIDDEN]),
           ("B", [dirs, 2 * g * HIDDEN])]
    ins.append(("seq", [BATCH]) if with_lens else ("", None))
    ins.append(("h0", state) if with_init else ("", None))
    if op == "LSTM":
        ins.append(("c0", state) if with_init else ("", None))
        ins.append(("P", [dirs, 3 * HIDDEN]) if with_peep else ("", None))
    while ins[-1][0] == "":
        ins.pop()
    outs = ["Y", "Y_h", "Y_c"] if op == "LSTM" else ["Y", "Y_h"]
    node = helper.make_node(op, [n for n, _ in ins], outs, hidden_size=HIDDEN, layout=layout, **attrs) if opset >= 14 \
        else helper.make_node(op, [n for n, _ in ins], outs, hidden_size=HIDDEN, **attrs)
    graph = helper.make_graph(
        [node], "g",
        [helper.make_tensor_value_info(n, TP.INT32 if n == "seq" else elem, s) for n, s in ins if n],
        [helper.make_tensor_value_info(o, elem, None) for o in outs])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])


def feeds_for(model, rng):
    feeds = {}
    for vi in model.graph.input:
        shape = [d.dim_value for d in vi.type.tensor_type.shape.dim]
        if vi.name == "seq":
            feeds["seq"] = np.array([SEQ, 2, 1], np.int32)
        else:
            dtype = np.float64 if vi.type.tensor_type.elem_type == TP.DOUBLE else np.float32
            feeds[vi.name] = (rng.standard_normal(shape) * 0.5).astype(dtype)
    return feeds


def compare(model, rng, rtol=1e-4, atol=1e-5, reference=False):
    """Against onnxruntime, or the ONNX reference evaluator for what onnxruntime lacks (layout=1, double LSTM)."""
    import onnxruntime as ort
    from onnx.reference import ReferenceEvaluator

    feeds = feeds_for(model, rng)
    if reference:
        expected = ReferenceEvaluator(model).run(None, feeds)
    else:
        expected = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"]).run(None, feeds)
    got = list(tensorsmith.build(model).run(feeds).values())
    assert len(got) == len(expected)
    for g, e in zip(got, expected):
        assert g.dtype == e.dtype and g.shape == e.shape
        np.testing.assert_allclose(g, e, rtol=rtol, atol=atol)
    return got


@pytest.mark.parametrize("op", ["RNN", "GRU", "LSTM"])
@pytest.mark.parametrize("direction", ["forward", "reverse", "bidirectional"])
def test_directions_with_sequence_lens_and_initial_state(op, direction):
    dirs = 2 if direction == "bidirectional" else 1
    model = rnn_model(op, 14, dirs, {"direction": direction}, with_lens=True, with_init=True)
    got = compare(model, np.random.default_rng(0))
    # batch item 2 has length 1: Y is zero past its first step
    assert np.all(got[0][1:, :, 2] == 0)


@pytest.mark.parametrize("op", ["RNN", "GRU", "LSTM"])
def test_layout_1_batch_major(op):
    model = rnn_model(op, 14, 2, {"direction": "bidirectional"}, with_init=True, layout=1)
    got = compare(model, np.random.default_rng(1), reference=True)
    assert got[0].shape == (BATCH, SEQ, 2, HIDDEN) and got[1].shape == (BATCH, 2, HIDDEN)


def test_lstm_peepholes_clip_input_forget_old_opset():
    model = rnn_model("LSTM", 7, 1, {"clip": 0.5, "input_forget": 1}, with_init=True, with_peep=True)
    compare(model, np.random.default_rng(2))


def test_gru_linear_before_reset_and_activations():
    attrs = {"linear_before_reset": 1, "activations": ["HardSigmoid", "LeakyRelu"],
             "activation_alpha": [0.3, 0.05], "activation_beta": [0.4]}
    model = rnn_model("GRU", 7, 1, attrs)
    compare(model, np.random.default_rng(3))


def test_rnn_bidirectional_activations_per_direction():
    attrs = {"direction": "bidirectional", "activations": ["Relu", "Sigmoid"]}
    compare(rnn_model("RNN", 7, 2, attrs), np.random.default_rng(4))


def test_double_precision_and_inferred_types():
    model = rnn_model("LSTM", 14, 2, {"direction": "bidirectional"}, elem=TP.DOUBLE)
    got = compare(model, np.random.default_rng(5), reference=True)
    assert got[2].dtype == np.float64
    types = [v.type for v in tensorsmith.import_onnx(model).outputs]
    assert types[0].dtype == DType.FLOAT64
    assert types[0].shape == (SEQ, 2, BATCH, HIDDEN)
    assert types[1].shape == types[2].shape == (2, BATCH, HIDDEN)


def test_unknown_activation_is_a_clear_error():
    model = rnn_model("RNN", 7, 1, {"activations": ["Swishy"]})
    with pytest.raises(tensorsmith.errors.TensorsmithError, match="Swishy"):
        tensorsmith.build(model).run(feeds_for(model, np.random.default_rng(6)))
