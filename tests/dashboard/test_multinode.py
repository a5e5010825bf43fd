"""Two real nodes on loopback: the head's /metrics and node feed cover both, and a node that
dies is shown DEAD (one scrape point for the whole cluster)."""

from __future__ import annotations

import shutil
import signal
import tempfile

import httpx
import psutil
import pytest

from raylite._core import config as config_mod
from tests.cluster.conftest import Cluster, free_port, wait_until

parser = pytest.importorskip("prometheus_client.parser", reason="prometheus-client is not installed")


@pytest.fixture
def two_nodes(monkeypatch):
    temp_dir = tempfile.mkdtemp(prefix="rld", dir="/tmp")
    cfg = config_mod.get_config().replace(temp_dir=temp_dir, token="")
    monkeypatch.setattr(config_mod, "_CONFIG", cfg)
    monkeypatch.delenv("RAYLITE_TOKEN", raising=False)
    c = Cluster(cfg)
    try:
        head = c.add_head(num_cpus=1, include_dashboard=True, dashboard_port=free_port())
        worker = c.add_node(num_cpus=1)
        wait_until(lambda: len(c.alive_ids()) == 2, what="two alive nodes")
        yield c, head, worker
    finally:
        c.shutdown()
        shutil.rmtree(temp_dir, ignore_errors=True)


def test_head_reports_every_node_and_a_dead_one(two_nodes):
    c, head, worker = two_nodes
    url, headers = head.dashboard_url, {"Authorization": f"Bearer {c.token}"}
    if not url.startswith("http"):
        url = "http://" + url

    def nodes():
        rows = httpx.get(url + "/api/dashboard/nodes", headers=headers, timeout=30).json()
        return len(rows) == 2 and all(r["stats"].get("cpu_percent") is not None for r in rows) and rows

    rows = wait_until(nodes, timeout_s=30, what="load stats of both nodes")
    assert {r["node_id"] for r in rows} == {head.node_id, worker.node_id}
    assert [r["is_head"] for r in rows if r["node_id"] == head.node_id] == [True]

    text = httpx.get(url + "/metrics", headers=headers, timeout=30).text
    fams = {f.name: f for f in parser.text_string_to_metric_families(text)}
    assert {s.labels["node_id"] for s in fams["raylite_node_cpu_percent"].samples} == {head.node_id, worker.node_id}
    assert [s.value for s in fams["raylite_nodes"].samples if s.labels["state"] == "ALIVE"] == [2.0]
    # both nodes run on this one machine: its cores and memory are counted once, not twice
    machine = httpx.get(url + "/api/dashboard/overview", headers=headers, timeout=30).json()["machine"]
    assert machine["num_cpus"] == psutil.cpu_count()
    assert machine["mem_total_bytes"] == psutil.virtual_memory().total
    assert [s.value for s in fams["raylite_cluster_mem_total_bytes"].samples] == [psutil.virtual_memory().total]

    c.kill_node(worker, signal.SIGKILL)

    def dead():
        rows = httpx.get(url + "/api/dashboard/nodes", headers=headers, timeout=30).json()
        return [r for r in rows if r["node_id"] == worker.node_id and r["state"] == "DEAD"]

    wait_until(dead, timeout_s=60, what="the killed node shown DEAD")
