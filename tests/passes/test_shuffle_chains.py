"""Shuffle chains as one permutation, row permutations moved past row-wise ops, attention scales folded."""

import numpy as np
import pytest
import torch

import tensorsmith
from tensorsmith.ops import RunContext, lookup
from tensorsmith.passes import run_passes
from tensorsmith.passes.attention import attention_scale_folding
from tensorsmith.passes.shuffle_chains import gemm_to_matmul, rowwise_shuffle_sinking, shuffle_chain_simplification

from . import graphgen
from .graphgen import Builder
from .test_passes import apply

SHUFFLES = {"Reshape", "Transpose", "Squeeze", "Unsqueeze", "Flatten"}


def _model(block, shape, seed=0):
    b = Builder(np.random.default_rng(seed))
    out = b.op("Identity", [block(b, "x")])
    x = np.random.default_rng(seed + 1).standard_normal(shape).astype(np.float32)
    return tensorsmith.import_onnx(b.model([("x", list(shape))], out)), {"x": x}


def _random_chain(rng, shape):
    """Two or three Reshape + Transpose pairs; each Reshape regroups the current prime factors
    (always expressible as atoms), so the result has a random shape and order."""
    def block(b, x):
        factors = [f for d in shape for f in _factor(d)]
        for _ in range(rng.integers(2, 4)):
            groups = _random_groups(rng, factors)
            x = b.op("Reshape", [x, b.const(np.array([int(np.prod(g)) for g in groups], np.int64))])
            perm = [int(i) for i in rng.permutation(len(groups))]
            x = b.op("Transpose", [x], perm=perm)
            factors = [f for i in perm for f in groups[i]]
        return x
    return block


def _factor(n):
    out = []
    for p in (2, 3):
        while n % p == 0:
            out.append(p)
            n //= p
    assert n == 1
    return out


def _random_groups(rng, factors):
    cuts = sorted(rng.choice(range(1, len(factors)), size=rng.integers(1, 4), replace=False))
    return [factors[a:b] for a, b in zip([0, *cuts], [*cuts, len(factors)])]


@pytest.mark.parametrize("seed", range(12))
def test_a_random_chain_becomes_at_most_three_nodes(seed):
    rng = np.random.default_rng(seed)
    g, feeds = _model(_random_chain(rng, (4, 6, 9)), (4, 6, 9), seed)
    n_before = sum(n.op_type in SHUFFLES for n in g.nodes)
    apply(g, feeds, shuffle_chain_simplification)
    n_after = sum(n.op_type in SHUFFLES for n in g.nodes)
    assert n_after <= 3 < n_before


def test_a_chain_that_undoes_itself_disappears():
    def block(b, x):
        r = b.op("Reshape", [x, b.const(np.array([2, 3, 2, 5], np.int64))])
        r = b.op("Transpose", [b.op("Transpose", [r], perm=[2, 0, 3, 1])], perm=[1, 3, 0, 2])
        return b.op("Reshape", [r, b.const(np.array([6, 10], np.int64))])
    g, feeds = _model(block, (6, 10))
    assert apply(g, feeds, shuffle_chain_simplification) == ["Identity"]


def test_a_reshape_across_factors_is_left_as_it_is():
    def block(b, x):  # [4,6] -> [6,4] -> [8,3]: 8 cuts the transposed 6 x 4 at no factor boundary
        t = b.op("Transpose", [x], perm=[1, 0])
        return b.op("Relu", [b.op("Reshape", [t, b.const(np.array([8, 3], np.int64))])])
    g, _ = _model(block, (4, 6))
    assert not shuffle_chain_simplification(g)
    assert [n.op_type for n in g.nodes] == ["Transpose", "Reshape", "Relu", "Identity"]


def test_a_row_permutation_moves_past_matmul_and_bias_and_cancels():
    def block(b, x):
        t = b.op("Transpose", [x], perm=[1, 0, 2])
        y = b.op("Add", [b.rand((7,)), b.op("MatMul", [t, b.rand((graphgen.D, 7))])])
        return b.op("Transpose", [b.op("Relu", [y])], perm=[1, 0, 2])
    g, feeds = _model(block, (2, 5, graphgen.D))
    types = apply(g, feeds, rowwise_shuffle_sinking, rowwise_shuffle_sinking, rowwise_shuffle_sinking,
                  shuffle_chain_simplification)
    assert types == ["MatMul", "Add", "Relu", "Identity"]


