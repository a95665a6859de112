"""triton.elementwise under the Triton interpreter (CPU), plus GPU tests at realistic shapes.

The CPU tests run under TRITON_INTERPRET=1 on any machine; the gpu tests compile real kernels
(an autouse fixture sets the mode per test: kernels are made lazily, and load_kernel keeps
interpreted and compiled imports of a source apart).
"""

from __future__ import annotations

import os

import torch

if not torch.cuda.is_available():
    os.environ["TRITON_INTERPRET"] = "1"  # before triton or tensorsmith's triton modules are imported

import numpy as np
import pytest

pytest.importorskip("triton")

import onnx
from onnx import TensorProto, helper

from tensorsmith.ir import Layer
from tensorsmith.tactics import LayerContext
from tensorsmith.tactics.triton.compile import load_kernel
from tensorsmith.tactics.triton.elementwise import TRITON_ELEMENTWISE as T
from tensorsmith.tactics.triton.elementwise import build_plan
from tensorsmith.testing.layers import check_tactic, layer_contexts

F, H, I32, I64, B = TensorProto.FLOAT, TensorProto.FLOAT16, TensorProto.INT32, TensorProto.INT64, TensorProto.BOOL
SMALL = {"BLOCK": 512, "num_warps": 4}

# The interpreter computes masked-off lanes too (on zeros): a Div there warns, harmlessly.
pytestmark = pytest.mark.filterwarnings("ignore::RuntimeWarning")


@pytest.fixture(autouse=True)
def _triton_mode(request, monkeypatch):
    monkeypatch.setenv("TRITON_INTERPRET", "0" if request.node.get_closest_marker("gpu") else "1")


def _model(nodes, inputs, outputs, inits=(), opset=17):
    g = helper.make_graph(
        [helper.make_node(op, ins, outs, name=f"n{i}", **attrs) for i, (op, ins, outs, attrs) in enumerate(nodes)],
        "g",
        [helper.make_tensor_value_info(n, t, s) for n, t, s in inputs],
        [helper.make_tensor_value_info(n, t, None) for n, t in outputs],
        initializer=[onnx.numpy_helper.from_array(np.asarray(a), n) for n, a in inits],
    )
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", opset)])


def _n(op, ins, outs, **attrs):
    return (op, ins, outs if isinstance(outs, list) else [outs], attrs)


def _elementwise(model, precision="fp32", device="cpu"):
    lcs = [lc for lc in layer_contexts(model, device=device, precision=precision) if lc.layer.kind == "elementwise"]
    assert lcs, "no elementwise layer"
    return max(lcs, key=lambda lc: len(lc.nodes))


def _merged(model, precision="fp32"):
    """One elementwise Layer of all the graph's nodes (a multi-output DAG)."""
    lcs = layer_contexts(model, precision=precision)
    graph = lcs[0].graph
    layer = Layer("all", "elementwise", list(graph.nodes))
    weights = {v.name: graph.initializers[v.name] for v in layer.weights(graph)}
    return LayerContext(layer, graph, weights, torch.device("cpu"), lcs[0].dtype)


def _check(lc, configs=None):
    assert T.applies(lc), build_plan(lc)
    for cfg in configs or [SMALL]:
        assert check_tactic(T, lc, cfg) <= 0, (cfg, build_plan(lc).source)


rng = np.random.default_rng(0)


def test_load_kernel_keeps_interpreted_and_compiled_apart():
    src = "import triton\n\n\n@triton.jit\ndef k2(x):\n    pass\n"
    interpreted = load_kernel(src, "k2")
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("TRITON_INTERPRET", "0")
        compiled = load_kernel(src, "k2")
    assert type(interpreted).__name__ == "InterpretedFunction"
    assert compiled is not interpreted and type(compiled).__name__ == "JITFunction"
    assert load_kernel(src, "k2") is interpreted


def test_load_kernel_caches_and_runs():
    src = ("import triton\nimport triton.language as tl\n\n\n@triton.jit\n"
           "def k(x, y, n, BLOCK: tl.constexpr):\n"
           "    o = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)\n"
           "    tl.store(y + o, tl.load(x + o, mask=o < n) * 3.0, mask=o < n)\n")
    k = load_kernel(src, "k")
    assert load_kernel(src, "k") is k
    x = torch.randn(100)
    y = torch.empty_like(x)
    k[(2,)](x, y, 100, BLOCK=64)
    torch.testing.assert_close(y, 3 * x)
    with pytest.raises(AttributeError):
        load_kernel(src, "missing")


