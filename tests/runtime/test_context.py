"""Execution contexts: shared weights, own state, threads and streams, profiles and dynamic shapes."""

import threading

import numpy as np
import pytest
import torch

import tensorsmith
from tensorsmith.errors import InputError, ProfileError, ShapeOutOfProfileError
from tests.conftest import make_mlp_model
from tests.runtime.layered import build_layered

PROFILES = [{"x": {"min": (1, 4), "opt": (8, 4), "max": (32, 4)}},
            {"x": {"min": (33, 4), "opt": (48, 4), "max": (64, 4)}}]


@pytest.fixture(scope="module")
def reference():
    return tensorsmith.build(make_mlp_model(), opt_level=0)


@pytest.fixture(scope="module", params=["op_by_op", "layers"])
def engine(request):
    if request.param == "op_by_op":
        return tensorsmith.build(make_mlp_model(), profiles=PROFILES)
    return build_layered(make_mlp_model(), profiles=PROFILES)


def _x(n, seed=0):
    return np.random.default_rng(seed).standard_normal((n, 4)).astype(np.float32)


def test_execute_takes_and_returns_device_tensors(engine, reference):
    ctx = engine.create_execution_context()
    x = torch.from_numpy(_x(5))
    out = ctx.execute({"x": x})
    assert isinstance(out["y"], torch.Tensor) and out["y"].device == x.device
    np.testing.assert_allclose(out["y"].numpy(), reference.run({"x": _x(5)})["y"], rtol=1e-5, atol=1e-5)


def test_run_numpy(engine, reference):
    out = engine.create_execution_context().run_numpy({"x": _x(3)})
    assert isinstance(out["y"], np.ndarray)
    np.testing.assert_allclose(out["y"], reference.run({"x": _x(3)})["y"], rtol=1e-5, atol=1e-5)


def test_contexts_share_the_engines_weights(engine):
    a, b = engine.create_execution_context(), engine.create_execution_context()
    assert a.engine is b.engine is engine
    if engine.plan.layers:
        a.execute({"x": torch.from_numpy(_x(8))})
        b.execute({"x": torch.from_numpy(_x(8))})
        (ex,) = [e for k, e in engine._executors.items() if k[1] == (("x", (8, 4)),)]
        assert all(ex.constants.get(n) is None or ex.constants[n] is engine._weights[n] for n in ex.constants)


