"""Simulated nodes (raylite.testing.node_sim) joined to a real head: they register, heartbeat,
take leases and tasks, and die; SPREAD covers every node before any gets a second task."""

from __future__ import annotations

import time

import pytest

import raylite as ray
from raylite.testing.node_sim import SimConfig, SimulatorThread

from .conftest import wait_until


@pytest.fixture
def sim_head(make_cluster, monkeypatch):
    """A head with no CPUs of its own (tasks can only land on simulated nodes)."""
    monkeypatch.setenv("RAYLITE_NODE_DEAD_TIMEOUT_S", "2")
    c = make_cluster()
    c.add_head(num_cpus=0)
    return c


def _alive_sim_nodes(c, ids: set[str]) -> set[str]:
    return {n["node_id"].hex() for n in c.node_table() if n["alive"]} & ids


def test_simulated_nodes_join_run_tasks_and_die(sim_head):
    c = sim_head
    with SimulatorThread(f"tcp://{c.address}", c.token, 12) as st:
        ids = {n.node_id.hex() for n in st.sim.nodes}
        wait_until(lambda: _alive_sim_nodes(c, ids) == ids, what="12 simulated nodes alive")
        ray.init(address=c.address)

        @ray.remote(num_cpus=1)
        def f(x):
            return x

        assert ray.get([f.remote(i) for i in range(50)]) == [None] * 50  # a simulated task returns None
        assert st.call(lambda s: s.stats()["tasks_run"]) == 50
        # heartbeats flow: the head keeps them alive past the dead timeout
        wait_until(lambda: st.call(lambda s: s.heartbeats_sent) >= 12 * 5, what="heartbeats")
        assert _alive_sim_nodes(c, ids) == ids
        # a crash is seen at once (the link closes); silence after the dead timeout (2 s)
        crashed = st.call(lambda s: [n.node_id.hex() for n in s.alive()[:2]])
        st.call(lambda s: s.crash(s.alive()[:2]))
        wait_until(lambda: not (_alive_sim_nodes(c, ids) & set(crashed)), timeout_s=5, what="crashed nodes dead")
        silent = st.call(lambda s: [n.node_id.hex() for n in s.alive()[:3]])
        t0 = time.monotonic()
        st.call(lambda s: s.silence(s.alive()[:3]))
        wait_until(lambda: not (_alive_sim_nodes(c, ids) & set(silent)), timeout_s=10, what="silent nodes dead")
        assert time.monotonic() - t0 >= 1.5  # by missing heartbeats, not by a closed link
        assert len(_alive_sim_nodes(c, ids)) == 7


def test_spread_covers_every_node_before_any_node_gets_a_second_task(sim_head):
    """1,000 SPREAD tasks over 101 nodes: the first 101 land on 101 different nodes. They used
    to land on ~78 nodes in all: the client pipelined tasks onto its first few leases, and the
    head's round-robin index skipped nodes as the list of nodes with room shrank."""
    c = sim_head
    n_nodes = 101
    cfg = SimConfig(resources={"CPU": 1.0}, record_tasks=True)
    with SimulatorThread(f"tcp://{c.address}", c.token, n_nodes, cfg) as st:
        ids = {n.node_id.hex() for n in st.sim.nodes}
        wait_until(lambda: _alive_sim_nodes(c, ids) == ids, what="simulated nodes alive")
        ray.init(address=c.address)

        @ray.remote(num_cpus=1)
        def f():
            return None

        def landed(refs) -> list[int]:
            """The node index each task ran on, in submission order (tasks are pushed in it)."""
            where = st.call(lambda s: dict(s.task_nodes))
            return [where[r.binary()[:16]] for r in refs]

        refs = [f.options(scheduling_strategy="SPREAD").remote() for _ in range(1000)]
        ray.get(refs)
        nodes = landed(refs)
        assert len(set(nodes)) == n_nodes, f"{len(set(nodes))} of {n_nodes} nodes got tasks"
        assert len(set(nodes[:n_nodes])) == n_nodes, "a node got a second task before every node had one"
        # a second burst is a new batch: once the head sees the nodes idle again (their next
        # heartbeats), it covers every node again, once each
        wait_until(lambda: ray.available_resources().get("CPU", 0) == n_nodes, what="nodes idle again")
        refs = [f.options(scheduling_strategy="SPREAD").remote() for _ in range(n_nodes)]
        ray.get(refs)
        assert sorted(landed(refs)) == list(range(n_nodes))