def test_load_kernel_is_thread_safe():
    import uuid
    from concurrent.futures import ThreadPoolExecutor

    src = ("import triton\nimport triton.language as tl\n\n\n@triton.jit\n"
           f"def k(x):  # {uuid.uuid4().hex}\n    pass\n")
    with ThreadPoolExecutor(8) as ex:
        ks = list(ex.map(lambda _: load_kernel(src, "k"), range(16)))
    assert all(k is ks[0] for k in ks)


def test_chain_of_unary_and_binary_ops():
    m = _model(
        [_n("Mul", ["x", "y"], "a"), _n("Add", ["a", "s"], "b"), _n("Sigmoid", ["b"], "c"), _n("Mul", ["c", "x"], "d"),
         _n("Tanh", ["d"], "e"), _n("Sub", ["e", "y"], "f"), _n("Relu", ["f"], "g"), _n("Exp", ["g"], "h"),
         _n("Div", ["h", "z"], "i"), _n("Gelu", ["i"], "o", ), _n("Abs", ["o"], "p"), _n("Sqrt", ["p"], "q"),
         _n("LeakyRelu", ["q"], "r", alpha=0.2), _n("Pow", ["r", "two"], "t"), _n("Neg", ["t"], "u")],
        [("x", F, [2, 3, 5, 7]), ("y", F, [2, 3, 5, 7]), ("z", F, [2, 3, 5, 7])], [("u", F)],
        [("s", np.array(0.5, np.float32)), ("two", np.array(2.0, np.float32))], opset=20)
    lc = _elementwise(m)
    assert len(lc.nodes) >= 10
    _check(lc, [SMALL, {"BLOCK": 1024, "num_warps": 8}])


def test_round_and_hyperbolic_ops():
    m = _model([_n("Mul", ["x", "k"], "a"), _n("Round", ["a"], "b"), _n("Sinh", ["x"], "c"), _n("Add", ["b", "c"], "d"),
                _n("Cosh", ["x"], "e"), _n("Add", ["d", "e"], "f"), _n("Asinh", ["x"], "g"), _n("Add", ["f", "g"], "o")],
               [("x", F, [3, 50])], [("o", F)], [("k", np.array(2.5, np.float32))])
    lcs = [lc for lc in layer_contexts(m) if lc.layer.kind == "elementwise"]
    for lc in lcs:
        _check(lc)


@pytest.mark.parametrize("xshape,bshape", [
    ([2, 4, 3, 5], [4, 1, 1]),      # conv-style bias
    ([2, 3, 8], [8]),               # [D] against [B,S,D]
    ([2, 3, 8], [3, 1]),            # middle dim
    ([2, 4, 3, 5], [2, 1, 3, 1]),   # two separate broadcast runs
    ([2, 4, 3, 5], []),             # scalar activation
    ([6, 5], [1, 1]),
    ([2, 3, 1, 4, 2, 3], [3, 5, 1, 1, 3]),  # rank 6, the input grows the output too
])
def test_broadcast_input(xshape, bshape):
    m = _model([_n("Add", ["x", "b"], "a"), _n("Mul", ["a", "b"], "c"), _n("Relu", ["c"], "o")],
               [("x", F, xshape), ("b", F, bshape)], [("o", F)])
    _check(_elementwise(m))


def test_broadcast_both_ways_output_bigger_than_inputs():
    m = _model([_n("Add", ["a", "b"], "c"), _n("Sigmoid", ["c"], "o")],
               [("a", F, [2, 1, 5]), ("b", F, [1, 4, 1])], [("o", F)])
    lc = _elementwise(m)
    _check(lc)
    assert "offs" in build_plan(lc).source


def test_broadcast_weights_and_intermediate():
    w = rng.standard_normal((4, 1, 1)).astype(np.float32)
    v = rng.standard_normal((5,)).astype(np.float32)
    m = _model([_n("Mul", ["w", "k"], "wk"), _n("Add", ["x", "wk"], "a"), _n("Mul", ["a", "v"], "c"),
                _n("Sub", ["c", "y"], "o")],
               [("x", F, [2, 4, 3, 5]), ("y", F, [3, 5]), ("k", F, [1])], [("o", F)],
               [("w", w), ("v", v)])
    _check(_elementwise(m))