def test_two_contexts_in_two_threads(engine, reference):
    errors, barrier = [], threading.Barrier(2)

    def worker(seed):
        ctx = engine.create_execution_context()
        barrier.wait()
        try:
            for i in range(30):
                n = 1 + (seed * 7 + i) % 60
                x = _x(n, seed * 100 + i)
                got = ctx.execute({"x": torch.from_numpy(x)})["y"].numpy()
                np.testing.assert_allclose(got, reference.run({"x": x})["y"], rtol=1e-5, atol=1e-5)
        except Exception as e:  # reported by the main thread
            errors.append(e)

    threads = [threading.Thread(target=worker, args=(s,)) for s in (1, 2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors, errors


def test_profile_is_chosen_by_shape(engine):
    assert engine.select_profile({"x": (4, 4)}) == 0
    assert engine.select_profile({"x": (40, 4)}) == 1


def test_shape_outside_every_profile_names_input_shape_and_ranges(engine):
    ctx = engine.create_execution_context()
    with pytest.raises(ShapeOutOfProfileError, match=r"input 'x' has shape \[65, 4\].*profile 0: min \[1, 4\] opt "
                                                     r"\[8, 4\] max \[32, 4\]; profile 1: min \[33, 4\]"):
        ctx.execute({"x": torch.zeros(65, 4)})


def test_set_profile(engine, reference):
    ctx = engine.create_execution_context()
    ctx.set_profile(1)
    np.testing.assert_allclose(ctx.run_numpy({"x": _x(40)})["y"], reference.run({"x": _x(40)})["y"], rtol=1e-5, atol=1e-5)
    with pytest.raises(ShapeOutOfProfileError, match="selected profile.*set_profile"):
        ctx.execute({"x": torch.zeros(4, 4)})
    with pytest.raises(InputError, match="profile 2 does not exist.*0..1"):
        ctx.set_profile(2)
    ctx.set_profile(None)
    ctx.execute({"x": torch.zeros(4, 4)})


def test_specializations_are_cached_and_bounded():
    engine = build_layered(make_mlp_model(), profiles=PROFILES[:1])
    engine.max_specializations = 3
    for n in range(1, 10):
        engine.run({"x": _x(n)})
    assert len(engine._executors) == 3
    first = engine.executor_for(0, {"x": (9, 4)})
    assert engine.executor_for(0, {"x": (9, 4)}) is first


@pytest.mark.parametrize("bad, match", [
    ({"y": {"min": (1, 4), "opt": (1, 4), "max": (1, 4)}}, "names 'y', which is not an input"),
    ({"x": {"min": (4, 4), "opt": (2, 4), "max": (8, 4)}}, "min <= opt <= max"),
    ({"x": {"min": (1, 3), "opt": (1, 4), "max": (1, 4)}}, "dim 1 is fixed at 4"),
    ({"x": {"min": (1,), "opt": (1,), "max": (1,)}}, "rank 1"),
    ({"x": {"min": (1, 4)}}, "give 'min', 'opt' and 'max'"),
])
def test_bad_profiles_are_typed(bad, match):
    with pytest.raises(ProfileError, match=match):
        tensorsmith.build(make_mlp_model(), profiles=[bad])


def test_device_memory_is_gpu_only(engine):
    if torch.cuda.is_available():
        pytest.skip("CPU behaviour")
    with pytest.raises(tensorsmith.errors.TensorsmithError, match="needs a CUDA GPU"):
        tensorsmith.DeviceMemory()


@pytest.mark.gpu
def test_two_contexts_two_streams_two_threads_on_gpu(tmp_path):
    engine = tensorsmith.build(make_mlp_model(), target="cuda", profiles=PROFILES)
    reference = tensorsmith.build(make_mlp_model(), opt_level=0)
    errors, barrier = [], threading.Barrier(2)

    def worker(seed):
        ctx, stream = engine.create_execution_context(), torch.cuda.Stream()
        barrier.wait()
        try:
            for i in range(20):
                n = 1 + (seed * 7 + i) % 60
                x = _x(n, seed * 100 + i)
                with torch.cuda.stream(stream):
                    xd = torch.from_numpy(x).to("cuda", non_blocking=True)
                out = ctx.execute({"x": xd}, stream=stream)["y"]
                stream.synchronize()
                np.testing.assert_allclose(out.cpu().numpy(), reference.run({"x": x})["y"], rtol=1e-3, atol=1e-3)
        except Exception as e:
            errors.append(e)

    threads = [threading.Thread(target=worker, args=(s,)) for s in (1, 2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors, errors


@pytest.mark.gpu
def test_gpu_cuda_graphs_per_shape_bounded_and_shared_device_memory():
    engine = tensorsmith.build(make_mlp_model(), target="cuda", profiles=PROFILES[:1])
    reference = tensorsmith.build(make_mlp_model(), opt_level=0)
    shared = tensorsmith.DeviceMemory()
    a = engine.create_execution_context(device_memory=shared)
    b = engine.create_execution_context(device_memory=shared)
    a.max_graphs = a._graphs.max_graphs = 2
    for n in (1, 2, 3, 8):
        x = _x(n)
        out = a.execute({"x": torch.from_numpy(x).cuda()})["y"].cpu().numpy()
        np.testing.assert_allclose(out, reference.run({"x": x})["y"], rtol=1e-3, atol=1e-3)
    assert len(a._graphs.graphs) == 2
    out = b.execute({"x": torch.from_numpy(_x(4)).cuda()})["y"]
    torch.cuda.synchronize()
    np.testing.assert_allclose(out.cpu().numpy(), reference.run({"x": _x(4)})["y"], rtol=1e-3, atol=1e-3)
    with pytest.raises(InputError, match="is on cpu.*does not copy"):
        a.execute({"x": torch.zeros(2, 4)})
