"""Resource requests at Ray's edges (found by Ray's test_advanced_2): thousands of custom
resources, fractional device counts, and the per-node facts code reads to tell nodes apart."""

from __future__ import annotations

import pytest

import raylite
from raylite._private import state


def test_a_node_with_ten_thousand_custom_resources_starts_and_schedules():
    # the daemon's --resources argument passed 128 KiB: "Argument list too long"
    total = {f"res{i}": 1 + i % 6 for i in range(10_000)}
    if raylite.is_initialized():
        raylite.shutdown()
    raylite.init(num_cpus=2, resources=total)
    try:
        have = raylite.cluster_resources()
        assert all(have[k] == v for k, v in total.items())

        @raylite.remote
        def one():
            return 1

        assert raylite.get(one.options(resources={"res7": 2}).remote(), timeout=60) == 1
        assert raylite.get(one.options(resources=total, num_cpus=0).remote(), timeout=60) == 1
    finally:
        raylite.shutdown()


def test_more_than_one_device_must_be_whole_devices(cluster):
    @raylite.remote(num_gpus=1.5)
    def gpu_and_a_half():
        return 1

    with pytest.raises(ValueError, match="GPU resource quantities >1 must be whole numbers"):
        gpu_and_a_half.remote()

    @raylite.remote
    class Holder:
        pass

    with pytest.raises(ValueError, match="TPU resource quantities >1"):
        Holder.options(resources={"TPU": 2.5}).remote()
    # a share of one device, whole devices, and fractional CPUs or custom resources are fine
    for ok in ({"num_gpus": 0.5}, {"num_gpus": 2}, {"num_cpus": 1.5, "resources": {"Custom": 2.5}}):
        raylite.remote(**ok)(lambda: 1).options()


def test_node_facts_code_reads_to_tell_nodes_apart(cluster):
    (node,) = raylite.nodes()
    assert node["ObjectStoreSocketName"] == raylite._core.runtime.client().store_dir
    assert raylite._private.worker.global_worker.node.unique_id == raylite.get_runtime_context().get_node_id()
    assert state.current_node_id() == "node:" + node["NodeManagerAddress"]
    # the node resources code can pin work with: this node's, and never the head marker
    assert state.node_ids() == [state.current_node_id()]

    @raylite.remote
    def held():
        return raylite.get_runtime_context().get_accelerator_ids()

    ids = raylite.get(held.remote(), timeout=60)
    assert ids["GPU"] == [] and ids["neuron_cores"] == [] and ids["TPU"] == []