def test_where_with_bool_condition_and_comparisons():
    m = _model([_n("Greater", ["x", "y"], "g"), _n("And", ["g", "c"], "gc"), _n("Where", ["gc", "x", "ninf"], "o")],
               [("x", F, [2, 3, 16]), ("y", F, [16]), ("c", B, [2, 1, 16])], [("o", F)],
               [("ninf", np.array(-1e4, np.float32))])
    _check(_elementwise(m))


def test_where_with_infinite_scalar_and_clip():
    m = _model([_n("LessOrEqual", ["x", "y"], "c"), _n("Where", ["c", "x", "ninf"], "a"), _n("Clip", ["a", "lo", "hi"], "o")],
               [("x", F, [3, 17]), ("y", F, [3, 17])], [("o", F)],
               [("ninf", np.array(-np.inf, np.float32)), ("lo", np.array(-0.5, np.float32)),
                ("hi", np.array(0.7, np.float32))])
    _check(_elementwise(m))


def test_huge_layer_uses_int64_offsets():
    m = _model([_n("Add", ["x", "b"], "o")], [("x", F, [2**16, 2**16]), ("b", F, [2**16])], [("o", F)])
    lc = _elementwise(m)
    src = build_plan(lc).source
    assert "tl.program_id(0).to(tl.int64)" in src


def test_comparison_output_is_bool():
    m = _model([_n("Mul", ["x", "y"], "a"), _n("Less", ["a", "half"], "o")],
               [("x", F, [4, 33]), ("y", F, [4, 33])], [("o", B)], [("half", np.array(0.5, np.float32))])
    lc = _elementwise(m)
    assert lc.outputs[0].type.dtype.torch == torch.bool
    _check(lc)
    out = T.compile(lc, SMALL)([torch.ones(4, 33), torch.zeros(4, 33)])[0]
    assert out.dtype == torch.bool and bool(out.all())


def test_not_and_isnan_bool_chain():
    m = _model([_n("IsNaN", ["x"], "n"), _n("Not", ["n"], "ok"), _n("Cast", ["ok"], "f", to=F),
                _n("Where", ["ok", "x", "f"], "o")],
               [("x", F, [3, 40])], [("o", F)])
    for lc in [l for l in layer_contexts(m) if l.layer.kind == "elementwise"]:
        _check(lc)
    lc = _merged(m)
    _check(lc)
    x = torch.randn(3, 40)
    x[0, 0] = float("nan")
    got = T.compile(lc, SMALL)([x])[0]
    assert got[0, 0] == 0 and torch.equal(got[1:], x[1:])


def test_casts():
    m = _model([_n("Mul", ["x", "ten"], "a"), _n("Cast", ["a"], "i", to=I32), _n("Cast", ["i"], "f", to=F),
                _n("Cast", ["x"], "h", to=H), _n("Cast", ["h"], "hf", to=F), _n("Add", ["f", "hf"], "s"),
                _n("Cast", ["s"], "bb", to=B), _n("Cast", ["bb"], "bf", to=F), _n("Add", ["s", "bf"], "o")],
               [("x", F, [2, 50])], [("o", F)], [("ten", np.array(10.0, np.float32))])
    _check(_elementwise(m))


def test_integer_ops():
    m = _model([_n("Add", ["a", "b"], "c"), _n("Mul", ["c", "three"], "d"), _n("Div", ["d", "two"], "e"),
                _n("Mod", ["e", "five"], "f"), _n("Max", ["f", "b"], "g"), _n("Sub", ["g", "a"], "h"),
                _n("Neg", ["h"], "o")],
               [("a", I32, [3, 20]), ("b", I32, [20])], [("o", I32)],
               [("three", np.array(3, np.int32)), ("two", np.array(-2, np.int32)), ("five", np.array(5, np.int32))])
    _check(_elementwise(m))


