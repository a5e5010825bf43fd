"""Tasks, actors, objects and placement across real node processes on loopback."""

from __future__ import annotations

import hashlib
import os
import subprocess
import sys
import time

import numpy as np
import pytest

import raylite as ray
from raylite._core.cluster import cluster as C
from raylite._core.cluster.driver import run_head_request
from raylite._core.protocol import GetClusterInfo
from raylite._core.transport.base import HandshakeError
from raylite.util import placement_group, remove_placement_group
from raylite.util.scheduling_strategies import PlacementGroupSchedulingStrategy

from .conftest import wait_until


@ray.remote
def where(delay_s: float = 0.0) -> str:
    time.sleep(delay_s)
    return ray.get_runtime_context().get_node_id()


def test_tasks_and_actors_land_on_every_node(three_nodes):
    ray.init(address="auto")
    all_nodes = {n["NodeID"] for n in ray.nodes() if n["Alive"]}
    assert len(all_nodes) == 3
    spread: set[str] = set()
    for _ in range(3):  # SPREAD is best effort (a busy node is skipped); a few rounds cover all
        spread |= set(ray.get([where.options(scheduling_strategy="SPREAD").remote(0.3) for _ in range(9)]))
        if spread == all_nodes:
            break
    assert spread == all_nodes
    # custom resources from --resources route work to their node
    by_res = {r: ray.get(where.options(resources={r: 1}).remote()) for r in ("head_r", "w1", "w2")}
    assert set(by_res.values()) == all_nodes

    @ray.remote(resources={"w2": 1})
    class Counter:
        def __init__(self):
            self.n = 0

        def incr(self):
            self.n += 1
            return self.n, ray.get_runtime_context().get_node_id()

    c = Counter.remote()
    assert ray.get(c.incr.remote()) == (1, by_res["w2"])
    assert ray.get(c.incr.remote())[0] == 2


def test_actors_created_in_one_burst_spread_over_nodes_with_room(three_nodes):
    """Three 1-CPU actors created at once on three 1-CPU nodes: each gets a node. The head used
    to place them all on the node that looked emptiest in its last heartbeat, where the later
    ones queued forever behind the first."""
    ray.init(address="auto")

    @ray.remote(num_cpus=1)
    class Pinned:
        def node(self) -> str:
            return ray.get_runtime_context().get_node_id()

    actors = [Pinned.remote() for _ in range(3)]
    nodes = ray.get([a.node.remote() for a in actors], timeout=60)
    assert len(set(nodes)) == 3


def test_dynamic_generator_made_on_one_node_read_on_another(three_nodes):
    """The generator's refs (small inline ones and shared-memory ones) are borrowed across nodes."""
    ray.init(address="auto")

    @ray.remote(num_returns="dynamic", resources={"w1": 1})
    def split(array, chunk_size):
        while len(array) > 0:
            yield array[:chunk_size]
            array = array[chunk_size:]

    @ray.remote(resources={"w2": 1})
    def get_size(ref_generator):
        return sum(len(ray.get(ref)) for ref in ref_generator)

    array_ref = ray.put(np.zeros(50_000))
    assert ray.get(get_size.remote(split.remote(array_ref, 1000)), timeout=60) == 50_000
    assert ray.get(get_size.remote(split.remote(array_ref, 20_000)), timeout=60) == 50_000
    assert ray.get(get_size.remote(ray.get(split.remote(array_ref, 1000))), timeout=60) == 50_000


def test_100mb_object_moves_between_nodes_byte_exact(three_nodes):
    ray.init(address="auto")

    @ray.remote(resources={"w1": 1})
    def make() -> np.ndarray:
        return np.random.default_rng(7).integers(0, 255, 100 * 1024 * 1024, dtype=np.uint8)

    @ray.remote(resources={"w2": 1})
    def digest(x: np.ndarray) -> tuple[str, int, str]:
        return hashlib.sha256(x.tobytes()).hexdigest(), x.nbytes, ray.get_runtime_context().get_node_id()

    expected = hashlib.sha256(np.random.default_rng(7).integers(0, 255, 100 * 1024 * 1024,
                                                                dtype=np.uint8).tobytes()).hexdigest()
    ref = make.remote()
    h, size, node = ray.get(digest.remote(ref))
    assert (h, size) == (expected, 100 * 1024 * 1024)
    arr = ray.get(ref)  # and to the driver on the head node
    assert hashlib.sha256(arr.tobytes()).hexdigest() == expected
    # a small call to w1's node is not stuck behind a big transfer
    assert ray.get(where.options(resources={"w1": 1}).remote(), timeout=10)


