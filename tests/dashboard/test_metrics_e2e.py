"""/metrics and the dashboard's JSON feeds against a live local cluster."""

from __future__ import annotations

import pytest

import raylite
from raylite.util.metrics import Counter, Gauge, Histogram
from tests.conftest import wait_for

parser = pytest.importorskip("prometheus_client.parser", reason="prometheus-client is not installed")


def scrape(dashboard) -> dict:
    r = dashboard.get("/metrics")
    assert r.status_code == 200, r.text
    assert r.headers["content-type"].startswith("text/plain; version=0.0.4")
    return {f.name: f for f in parser.text_string_to_metric_families(r.text)}


def samples(fams: dict, name: str, **labels) -> list[float]:
    fam = fams.get(name)
    return [s.value for s in fam.samples if all(s.labels.get(k) == v for k, v in labels.items())] if fam else []


@raylite.remote
def record_in_task(n: int) -> int:
    c = Counter("e2e_requests", "Requests by route.", tag_keys=("route",)).set_default_tags({"route": "/task"})
    for _ in range(n):
        c.inc()
    return n


@raylite.remote
class Recorder:
    def __init__(self) -> None:
        self.g = Gauge("e2e_queue_depth", "Items waiting.", tag_keys=("actor",))

    def set(self, v: float) -> None:
        self.g.set(v, tags={"actor": "recorder"})


def test_user_metrics_from_driver_task_and_actor_appear_with_tags(dashboard):
    Counter("e2e_requests", "Requests by route.", tag_keys=("route",)).inc(2, tags={"route": "/driver"})
    h = Histogram("e2e_latency_s", "Latency.", boundaries=[0.1, 1.0])
    h.observe(0.5)
    assert raylite.get([record_in_task.remote(3), record_in_task.remote(4)]) == [3, 4]
    rec = Recorder.remote()
    raylite.get(rec.set.remote(7))

    def ready():
        fams = scrape(dashboard)
        return (samples(fams, "e2e_requests", route="/task") == [7.0]
                and samples(fams, "e2e_requests", route="/driver") == [2.0]
                and samples(fams, "e2e_queue_depth", actor="recorder") == [7.0]
                and fams)

    fams = wait_for(ready, timeout_s=30, what="user metrics of the driver, two tasks and an actor in /metrics")
    assert fams["e2e_requests"].type == "counter"
    buckets = {s.labels["le"]: s.value for s in fams["e2e_latency_s"].samples if s.name.endswith("_bucket")}
    assert buckets == {"0.1": 0.0, "1.0": 1.0, "+Inf": 1.0}


def test_builtin_metrics_cover_nodes_actors_and_resources(dashboard):
    @raylite.remote
    class Idle:
        def ping(self) -> int:
            return 1

    a = Idle.remote()
    raylite.get(a.ping.remote())

    def ready():
        # the node's load report is periodic: one taken before the actor's worker started lists
        # no worker yet (the first test of a fresh cluster sees that), so wait for one that does
        fams = scrape(dashboard)
        return (samples(fams, "raylite_node_cpu_percent") and samples(fams, "raylite_actors", state="ALIVE")
                and samples(fams, "raylite_worker_rss_bytes") and fams)

    fams = wait_for(ready, timeout_s=20, what="node load stats, a worker's memory and the actor in /metrics")
    assert samples(fams, "raylite_nodes", state="ALIVE") == [1.0]
    assert samples(fams, "raylite_cluster_resources_total", resource="CPU") == [2.0]
    assert samples(fams, "raylite_node_mem_total_bytes")[0] > 0
    assert all(v > 0 for v in samples(fams, "raylite_worker_rss_bytes"))
    assert "raylite_node_gpu_utilization_percent" not in fams  # no GPU here: nothing, not zeros


def test_metrics_needs_the_token(dashboard):
    import httpx

    r = httpx.get(dashboard.url + "/metrics", timeout=30)
    assert r.status_code == 401


def test_feeds_and_history(dashboard):
    nodes = dashboard.get("/api/dashboard/nodes").json()
    assert [n["state"] for n in nodes] == ["ALIVE"]

    def history():
        ts = dashboard.get("/api/dashboard/timeseries", params={"name": "raylite_cluster_cpu_percent"}).json()
        values = [v for v in ts.get("raylite_cluster_cpu_percent", []) if v is not None]
        return values and ts

    ts = wait_for(history, timeout_s=30, what="the head's history of cluster CPU")
    assert len(ts["time"]) == len(ts["raylite_cluster_cpu_percent"])
    names = dashboard.get("/api/dashboard/timeseries", params={"prefix": "raylite_actors", "since": 1e18}).json()
    assert "raylite_actors{state=\"ALIVE\"}" in names
    page = dashboard.get("/")
    assert page.status_code == 200 and "raylite dashboard" in page.text
    assert dashboard.get("/static/vendor/uplot/uPlot.iife.min.js").status_code == 200