def test_int64_mask_to_float():
    # attention-mask style: (1 - mask) * -10000 + scores
    m = _model([_n("Cast", ["mask"], "mf", to=F), _n("Sub", ["one", "mf"], "inv"), _n("Mul", ["inv", "big"], "neg"),
                _n("Add", ["s", "neg"], "o")],
               [("mask", I64, [2, 1, 1, 8]), ("s", F, [2, 3, 4, 8])], [("o", F)],
               [("one", np.array(1.0, np.float32)), ("big", np.array(-1e4, np.float32))])
    _check(_elementwise(m))


@pytest.mark.parametrize("precision", ["fp16", "bf16"])
def test_half_layers(precision):
    b = rng.standard_normal((4, 1, 1)).astype(np.float32)
    m = _model([_n("Add", ["x", "b"], "a"), _n("Sigmoid", ["a"], "s"), _n("Mul", ["s", "y"], "c"), _n("Relu", ["c"], "o")],
               [("x", F, [2, 4, 3, 5]), ("y", F, [2, 4, 3, 5])], [("o", F)], [("b", b)])
    lc = _elementwise(m, precision=precision)
    assert lc.dtype == {"fp16": torch.float16, "bf16": torch.bfloat16}[precision]
    assert any(n.op_type == "Cast" for n in lc.nodes)
    _check(lc, [SMALL, {"BLOCK": 1024, "num_warps": 4}])


def test_fp16_half_inputs_and_outputs():
    m = _model([_n("Mul", ["x", "y"], "a"), _n("Add", ["a", "x"], "o")],
               [("x", H, [3, 70]), ("y", H, [70])], [("o", H)])
    lc = _elementwise(m, precision="fp16")
    _check(lc)


def test_multi_output_layer():
    # Outputs of several shapes: the full one, an intermediate read twice, and a smaller one.
    m = _model([_n("Exp", ["b"], "eb"), _n("Add", ["x", "eb"], "a"), _n("Relu", ["a"], "r"), _n("Mul", ["r", "a"], "o"),
                _n("Greater", ["a", "y"], "g")],
               [("x", F, [2, 4, 6]), ("b", F, [4, 1]), ("y", F, [2, 4, 6])], [("o", F), ("eb", F), ("g", B), ("a", F)])
    lc = _merged(m)
    assert len(lc.outputs) == 4
    _check(lc)
    feeds = {"x": torch.randn(2, 4, 6), "b": torch.randn(4, 1), "y": torch.randn(2, 4, 6)}
    got = T.compile(lc, SMALL)([feeds[v.name] for v in lc.inputs])
    shapes = {v.name: (tuple(t.shape), t.dtype) for v, t in zip(lc.outputs, got)}
    assert shapes == {"o": ((2, 4, 6), torch.float32), "eb": ((4, 1), torch.float32),
                      "g": ((2, 4, 6), torch.bool), "a": ((2, 4, 6), torch.float32)}
    torch.testing.assert_close(got[[v.name for v in lc.outputs].index("eb")], feeds["b"].exp())


def test_multi_output_with_a_scalar_output():
    m = _model([_n("Exp", ["s"], "es"), _n("Mul", ["x", "es"], "o")], [("x", F, [3, 40]), ("s", F, [1])],
               [("o", F), ("es", F)])
    lc = _merged(m)
    assert "offs * 0" in build_plan(lc).source
    _check(lc)


def test_multi_output_fp16():
    m = _model([_n("Add", ["x", "y"], "a"), _n("Tanh", ["a"], "t"), _n("Mul", ["t", "y"], "o")],
               [("x", F, [3, 40]), ("y", F, [40])], [("o", F), ("t", F)])
    _check(_merged(m, precision="fp16"))


def test_single_node_layer_applies():
    m = _model([_n("Relu", ["x"], "o")], [("x", F, [5, 7])], [("o", F)])
    lc = _elementwise(m)
    assert len(lc.nodes) == 1
    _check(lc)


def test_configs():
    m = _model([_n("Relu", ["x"], "o")], [("x", F, [5, 7])], [("o", F)])
    cfgs = T.configs(_elementwise(m))
    assert cfgs == [{"BLOCK": 512, "num_warps": 4}]
    m = _model([_n("Relu", ["x"], "o")], [("x", F, [64, 256, 56, 56])], [("o", F)])
    lc = _elementwise(m)
    cfgs = T.configs(lc)
    assert 2 <= len(cfgs) <= 8 and all(c["BLOCK"] in (512, 1024, 2048, 4096) and c["num_warps"] in (4, 8) for c in cfgs)


