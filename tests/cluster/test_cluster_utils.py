"""`raylite.cluster_utils.Cluster` (Ray's `ray.cluster_utils.Cluster`): a multi-node cluster of
real node daemons on loopback, as libraries' test suites build one."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap

import pytest

import raylite
from raylite._core import config as config_mod
from raylite.cluster_utils import AutoscalingCluster, Cluster
from tests.conftest import process_gone, wait_for


@pytest.fixture
def fresh_temp_dir(monkeypatch, tmp_path_factory):
    """Session files under a short temp dir of the test's own (unix socket paths stay short),
    so the cluster's address file never meets another test's."""
    import shutil
    import tempfile

    temp_dir = tempfile.mkdtemp(prefix="rlcu", dir="/tmp")
    monkeypatch.setattr(config_mod, "_CONFIG", config_mod.get_config().replace(temp_dir=temp_dir, token=""))
    monkeypatch.delenv("RAYLITE_TOKEN", raising=False)
    if raylite.is_initialized():
        raylite.shutdown()
    yield temp_dir
    if raylite.is_initialized():
        raylite.shutdown()
    shutil.rmtree(temp_dir, ignore_errors=True)


@pytest.fixture
def cluster(fresh_temp_dir):
    c = Cluster(initialize_head=True, head_node_args={"num_cpus": 1})
    yield c
    c.shutdown()


@raylite.remote(num_cpus=0)
def node_of_task():
    return raylite.get_runtime_context().get_node_id()


@raylite.remote(resources={"pool": 1}, num_cpus=0, max_retries=3)
def wait_for_release(marker_dir: str, release: str):
    import time

    node = raylite.get_runtime_context().get_node_id()
    open(os.path.join(marker_dir, node), "w").close()
    while not os.path.exists(release):
        time.sleep(0.02)
    return node


def _alive(node_id: str) -> bool:
    return {n["NodeID"]: n["Alive"] for n in raylite.nodes()}[node_id]


def test_task_runs_on_the_added_node_with_its_custom_resource(cluster):
    special = cluster.add_node(num_cpus=1, resources={"accel": 2}, labels={"zone": "b"})
    cluster.add_node(num_cpus=1)
    cluster.wait_for_nodes()
    assert cluster.address and len(cluster.worker_nodes) == 2
    assert cluster.list_all_nodes()[0] is cluster.head_node
    cluster.connect()
    assert raylite.get(node_of_task.options(resources={"accel": 1}).remote(), timeout=60) == special.node_id
    table = {n["NodeID"]: n for n in raylite.nodes()}
    assert table[special.node_id]["Resources"]["accel"] == 2
    assert table[special.node_id]["Labels"].get("zone") == "b"
    assert raylite.cluster_resources()["CPU"] == 3


@pytest.mark.parametrize("graceful", [True, False])
def test_removed_node_dies_and_its_task_is_retried_elsewhere(cluster, tmp_path, graceful):
    first = cluster.add_node(resources={"pool": 1})
    second = cluster.add_node(resources={"pool": 1})
    cluster.wait_for_nodes()
    raylite.init(address=cluster.address)
    markers = tmp_path / "started"
    markers.mkdir()
    release = str(tmp_path / "release")
    ref = wait_for_release.remote(str(markers), release)
    ran_on = wait_for(lambda: os.listdir(markers), timeout_s=60, what="the task to start")[0]
    victim, survivor = (first, second) if ran_on == first.node_id else (second, first)
    pids = victim.processes()
    assert pids
    cluster.remove_node(victim, allow_graceful=graceful)
    assert victim not in cluster.worker_nodes
    assert all(process_gone(p) for p in pids)
    wait_for(lambda: not _alive(victim.node_id), what="the head to list the removed node dead")
    wait_for(lambda: os.path.exists(markers / survivor.node_id), timeout_s=60, what="the retry to start")
    open(release, "w").close()
    assert raylite.get(ref, timeout=60) == survivor.node_id
    cluster.wait_for_nodes()  # two nodes left, as expected


def test_shutdown_leaves_no_processes(fresh_temp_dir):
    cluster = Cluster(initialize_head=True, connect=True, head_node_args={"num_cpus": 1})
    cluster.add_node(num_cpus=1, resources={"w": 1})
    assert raylite.get(node_of_task.options(resources={"w": 1}).remote(), timeout=60)
    pids = [p for n in cluster.list_all_nodes() for p in n.processes()]
    assert len(pids) >= 4  # two daemons, each with a worker template and workers
    cluster.shutdown()
    assert not raylite.is_initialized()  # the driver was disconnected first
    assert cluster.head_node is None and not cluster.worker_nodes
    wait_for(lambda: all(process_gone(p) for p in pids), what="every process of the cluster to exit")
    cluster.shutdown()  # twice is fine


def test_nodes_die_with_the_process_that_made_them(fresh_temp_dir, tmp_path):
    """A program that made a Cluster and was killed (no atexit) leaves no node behind."""
    script = textwrap.dedent("""
        import os, signal
        from raylite.cluster_utils import Cluster
        c = Cluster(initialize_head=True)
        c.add_node()
        print(" ".join(str(p) for n in c.list_all_nodes() for p in n.processes()), flush=True)
        os.kill(os.getpid(), signal.SIGKILL)
    """)
    root = os.path.dirname(os.path.dirname(os.path.abspath(raylite.__file__)))
    env = {**os.environ, "RAYLITE_TEMP_DIR": fresh_temp_dir, "PYTHONPATH": root}
    out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, env=env, timeout=120)
    pids = [int(p) for p in out.stdout.split()]
    assert len(pids) >= 2, out.stderr
    wait_for(lambda: all(process_gone(p) for p in pids), what="the orphaned nodes to stop")


def test_wrong_use_is_a_clear_error(cluster, fresh_temp_dir):
    with pytest.raises(TypeError, match="unknown node options \\['num_cpu'\\]"):
        cluster.add_node(num_cpu=1)
    with pytest.raises(RuntimeError, match="needs initialize_head=True"):
        Cluster(connect=True)
    cluster.connect()
    with pytest.raises(ValueError, match="driver is attached to node"):
        cluster.remove_node(cluster.head_node)
    with pytest.raises(TypeError, match="worker_node_types"):
        AutoscalingCluster(head_resources={"CPU": 1}, worker_node_types={})


def test_ray_only_node_options_are_accepted(cluster):
    node = cluster.add_node(num_cpus=1, min_worker_port=0, max_worker_port=0, dashboard_agent_listen_port=None)
    cluster.wait_for_nodes()
    assert node in cluster.worker_nodes


def test_a_burst_reaches_the_room_another_burst_just_left(fresh_temp_dir):
    """Two bursts of short tasks, each kind on resources both nodes have: the second starts while
    the head's copy of the other node still counts the first burst's leases there (it learns of
    their return from that node's next report). Its requests queued on the driver's node are
    offered to the head again, and the other node reports the room it got back, so the burst
    uses both nodes (it stayed on one before) and every task runs once."""
    c = Cluster(initialize_head=True, head_node_args={"num_cpus": 3, "resources": {"A": 1, "B": 2}})
    try:
        other = c.add_node(num_cpus=3, resources={"A": 3, "B": 4})
        c.wait_for_nodes()
        c.connect()

        def burst(resource: str) -> dict[str, int]:
            @raylite.remote(resources={resource: 1})
            def short(i):
                import time

                time.sleep(0.005)
                return i, raylite.get_runtime_context().get_node_id()

            done = raylite.get([short.remote(i) for i in range(400)], timeout=120)
            assert sorted(i for i, _ in done) == list(range(400))
            per_node: dict[str, int] = {}
            for _, node in done:
                per_node[node] = per_node.get(node, 0) + 1
            return per_node

        for resource in ("A", "B", "A", "B"):
            per_node = burst(resource)
            assert len(per_node) == 2 and other.node_id in per_node, (resource, per_node)
    finally:
        c.shutdown()
