"""Property: whatever bytes a model file holds, only typed errors escape, and nothing hangs."""

import signal

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import tensorsmith
from tensorsmith.errors import TensorsmithError

from ..conftest import make_mlp_model

SEED_BYTES = make_mlp_model().SerializeToString()
PER_EXAMPLE_LIMIT_S = 10


class Hang(Exception):
    pass


def _alarm(signum, frame):
    raise Hang(f"build+run took more than {PER_EXAMPLE_LIMIT_S} s")


mutations = st.lists(
    st.tuples(st.sampled_from(["flip", "set", "insert", "delete"]), st.integers(0, len(SEED_BYTES) - 1), st.integers(0, 255)),
    min_size=1, max_size=8,
)


def mutate(data: bytes, ops, truncate: int | None) -> bytes:
    b = bytearray(data)
    for kind, pos, val in ops:
        pos %= max(1, len(b))
        if kind == "flip":
            b[pos] ^= 1 << (val % 8)
        elif kind == "set":
            b[pos] = val
        elif kind == "insert":
            b.insert(pos, val)
        elif kind == "delete" and b:
            del b[pos]
    if truncate is not None:
        b = b[: truncate % (len(b) + 1)]
    return bytes(b)


def build_and_run(data: bytes) -> None:
    engine = tensorsmith.build(data)
    feeds = {}
    for spec in engine.inputs:
        shape = [d if isinstance(d, int) else 2 for d in (spec.type.shape or ())]
        if int(np.prod(shape)) > 1 << 16 or spec.type.dtype is None:
            return
        feeds[spec.name] = np.ones(shape, dtype=_np_dtype(spec.type.dtype))
    engine.run(feeds)


def _np_dtype(dt):
    import torch

    return torch.empty(0, dtype=dt.torch).numpy().dtype


@pytest.mark.slow
@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow], derandomize=True)
@given(ops=mutations, truncate=st.one_of(st.none(), st.integers(0, len(SEED_BYTES))))
def test_mutated_model_bytes_raise_only_typed_errors(ops, truncate):
    data = mutate(SEED_BYTES, ops, truncate)
    old = signal.signal(signal.SIGALRM, _alarm)
    signal.alarm(PER_EXAMPLE_LIMIT_S)
    try:
        build_and_run(data)
    except TensorsmithError:
        pass
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, old)
