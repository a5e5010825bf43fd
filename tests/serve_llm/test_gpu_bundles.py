"""The GPUs of an LLM replica's engine, checked with logical GPUs (no device, no vLLM).

The engine's processes on the replica's node must see exactly the GPUs raylite assigned for
the replica's bundles on that node (never the machine's others), so two replicas on one node
get disjoint devices. A probe deployment with an LLMConfig's Serve options does what
VLLMEngine.start does before vLLM starts (`EngineGroup.plan` + `rank0_env`) and reports the
environment the engine would start with.
"""

from __future__ import annotations

import os
import socket

import pytest

import raylite
from raylite import serve
from raylite.serve.llm import LLMConfig

pytestmark = pytest.mark.timeout(300)


class EngineEnvProbe:
    """A replica that plans its engine's group as VLLMEngine does, without starting vLLM."""

    def __init__(self, world_size: int) -> None:
        from raylite.serve.llm._internal.engine_group import EngineGroup, rank0_env

        self.group = EngineGroup.plan(world_size, is_cpu=False)
        self.env = rank0_env(self.group, False, world_size, sorted(os.sched_getaffinity(0)))

    def __call__(self) -> dict:
        other = {}
        if self.group is not None and self.group.layout.spans_nodes:
            other = {rank: self.group.node_env(rank)
                     for rank in range(1, self.group.layout.nnodes)}
        return {"env": self.env, "other_nodes": other, "pid": os.getpid(),
                "node_id": raylite.get_runtime_context().get_node_id(),
                "replica_gpu_ids": raylite.get_gpu_ids()}


def _probe(config: LLMConfig, world_size: int, num_replicas: int = 1) -> list[dict]:
    options = config.get_serve_options()
    keep = ("placement_group_bundles", "placement_group_strategy", "ray_actor_options")
    dep = serve.deployment(EngineEnvProbe).options(
        name="probe", num_replicas=num_replicas, **{k: options[k] for k in keep if k in options})
    handle = serve.run(dep.bind(world_size), name="probe", route_prefix=None)
    seen: dict[int, dict] = {}
    for _ in range(200):  # the router spreads calls; stop once every replica has answered
        out = handle.remote().result(timeout_s=60)
        seen[out["pid"]] = out
        if len(seen) == num_replicas:
            break
    assert len(seen) == num_replicas
    return list(seen.values())


def _start_serve() -> None:
    """Serve on a free port, not its default 8000: a test on another worker may hold that."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    serve.start(http_options={"host": "127.0.0.1", "port": port})


@pytest.fixture
def four_gpu_node():
    if raylite.is_initialized():
        raylite.shutdown()
    raylite.init(num_cpus=2, num_gpus=4, resources={"accelerator_type:A100": 1})
    _start_serve()
    try:
        yield
    finally:
        serve.shutdown()
        raylite.shutdown()


def _ids(env: dict) -> list[str]:
    return env["CUDA_VISIBLE_DEVICES"].split(",")


def test_two_tp2_replicas_on_one_node_see_disjoint_gpus(four_gpu_node):
    config = LLMConfig(model_loading_config={"model_id": "m", "model_source": "/m"},
                       accelerator_type="A100", engine_kwargs={"tensor_parallel_size": 2})
    replicas = _probe(config, world_size=2, num_replicas=2)
    a, b = (_ids(r["env"]) for r in replicas)
    assert len(a) == 2 and len(b) == 2
    assert not set(a) & set(b), (a, b)
    assert set(a) | set(b) == {"0", "1", "2", "3"}
    for r in replicas:
        assert r["replica_gpu_ids"] == []  # the bundles' GPUs are held for the engine
        assert set(r["env"]) == {"CUDA_VISIBLE_DEVICES"}  # one node: no multi-node settings


def test_tp1_gpu_bundle_gives_the_engine_its_one_gpu(four_gpu_node):
    config = LLMConfig(model_loading_config={"model_id": "m", "model_source": "/m"},
                       placement_group_config={"bundle_per_worker": {"GPU": 1}})
    assert config.get_serve_options()["placement_group_bundles"] == [{"GPU": 1, "CPU": 1.0}]
    [replica] = _probe(config, world_size=1)
    assert len(_ids(replica["env"])) == 1


def test_cpu_bundles_add_no_gpu_settings(four_gpu_node):
    config = LLMConfig(model_loading_config={"model_id": "m", "model_source": "/m"},
                       engine_kwargs={"tensor_parallel_size": 2})
    [replica] = _probe(config, world_size=2)
    # CPU bundles on one node: no group, no CUDA_VISIBLE_DEVICES (only the CPU thread binding,
    # which rank0_env gives on CPUs; this probe asks as a GPU engine would)
    assert "CUDA_VISIBLE_DEVICES" not in replica["env"]


def test_an_engine_across_two_gpu_nodes_gets_each_nodes_gpus():
    from raylite.cluster_utils import Cluster

    if raylite.is_initialized():
        raylite.shutdown()
    cluster = Cluster(initialize_head=True, head_node_args={"num_cpus": 1, "num_gpus": 2})
    cluster.add_node(num_cpus=1, num_gpus=2)
    cluster.wait_for_nodes()
    cluster.connect()
    _start_serve()
    try:
        config = LLMConfig(model_loading_config={"model_id": "m", "model_source": "/m"},
                           engine_kwargs={"tensor_parallel_size": 2, "pipeline_parallel_size": 2},
                           placement_group_config={"bundle_per_worker": {"GPU": 1}})
        [replica] = _probe(config, world_size=4)
        assert sorted(_ids(replica["env"])) == ["0", "1"]  # both of rank 0's node's devices
        assert replica["env"]["VLLM_HOST_IP"]
        [other] = replica["other_nodes"].values()
        assert sorted(_ids(other)) == ["0", "1"]
    finally:
        serve.shutdown()
        cluster.shutdown()
