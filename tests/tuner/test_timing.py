"""time_runner: device time of captured replays on a GPU (host launch time is not charged)."""

from __future__ import annotations

import time

import pytest
import torch

from tensorsmith.tuner import time_runner


def test_cpu_timing_is_wall_clock():
    ms = time_runner(lambda: time.sleep(0.002), torch.device("cpu"), warmup=1, repeats=3)
    assert ms >= 1.9


@pytest.mark.gpu
def test_gpu_timing_charges_device_time_not_host_time():
    x = torch.randn(1024, device="cuda")

    def slow_host_small_kernel():
        time.sleep(0.002)  # host work a CUDA graph replay does not repeat
        return x * 2

    graphed = time_runner(slow_host_small_kernel, torch.device("cuda"), warmup=1, repeats=5)
    call_by_call = time_runner(slow_host_small_kernel, torch.device("cuda"), warmup=1, repeats=5, graph=False)
    assert graphed < 0.2 < 1.9 < call_by_call


@pytest.mark.gpu
def test_gpu_runner_that_syncs_is_timed_call_by_call():
    x = torch.randn(1024, device="cuda")
    ms = time_runner(lambda: (x * 2).sum().item(), torch.device("cuda"), warmup=1, repeats=5)
    assert ms > 0
    assert float((x * 2).sum()) == pytest.approx(float(x.sum() * 2), rel=1e-4)  # the device still works