def test_spread_and_strict_spread_placement_groups(three_nodes):
    ray.init(address="auto")
    pg = placement_group([{"CPU": 1}] * 3, strategy="STRICT_SPREAD")
    assert pg.wait(20)
    nodes = ray.get([where.options(scheduling_strategy=PlacementGroupSchedulingStrategy(
        pg, placement_group_bundle_index=i)).remote() for i in range(3)])
    assert len(set(nodes)) == 3
    remove_placement_group(pg)
    too_many = placement_group([{"CPU": 1}] * 4, strategy="STRICT_SPREAD")
    with pytest.raises(ray.exceptions.PlacementGroupSchedulingError, match="STRICT_SPREAD"):
        too_many.wait(5)
    pg2 = placement_group([{"CPU": 0.5}] * 3, strategy="SPREAD")  # tasks below ask 0.5 CPU
    assert pg2.wait(20)
    nodes = ray.get([where.options(num_cpus=0.5, scheduling_strategy=PlacementGroupSchedulingStrategy(
        pg2, placement_group_bundle_index=i)).remote() for i in range(3)])
    assert len(set(nodes)) == 3


def test_driver_disconnect_leaves_cluster_running(three_nodes):
    ray.init(address=f"raylite://{three_nodes.address}")
    assert ray.get(where.remote())
    ray.shutdown()
    assert len(three_nodes.alive_ids()) == 3
    env = dict(os.environ, RAYLITE_ADDRESS=three_nodes.address, RAYLITE_TOKEN=three_nodes.token)
    code = "import raylite as ray; ray.init(); print(len(ray.nodes()))"
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=60)
    assert out.stdout.strip() == "3", out.stderr


def test_wrong_token_is_refused(three_nodes):
    with pytest.raises(HandshakeError, match="token"):
        run_head_request(three_nodes.address, "not-the-token", GetClusterInfo())
    with pytest.raises(C.StartError, match="token"):
        C.start_node(three_nodes.config, head=False, address=three_nodes.address, node_ip="127.0.0.1",
                     token="not-the-token", num_cpus=1)
    assert len(three_nodes.alive_ids()) == 3


def test_cli_status_and_stop(three_nodes):
    env = dict(os.environ, RAYLITE_TEMP_DIR=three_nodes.config.temp_dir)
    env.pop("RAYLITE_TOKEN", None)
    cli = [sys.executable, "-m", "raylite.cli"]
    out = subprocess.run([*cli, "status"], env=env, capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    assert "Active: 3" in out.stdout and "0/3 CPU" in out.stdout
    ray.init(address="auto")  # more work than CPUs: the rest shows as pending demand
    refs = [where.remote(4.0) for _ in range(6)]

    def status_shows_pending():
        res = subprocess.run([*cli, "status"], env=env, capture_output=True, text=True, timeout=60)
        return "pending: {CPU: 1}" in res.stdout and "3/3 CPU" in res.stdout
    wait_until(status_shows_pending, 15, "pending demand in raylite status")
    ray.shutdown()
    del refs
    # port in use: a clear error naming the fix
    port = three_nodes.address.rsplit(":", 1)[1]
    out = subprocess.run([*cli, "start", "--head", "--port", port, "--node-ip-address", "127.0.0.1"],
                         env=env, capture_output=True, text=True, timeout=60)
    assert out.returncode != 0 and "in use" in out.stderr and "raylite stop" in out.stderr
    out = subprocess.run([*cli, "stop"], env=env, capture_output=True, text=True, timeout=60)
    assert out.returncode == 0 and out.stdout.count("Stopped") == 3, out.stdout + out.stderr
    for n in three_nodes.nodes:
        wait_until(lambda n=n: n.process.poll() is not None, 10, "node process exit")
    out = subprocess.run([*cli, "status"], env=env, capture_output=True, text=True, timeout=60)
    assert out.returncode != 0 and "no running raylite cluster" in out.stderr


def test_node_affinity_strict_pack_and_infeasible_across_nodes(three_nodes):
    from raylite.util.scheduling_strategies import NodeAffinitySchedulingStrategy

    ray.init(address="auto")
    others = [n["NodeID"] for n in ray.nodes() if n["Alive"] and "w2" in n["Resources"]]
    target = others[0]
    pinned = where.options(scheduling_strategy=NodeAffinitySchedulingStrategy(target, soft=False))
    assert set(ray.get([pinned.remote() for _ in range(3)])) == {target}
    pg = placement_group([{"CPU": 0.5}, {"CPU": 0.5}], strategy="STRICT_PACK")
    assert pg.wait(20)
    nodes = ray.get([where.options(num_cpus=0.5, scheduling_strategy=PlacementGroupSchedulingStrategy(
        pg, placement_group_bundle_index=i)).remote() for i in range(2)])
    assert len(set(nodes)) == 1
    remove_placement_group(pg)
    with pytest.raises(ray.exceptions.TaskUnschedulableError, match="w3"):
        ray.get(where.options(resources={"w3": 1}).remote(), timeout=20)
