"""The node's memory monitor kills a memory hog's worker; the task fails with OutOfMemoryError
naming the task, the node's memory use and the fix, and the cluster keeps working."""

from __future__ import annotations

import os

import pytest

import raylite as ray
from raylite._core.node import memory_monitor as MM

GIB = 1 << 30


def _snapshot() -> MM.MemorySnapshot:
    with open("/proc/meminfo") as f:
        return MM.parse_meminfo(f.read())


@pytest.fixture(scope="module")
def low_threshold():
    snap = _snapshot()
    if snap.total_bytes - snap.used_bytes < 6 * GIB:
        pytest.skip("needs about 6 GiB of free memory")
    # trip at today's use plus 1.5 GiB: only the hog below gets there
    threshold = (snap.used_bytes + 1.5 * GIB) / snap.total_bytes
    if ray.is_initialized():
        ray.shutdown()
    saved = {k: os.environ.get(k) for k in ("RAYLITE_MEMORY_USAGE_THRESHOLD", "RAYLITE_MEMORY_MONITOR_INTERVAL_S")}
    os.environ["RAYLITE_MEMORY_USAGE_THRESHOLD"] = f"{threshold:.4f}"
    os.environ["RAYLITE_MEMORY_MONITOR_INTERVAL_S"] = "0.1"
    try:
        ray.init(num_cpus=2)
    finally:
        for k, v in saved.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v
    yield threshold
    ray.shutdown()


@ray.remote(max_retries=0)
def hog(limit_gib: float):
    import time

    import numpy as np

    chunks = []
    for _ in range(int(limit_gib * 4)):
        chunks.append(np.ones(GIB // 4, dtype=np.uint8))  # touched: really resident
        time.sleep(0.05)
    time.sleep(30)  # the monitor must have killed us by now
    return "survived"


@ray.remote
def small(x):
    return x + 1


def test_memory_hog_is_killed_with_a_clear_error_and_the_cluster_survives(low_threshold):
    with pytest.raises(ray.exceptions.OutOfMemoryError) as err:
        ray.get(hog.remote(6.0), timeout=120)
    text = str(err.value)
    assert "hog" in text and "memory monitor" in text and "GiB" in text
    assert "fewer tasks" in text and "memory=" in text
    assert ray.get([small.remote(i) for i in range(10)], timeout=60) == list(range(1, 11))


def test_a_retried_hog_keeps_failing_but_the_node_lives(low_threshold):
    with pytest.raises(ray.exceptions.OutOfMemoryError, match="tried 2 time"):
        ray.get(hog.options(max_retries=1).remote(6.0), timeout=180)
    assert ray.get(small.remote(41), timeout=60) == 42