def test_a_constant_that_varies_along_rows_stops_the_move():
    def block(b, x):
        t = b.op("Transpose", [x], perm=[1, 0, 2])
        return b.op("Add", [t, b.rand((5, 1, graphgen.D))])  # varies along dim 0 of t
    g, _ = _model(block, (2, 5, graphgen.D))
    assert not rowwise_shuffle_sinking(g)


def test_a_gemm_fed_by_a_row_permutation_becomes_matmul_and_add():
    def block(b, x):
        r = b.op("Reshape", [b.op("Transpose", [x], perm=[1, 0, 2]), b.const(np.array([10, graphgen.D], np.int64))])
        return b.op("Gemm", [r, b.rand((4, graphgen.D)), b.rand((4,))], transB=1)
    g, feeds = _model(block, (2, 5, graphgen.D))
    assert "MatMul" in apply(g, feeds, gemm_to_matmul)


def test_a_plain_gemm_stays_a_gemm():
    def block(b, x):
        return b.op("Gemm", [b.op("Flatten", [x]), b.rand((4, 10)), b.rand((4,))], transB=1)
    g, _ = _model(block, (2, 5, 2))
    assert not gemm_to_matmul(g)


def test_attention_scale_folding_absorbs_q_and_k_multipliers():
    g, feeds = _model(graphgen.attention_torch_mha, (2, 5, graphgen.D))
    run_passes(g, disable=["attention_scale_folding", "layer_fusion"])
    attn = next(n for n in g.nodes if n.op_type == "Attention")
    before = float(attn.attrs["scale"])
    types = apply(g, feeds, attention_scale_folding)
    assert "Mul" not in types
    # Q and K^T were each scaled by hd^-1/4: together the usual hd^-1/2
    assert before != pytest.approx(attn.attrs["scale"]) == (graphgen.D // graphgen.H) ** -0.5


def _copies(graph, feeds):
    """Names of the shuffle nodes whose result is not a view of their input, running the graph
    op by op as the GPU plan does: PyTorch references, and a Gather of one constant index as
    `select` (the torch.view tactic)."""
    env = {k: torch.from_numpy(v) for k, v in feeds.items()}
    env.update(graph.initializers)
    copies = []
    for node in graph.nodes:
        args = [env[v.name] if v is not None else None for v in node.inputs]
        if node.op_type == "Gather" and node.inputs[1].name in graph.initializers and args[1].dim() == 0:
            res = (args[0].select(node.attrs.get("axis", 0), int(args[1])),)
        else:
            res = lookup(node.op_type, node.domain, node.opset, node.name).reference(RunContext(node), *args)
            res = res if isinstance(res, (tuple, list)) else (res,)
        env.update((v.name, t) for v, t in zip(node.outputs, res))
        if node.op_type in SHUFFLES | {"Gather"}:
            src = env[node.inputs[0].name]
            if res[0].untyped_storage().data_ptr() != src.untyped_storage().data_ptr():
                copies.append(node.op_type)
    return copies


def test_torch_multihead_attention_reaches_attention_through_views():
    """torch's packed-projection export: before, every head reshape of a transposed tensor
    copied; after the pipeline Q, K and V are views of the projection's output."""
    g, feeds = _model(graphgen.attention_torch_mha, (2, 5, graphgen.D))
    assert len(_copies(g, feeds)) >= 4
    run_passes(g, disable=["layer_fusion"])
    types = [n.op_type for n in g.nodes]
    assert types.count("Attention") == 1 and "Mul" not in types and "Gemm" not in types
    # One copy is left on the CPU: the reference Attention writes [B,H,S,hd] contiguous, and the
    # head merge after it reorders that (the GPU kernel writes [B,S,H,hd] memory, where it is a view).
    assert _copies(g, feeds) == ["Reshape"]


def test_torch_multihead_attention_export_keeps_its_outputs():
    pytest.importorskip("onnx")
    torch.manual_seed(0)

    class Block(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.mha = torch.nn.MultiheadAttention(16, 4, batch_first=True)

        def forward(self, x):
            return self.mha(x, x, x, need_weights=False)[0]

    import io
    x = torch.randn(3, 7, 16)
    block = Block().eval()
    f = io.BytesIO()
    torch.onnx.export(block, (x,), f, input_names=["x"], output_names=["y"], dynamo=False, opset_version=17)
    engine = tensorsmith.build(f.getvalue())
    shuffles = [n.op_type for n in engine.plan.graph.nodes if n.op_type in SHUFFLES]
    assert len(shuffles) <= 10  # was 20: five reshapes or transposes per head tensor
    got = engine.run({"x": x.numpy()})["y"]
    with torch.inference_mode():
        want = block(x).numpy()
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-5)
