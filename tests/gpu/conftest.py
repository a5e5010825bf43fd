"""The GPU suite: every test here is marked `gpu` and skipped, with the reason, where this
machine has no CUDA device that torch can use. `bench/gpu_check.sh` runs it on a GPU machine."""

from __future__ import annotations

import functools

import pytest

import raylite


@functools.cache
def _why_no_gpu() -> str:
    try:
        import torch
    except ImportError:
        return "torch is not installed"
    if not torch.cuda.is_available():
        return f"no CUDA device (torch {torch.__version__}, built with CUDA {torch.version.cuda})"
    return ""


def pytest_collection_modifyitems(config, items):
    for item in items:
        if "tests/gpu/" in item.nodeid.replace("\\", "/"):
            item.add_marker(pytest.mark.gpu)
            if _why_no_gpu():
                item.add_marker(pytest.mark.skip(reason=f"GPU suite: {_why_no_gpu()}"))


@pytest.fixture(scope="module")
def gpu_cluster():
    """A local cluster with the machine's real GPUs (detected, not declared)."""
    if raylite.is_initialized():
        raylite.shutdown()
    raylite.init(num_cpus=4)
    yield raylite
    raylite.shutdown()
