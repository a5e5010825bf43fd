"""A task that asks for a GPU never runs in a worker started for CPU-only work, and the
reverse (as in Ray): CUDA state a process set up stays with GPU work."""

from __future__ import annotations

import os

import pytest

import raylite


@pytest.fixture(scope="module")
def gpu_cluster():
    if raylite.is_initialized():
        raylite.shutdown()
    raylite.init(num_cpus=1, num_gpus=1)  # logical GPUs: nothing touches a device
    yield
    raylite.shutdown()


@raylite.remote
def cpu_pid():
    return os.getpid()


@raylite.remote(num_gpus=1)
def gpu_pid():
    return os.getpid()


def test_gpu_and_cpu_tasks_get_separate_workers(gpu_cluster):
    first_cpu = raylite.get(cpu_pid.remote())
    first_gpu = raylite.get(gpu_pid.remote())
    assert first_cpu != first_gpu
    # and later ones never cross over either
    assert raylite.get(gpu_pid.remote()) != first_cpu
    assert raylite.get(cpu_pid.remote()) != first_gpu
