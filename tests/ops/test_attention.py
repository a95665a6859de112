"""Attention, RotaryEmbedding, CausalConvWithState, LinearAttention and FlexAttention against
onnxruntime (or the ONNX reference evaluator where onnxruntime lacks the op), plus the
engine's inferred output types."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from onnx import TensorProto as TP
from onnx import helper
from onnx.reference import ReferenceEvaluator

import tensorsmith

F32, F16 = TP.FLOAT, TP.FLOAT16


def one_node(op, inputs, outputs, opset, attrs=None, domain="", extra_opsets=()):
    """A one-node model. inputs/outputs: (name, elem type, shape); an empty name is an omitted slot."""
    node = helper.make_node(op, [n for n, _, _ in inputs], [n for n, _, _ in outputs], domain=domain, **(attrs or {}))
    graph = helper.make_graph(
        [node], "g",
        [helper.make_tensor_value_info(n, t, s) for n, t, s in inputs if n],
        [helper.make_tensor_value_info(n, t, s) for n, t, s in outputs if n],
    )
    opsets = [helper.make_opsetid("", opset), *[helper.make_opsetid(d, v) for d, v in extra_opsets]]
    return helper.make_model(graph, opset_imports=opsets)


def ort_outputs(model, feeds):
    import onnxruntime as ort

    sess = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    return sess.run(None, feeds)


def ours(model, feeds):
    return list(tensorsmith.build(model).run(feeds).values())


def rand(rng, shape, dtype=np.float32):
    return rng.standard_normal(shape).astype(dtype)


def check(model, feeds, rtol=1e-4, atol=1e-5, expected=None):
    expected = ort_outputs(model, feeds) if expected is None else expected
    got = ours(model, feeds)
    assert len(got) == len(expected)
    for g, e in zip(got, expected):
        assert g.dtype == e.dtype
        np.testing.assert_allclose(g.astype(np.float64), e.astype(np.float64), rtol=rtol, atol=atol)
    return got


def test_attention_4d_causal_mask_softcap_matches_ort():
    rng = np.random.default_rng(0)
    feeds = {"q": rand(rng, (2, 3, 4, 8)), "k": rand(rng, (2, 3, 6, 8)), "v": rand(rng, (2, 3, 6, 5)),
             "m": rand(rng, (4, 6))}
    model = one_node("Attention", [("q", F32, [2, 3, 4, 8]), ("k", F32, [2, 3, 6, 8]), ("v", F32, [2, 3, 6, 5]),
                                   ("m", F32, [4, 6])],
                     [("y", F32, None)], 23, {"is_causal": 1, "softcap": 2.0, "scale": 0.3})
    check(model, feeds)


def test_attention_3d_gqa_past_present_and_qk_output():
    rng = np.random.default_rng(1)
    feeds = {"q": rand(rng, (2, 4, 6 * 8)), "k": rand(rng, (2, 4, 2 * 8)), "v": rand(rng, (2, 4, 2 * 8)),
             "m": rng.random((4, 7)) > 0.3, "pk": rand(rng, (2, 2, 3, 8)), "pv": rand(rng, (2, 2, 3, 8))}
    feeds["m"][:, 0] = True
    ins = [("q", F32, [2, 4, 48]), ("k", F32, [2, 4, 16]), ("v", F32, [2, 4, 16]), ("m", TP.BOOL, [4, 7]),
           ("pk", F32, [2, 2, 3, 8]), ("pv", F32, [2, 2, 3, 8])]
    outs = [("y", F32, None), ("present_k", F32, None), ("present_v", F32, None), ("qk", F32, None)]
    for mode in (0, 2, 3):
        model = one_node("Attention", ins, outs, 23, {"q_num_heads": 6, "kv_num_heads": 2, "qk_matmul_output_mode": mode})
        # onnxruntime writes float lowest instead of -inf for masked mode-2 scores; the reference is exact.
        expected = ReferenceEvaluator(model).run(None, feeds) if mode == 2 else None
        got = check(model, feeds, expected=expected)
        assert got[0].shape == (2, 4, 48) and got[1].shape == (2, 2, 7, 8) and got[3].shape == (2, 6, 4, 7)


def test_attention_fully_masked_row_is_zero_and_fp16():
    q = np.ones((1, 1, 2, 4), np.float16)
    mask = np.array([[False, False], [True, True]])
    model = one_node("Attention", [("q", F16, [1, 1, 2, 4]), ("k", F16, [1, 1, 2, 4]), ("v", F16, [1, 1, 2, 4]),
                                   ("m", TP.BOOL, [2, 2])], [("y", F16, None)], 23)
    (y,) = ours(model, {"q": q, "k": q, "v": q + 1, "m": mask})
    assert y.dtype == np.float16
    assert not np.isnan(y).any()
    np.testing.assert_array_equal(y[0, 0, 0], 0)
    np.testing.assert_allclose(y[0, 0, 1], 2.0)


def test_attention_window_and_nonpad_match_reference():
    rng = np.random.default_rng(2)
    feeds = {"q": rand(rng, (2, 2, 3, 8)), "k": rand(rng, (2, 2, 6, 8)), "v": rand(rng, (2, 2, 6, 8)),
             "n": np.array([4, 6], np.int64)}
    model = one_node("Attention", [("q", F32, [2, 2, 3, 8]), ("k", F32, [2, 2, 6, 8]), ("v", F32, [2, 2, 6, 8]),
                                   ("", F32, None), ("", F32, None), ("", F32, None), ("n", TP.INT64, [2])],
                     [("y", F32, None)], 25, {"is_causal": 1, "left_window_size": 1})
    check(model, feeds, expected=ReferenceEvaluator(model).run(None, feeds))


def test_attention_inferred_types_with_symbols():
    ins = [("q", F16, ["B", 5, 24]), ("k", F16, ["B", "S", 8]), ("v", F16, ["B", "S", 10]),
           ("", F16, None), ("pk", F16, ["B", 2, "P", 4]), ("pv", F16, ["B", 2, "P", 5])]
    outs = [("y", F16, None), ("pk2", F16, None), ("pv2", F16, None), ("qk", F16, None)]
    g = tensorsmith.import_onnx(one_node("Attention", ins, outs, 23, {"q_num_heads": 6, "kv_num_heads": 2}))
    types = [v.type for v in g.outputs]
    assert all(t.dtype == tensorsmith.ir.DType.FLOAT16 for t in types)
    assert types[0].shape == ("B", 5, 30)
    assert types[1].shape == ("B", 2, "P+S", 4)
    assert types[2].shape == ("B", 2, "P+S", 5)
    assert types[3].shape == ("B", 6, 5, "P+S")


@pytest.mark.parametrize("interleaved", [0, 1])
def test_rotary_embedding_3d_position_ids_partial(interleaved):
    rng = np.random.default_rng(3)
    feeds = {"x": rand(rng, (2, 3, 16)), "c": rand(rng, (10, 2)), "s": rand(rng, (10, 2)),
             "p": np.array([[0, 4, 9], [1, 2, 3]], np.int64)}
    model = one_node("RotaryEmbedding", [("x", F32, [2, 3, 16]), ("c", F32, [10, 2]), ("s", F32, [10, 2]),
                                         ("p", TP.INT64, [2, 3])], [("y", F32, None)], 23,
                     {"num_heads": 2, "rotary_embedding_dim": 4, "interleaved": interleaved})
    got = check(model, feeds)
    np.testing.assert_array_equal(got[0][..., 4:8], feeds["x"][..., 4:8])  # past the rotary dims: unchanged


def test_rotary_embedding_4d_without_position_ids():
    rng = np.random.default_rng(4)
    feeds = {"x": rand(rng, (2, 4, 3, 8)), "c": rand(rng, (2, 3, 4)), "s": rand(rng, (2, 3, 4))}
    model = one_node("RotaryEmbedding", [("x", F32, [2, 4, 3, 8]), ("c", F32, [2, 3, 4]), ("s", F32, [2, 3, 4])],
                     [("y", F32, None)], 23)
    check(model, feeds)
    assert tensorsmith.import_onnx(model).outputs[0].type.shape == (2, 4, 3, 8)


def test_causal_conv_with_state_silu_and_past():
    rng = np.random.default_rng(5)
    feeds = {"x": rand(rng, (2, 4, 5)), "w": rand(rng, (4, 1, 3)), "b": rand(rng, (4,)), "p": rand(rng, (2, 4, 2))}
    model = one_node("CausalConvWithState", [("x", F32, [2, 4, 5]), ("w", F32, [4, 1, 3]), ("b", F32, [4]),
                                             ("p", F32, [2, 4, 2])],
                     [("y", F32, None), ("state", F32, None)], 27, {"activation": "silu"})
    got = check(model, feeds)
    np.testing.assert_array_equal(got[1], feeds["x"][:, :, -2:])


@pytest.mark.parametrize("rule", ["linear", "gated_delta"])
def test_linear_attention_matches_reference(rule):
    rng = np.random.default_rng(6)
    b, t, hq, hkv, d = 2, 3, 4, 2, 4
    feeds = {"q": rand(rng, (b, t, hq * d)), "k": rand(rng, (b, t, hkv * d)), "v": rand(rng, (b, t, hkv * d))}
    ins = [("q", F32, [b, t, hq * d]), ("k", F32, [b, t, hkv * d]), ("v", F32, [b, t, hkv * d])]
    if rule == "gated_delta":
        feeds.update(s=rand(rng, (b, hkv, d, d)), g=-rng.random((b, t, hkv)).astype(np.float32),
                     be=rng.random((b, t, 1)).astype(np.float32))
        ins += [("s", F32, [b, hkv, d, d]), ("g", F32, [b, t, hkv]), ("be", F32, [b, t, 1])]
    model = one_node("LinearAttention", ins, [("y", F32, None), ("state", F32, None)], 27,
                     {"q_num_heads": hq, "kv_num_heads": hkv, "update_rule": rule})
    got = check(model, feeds, expected=ReferenceEvaluator(model).run(None, feeds))
    assert got[1].shape == (b, hkv, d, d)


def test_flex_attention_score_mod_and_gqa():
    rng = np.random.default_rng(7)
    half = helper.make_tensor("half", F32, [], [0.5])
    score_mod = helper.make_graph(
        [helper.make_node("Mul", ["s", "half"], ["o"])], "score_mod",
        [helper.make_tensor_value_info("s", F32, None)], [helper.make_tensor_value_info("o", F32, None)],
        initializer=[half])
    model = one_node("FlexAttention", [("q", F32, [1, 4, 3, 8]), ("k", F32, [1, 2, 5, 8]), ("v", F32, [1, 2, 5, 6])],
                     [("y", F32, None)], 26, {"score_mod": score_mod}, domain="ai.onnx.preview",
                     extra_opsets=[("ai.onnx.preview", 1)])
    feeds = {"q": rand(rng, (1, 4, 3, 8)), "k": rand(rng, (1, 2, 5, 8)), "v": rand(rng, (1, 2, 5, 6))}
    check(model, feeds, expected=ReferenceEvaluator(model).run(None, feeds))
    assert tensorsmith.import_onnx(model).outputs[0].type.shape == (1, 4, 3, 6)


def test_attention_runs_on_meta_tensors():
    """Shapes can be computed without data (the fallback inference path)."""
    from tensorsmith.ops import lookup
    from tensorsmith.ops.registry import RunContext
    from tensorsmith.ir import Node, Value

    node = Node("Attention", [], [Value("y"), Value("pk"), Value("pv"), Value("qk")], {"is_causal": 1}, opset=23)
    q = torch.empty((2, 4, 3, 8), device="meta")
    kv = torch.empty((2, 2, 5, 8), device="meta")
    y, pk, pv, qk = lookup("Attention").reference(RunContext(node), q, kv, kv)
    assert y.shape == (2, 4, 3, 8) and qk.shape == (2, 4, 3, 5) and pk.shape == (2, 2, 5, 8)
