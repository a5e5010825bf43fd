"""GPU id assignment: whole devices for whole GPUs, packing for fractions."""

from __future__ import annotations

from raylite._core import resources as R
from raylite._core.node.gpu_ids import GpuIds, gpu_amount, node_device_ids


def test_whole_and_fractional_requests():
    gpus = GpuIds([0, 1, 2])
    one = R.to_fixed({"GPU": 1})["GPU"]
    half = R.to_fixed({"GPU": 0.5})["GPU"]
    assert gpus.acquire(2 * one) == [0, 1]
    assert gpus.acquire(half) == [2] and gpus.acquire(half) == [2]  # fractions share one device
    assert gpus.acquire(half) == []  # nothing left
    gpus.release([0, 1], 2 * one)
    assert gpus.acquire(one) == [0]
    gpus.release([2], half)
    assert gpus.acquire(half) == [2]  # best fit: the half-used device, not a fresh one


def test_bundle_gpus_counted_once_and_node_ids():
    req = R.to_fixed({"GPU_group_0_abc": 1, "GPU_group_abc": 1, "CPU": 1})
    assert gpu_amount(req) == R.to_fixed({"GPU": 1})["GPU"]
    two = R.to_fixed({"GPU": 2})["GPU"]
    assert node_device_ids(two, "4,6") == [4, 6]
    assert node_device_ids(two, None) == [0, 1]
    # device UUIDs (as `nvidia-smi -L` names them) are handed out as given, in the node's order
    assert node_device_ids(two, "GPU-b2,GPU-a1,GPU-c3") == ["GPU-b2", "GPU-a1"]
    gpus = GpuIds(node_device_ids(two, "GPU-b2,GPU-a1"))
    assert gpus.acquire(two // 2) == ["GPU-b2"]
    assert gpus.acquire(two // 2) == ["GPU-a1"]
