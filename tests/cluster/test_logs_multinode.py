"""Logs of every machine through the head's API: a worker node's files are read through its daemon."""

from __future__ import annotations

import os

import pytest

import raylite
from tests.cluster.conftest import free_port, wait_until

pytestmark = [pytest.mark.timeout(180), pytest.mark.slow]


def test_logs_of_a_worker_node_through_the_head_api(make_cluster):
    from raylite.dashboard.log_client import list_logs, stream_log
    from raylite.dashboard.state_client import list_resource

    c = make_cluster()
    port = free_port()
    head = c.add_head(num_cpus=1, include_dashboard=True, dashboard_port=port)
    worker = c.add_node(num_cpus=1, resources={"w1": 1})
    wait_until(lambda: len(c.alive_ids()) == 2, what="two alive nodes")
    url = f"http://127.0.0.1:{port}"
    os.environ["RAYLITE_TOKEN"] = c.token
    try:
        raylite.init(address=c.address)

        @raylite.remote(resources={"w1": 1})
        class OnWorker:
            def say(self):
                print("printed-on-the-worker-node")
                return os.getpid()

        actor = OnWorker.remote()
        raylite.get(actor.say.remote())
        files = list_logs(url)
        assert {f["node_id"] for f in files} == {head.node_id, worker.node_id}
        (row,) = [a for a in list_resource("actors", url) if a["class_name"] == "OnWorker"]
        assert row["node_id"] == worker.node_id
        text = wait_until(lambda: b"printed-on-the-worker-node" in b"".join(
            stream_log(url, actor_id=row["actor_id"])), 20, "the worker node's log")
        assert text
    finally:
        os.environ.pop("RAYLITE_TOKEN", None)
        raylite.shutdown()
