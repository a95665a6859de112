"""Property: every pass, and the whole pipeline at every level, keeps what a graph computes."""

import numpy as np
import pytest
import torch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import tensorsmith
from tensorsmith.ops.interpreter import run_graph
from tensorsmith.passes import MAX_OPT_LEVEL, run_passes

from .graphgen import CNN_BLOCKS, SEQ_BLOCKS, random_model

# float32 on random inputs of magnitude ~1: folded weights and fused ops round differently.
RTOL, ATOL = 1e-4, 1e-5


def _outputs(graph, feeds):
    with torch.inference_mode():
        return [t.numpy().copy() for t in run_graph(graph, {k: torch.from_numpy(v) for k, v in feeds.items()})]


def _check_all_passes(model, feeds, level):
    graph = tensorsmith.import_onnx(model)
    expected = _outputs(graph, feeds)

    def check(name, g):
        tensorsmith.ir.verify(g)
        for got, want in zip(_outputs(g, feeds), expected):
            np.testing.assert_allclose(got, want, rtol=RTOL, atol=ATOL, err_msg=f"after pass {name}\n{g}")

    run_passes(graph, opt_level=level, after_each=check)
    check("pipeline", graph)
    return graph


families = st.sampled_from(["cnn", "seq"])


@pytest.mark.slow
@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow], derandomize=True)
@given(family=families, blocks=st.lists(st.integers(0, 20), min_size=1, max_size=6), seed=st.integers(0, 2**16),
       level=st.integers(0, MAX_OPT_LEVEL))
def test_random_graphs_keep_their_outputs(family, blocks, seed, level):
    model, feeds = random_model(family, blocks, seed)
    _check_all_passes(model, feeds, level)


@pytest.mark.parametrize("family,table", [("cnn", CNN_BLOCKS), ("seq", SEQ_BLOCKS)])
def test_every_block_alone_at_full_level(family, table):
    for i in range(len(table)):
        model, feeds = random_model(family, [i, i], seed=i)
        _check_all_passes(model, feeds, MAX_OPT_LEVEL)
