"""GPU id assignment: whole devices for whole GPUs, packing for fractions."""

from __future__ import annotations

from raylite._core import resources as R
from raylite._core.node.gpu_ids import (
    GpuIds,
    device_amount,
    gpu_amount,
    node_device_ids,
    other_device_pools,
)


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


def test_a_placement_group_request_without_a_bundle_index_counts_its_devices():
    one = R.to_fixed({"GPU": 1})["GPU"]
    # no bundle index: only the group's wildcard is asked for, and it is what the lease holds
    assert gpu_amount(R.to_fixed({"GPU_group_ab12": 1, "CPU_group_ab12": 1})) == one
    assert device_amount(R.to_fixed({"neuron_cores_group_ab12": 2}), "neuron_cores") == 2 * one
    assert device_amount(R.to_fixed({"neuron_cores_group_1_ab12": 2, "neuron_cores_group_ab12": 2}),
                         "neuron_cores") == 2 * one
    assert device_amount(R.to_fixed({"GPU": 1}), "neuron_cores") == 0


def test_other_accelerators_get_pools_named_by_their_visible_variable():
    total = R.to_fixed({"CPU": 4, "neuron_cores": 3, "TPU": 0.5})
    pools = other_device_pools(total, {"NEURON_RT_VISIBLE_CORES": "4,5,6"})
    assert set(pools) == {"neuron_cores"}  # less than one whole TPU: no device to name
    assert pools["neuron_cores"].acquire(R.to_fixed({"n": 2})["n"]) == [4, 5]
