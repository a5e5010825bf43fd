"""A node advertises its accelerators' types, and `accelerator_type=` places work by them.

The machine has no GPU: an `nvidia-smi` that answers what a two-A100 machine's answers is put
first on PATH, so the whole path (detection at node start, the resources the cluster reports,
scheduling, the infeasible-request error) runs as it would on that machine.
"""

from __future__ import annotations

import os
import re
import stat

import pytest

import raylite as ray
from raylite.exceptions import TaskUnschedulableError

from ..cluster.conftest import free_port

FAKE_SMI = """#!/bin/sh
# answers like nvidia-smi on a machine with two A100 80GB cards
echo "NVIDIA A100-SXM4-80GB, 81920"
echo "NVIDIA A100-SXM4-80GB, 81920"
"""


@pytest.fixture(scope="module")
def a100_cluster(tmp_path_factory):
    bin_dir = tmp_path_factory.mktemp("fake-driver")
    smi = bin_dir / "nvidia-smi"
    smi.write_text(FAKE_SMI)
    smi.chmod(smi.stat().st_mode | stat.S_IEXEC)
    saved = {k: os.environ.get(k) for k in ("PATH", "CUDA_VISIBLE_DEVICES")}
    os.environ["PATH"] = f"{bin_dir}{os.pathsep}{os.environ['PATH']}"
    os.environ.pop("CUDA_VISIBLE_DEVICES", None)
    if ray.is_initialized():
        ray.shutdown()
    try:
        ray.init(num_cpus=2)
        yield ray
    finally:
        ray.shutdown()
        for k, v in saved.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v


def test_the_node_advertises_its_gpus_and_their_types(a100_cluster):
    res = ray.cluster_resources()
    assert res["GPU"] == 2
    assert res["accelerator_type:A100"] == 1
    assert res["accelerator_type:A100-80G"] == 1


def test_tasks_and_actors_asking_for_the_type_run_there(a100_cluster):
    @ray.remote(num_gpus=1, accelerator_type="A100")
    def which_devices():
        return os.environ.get("CUDA_VISIBLE_DEVICES")

    @ray.remote(accelerator_type="A100-80G")
    class OnA100:
        def resources(self):
            return ray.get_runtime_context().get_assigned_resources()

    assert ray.get(which_devices.remote(), timeout=60) in ("0", "1")
    actor = OnA100.remote()
    assert "accelerator_type:A100-80G" in ray.get(actor.resources.remote(), timeout=60)


def test_a_type_no_node_has_is_reported_at_once(a100_cluster):
    @ray.remote(accelerator_type="H100")
    def on_h100():
        return 1

    # the infeasibility itself (not a timeout) names the missing resource
    with pytest.raises(TaskUnschedulableError, match="accelerator_type:H100"):
        ray.get(on_h100.remote(), timeout=120)


def test_status_names_each_nodes_accelerators(a100_cluster):
    from raylite._core.cluster.cluster import cluster_status, format_status
    from raylite._core.config import get_config

    text = format_status(cluster_status(get_config(), ray.get_runtime_context().gcs_address))
    assert "[2x A100/A100-80G]" in text
    assert re.search(r"[\d.]+/1 accelerator_type:A100$", text, re.M)


def test_serve_replicas_and_the_seeds_llm_config_take_the_type(a100_cluster):
    from raylite import serve
    from raylite.serve.llm import build_openai_app

    @serve.deployment(ray_actor_options={"accelerator_type": "A100", "num_gpus": 1})
    class Where:
        def __call__(self):
            return ray.get_runtime_context().get_assigned_resources()

    serve.start(http_options={"host": "127.0.0.1", "port": free_port()})  # 8000 may be taken
    handle = serve.run(Where.bind(), name="typed", route_prefix=None)
    assert "accelerator_type:A100" in handle.remote().result(timeout_s=60)
    serve.delete("typed")
    # the seed's LLMConfig(accelerator_type="A100") is accepted where the cluster has A100s
    # (building the app checks the type; it does not load a model)
    app = build_openai_app({"llm_configs": [{"model_loading_config": {"model_id": "m", "model_source": "/m"},
                                              "accelerator_type": "A100"}]})
    assert app is not None
    serve.shutdown()