def test_source_is_shared_between_identical_layers_and_configs():
    m = _model([_n("Add", ["x", "b"], "a"), _n("Relu", ["a"], "o")], [("x", F, [2, 4, 3, 5]), ("b", F, [4, 1, 1])],
               [("o", F)])
    src = build_plan(_elementwise(m)).source
    assert src == build_plan(_elementwise(m)).source
    assert "BLOCK: tl.constexpr" in src and "% 4" in src


def test_does_not_apply():
    conv_w = rng.standard_normal((4, 3, 3, 3)).astype(np.float32)
    conv = _model([_n("Conv", ["x", "w"], "o")], [("x", F, [1, 3, 8, 8])], [("o", F)], [("w", conv_w)])
    lc = layer_contexts(conv)[0]
    assert lc.layer.kind == "convolution" and not T.applies(lc)

    atan = _model([_n("Atan", ["x"], "o")], [("x", F, [4, 4])], [("o", F)])  # no Triton expression
    assert not T.applies(_elementwise(atan))

    f64 = _model([_n("Relu", ["x"], "o")], [("x", TensorProto.DOUBLE, [4, 4])], [("o", TensorProto.DOUBLE)])
    assert not T.applies(_elementwise(f64))

    ipow = _model([_n("Pow", ["x", "y"], "o")], [("x", I32, [4, 4]), ("y", I32, [4, 4])], [("o", I32)])
    assert not T.applies(_elementwise(ipow))

    relu = _model([_n("Relu", ["x"], "o")], [("x", F, [4, 4])], [("o", F)])
    lc = _elementwise(relu)
    assert T.applies(lc)
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("TRITON_INTERPRET", "0")
        assert not T.applies(lc)  # a CPU device without the interpreter


# -- GPU ---------------------------------------------------------------------------------------


def _gpu_models():
    b = rng.standard_normal((256, 1, 1)).astype(np.float32)
    v = rng.standard_normal((768,)).astype(np.float32)
    yield _model([_n("Add", ["x", "b"], "a"), _n("Add", ["a", "r"], "c"), _n("Relu", ["c"], "o")],
                 [("x", F, [32, 256, 56, 56]), ("r", F, [32, 256, 56, 56])], [("o", F)], [("b", b)])
    yield _model([_n("Add", ["x", "v"], "a"), _n("Gelu", ["a"], "o")], [("x", F, [8, 512, 768])], [("o", F)],
                 [("v", v)], opset=20)
    yield _model([_n("Greater", ["x", "y"], "g"), _n("Where", ["g", "x", "ninf"], "o")],
                 [("x", F, [8, 12, 128, 128]), ("y", F, [128])], [("o", F)], [("ninf", np.array(-1e4, np.float32))])
    yield _model([_n("Cast", ["m"], "mf", to=F), _n("Mul", ["mf", "big"], "n"), _n("Add", ["s", "n"], "o")],
                 [("m", I64, [8, 1, 1, 128]), ("s", F, [8, 12, 128, 128])], [("o", F)],
                 [("big", np.array(-1e4, np.float32))])


@pytest.mark.gpu
@pytest.mark.parametrize("precision", ["fp32", "fp16"])
def test_gpu_realistic(precision):
    for m in _gpu_models():
        lc = _elementwise(m, precision=precision, device="cuda")
        assert T.applies(lc)
        for cfg in T.configs(lc):
            assert check_tactic(T, lc, cfg) <= 0, cfg


@pytest.mark.gpu
def test_gpu_multi_output_and_bool():
    m = _model([_n("Add", ["x", "b"], "a"), _n("Relu", ["a"], "r"), _n("Greater", ["a", "y"], "g")],
               [("x", F, [16, 64, 32, 32]), ("b", F, [64, 1, 1]), ("y", F, [16, 64, 32, 32])],
               [("r", F), ("g", B), ("a", F)])
    lcs = layer_contexts(m, device="cuda")
    graph = lcs[0].graph
    layer = Layer("all", "elementwise", list(graph.nodes))
    lc = LayerContext(layer, graph, {}, torch.device("cuda"), torch.float32)
    assert T.applies(lc)
    for cfg in T.configs(lc):
        assert check_tactic(T, lc, cfg) <= 0, cfg
