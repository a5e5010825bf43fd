"""Pure parts of metrics: util.metrics validation, the ring buffer, the head's families,
the Prometheus text (checked with prometheus_client's parser), node stats, the Train feed."""

from __future__ import annotations

import json
import math
from types import SimpleNamespace

import pytest

from raylite._core.head import cluster_metrics
from raylite._core.head.timeseries import TimeSeriesStore
from raylite._core.node.stats import NodeStats, parse_nvidia_smi
from raylite.dashboard.prometheus import render
from raylite.train._internal.dashboard_feed import RunFeed
from raylite.util import metrics as M

parser = pytest.importorskip("prometheus_client.parser", reason="prometheus-client is not installed")


def parse(text: str) -> dict:
    return {f.name: f for f in parser.text_string_to_metric_families(text)}


# ---------------------------------------------------------------- util.metrics
def test_metric_arguments_are_validated_with_clear_errors():
    with pytest.raises(ValueError, match="Empty name"):
        M.Counter("")
    with pytest.raises(ValueError, match="only contain letters"):
        M.Counter("bad-name")
    with pytest.raises(TypeError, match="tag_keys should be a tuple"):
        M.Counter("unit_c1", tag_keys="route")
    with pytest.raises(ValueError, match="needs boundaries"):
        M.Histogram("unit_h0")
    with pytest.raises(ValueError, match="strictly increasing"):
        M.Histogram("unit_h1", boundaries=[1, 1, 2])
    with pytest.raises(ValueError, match="> 0"):
        M.Histogram("unit_h2", boundaries=[0, 1])


def test_tags_are_checked_and_defaults_apply():
    c = M.Counter("unit_requests", "help", tag_keys=("route", "code"))
    with pytest.raises(ValueError, match="Missing value for tag key"):
        c.inc()
    with pytest.raises(ValueError, match="Unrecognized tag key 'nope'"):
        c.inc(tags={"route": "/", "code": "200", "nope": "x"})
    with pytest.raises(TypeError, match="Tag values must be str"):
        c.inc(tags={"route": "/", "code": 200})
    with pytest.raises(ValueError, match="value must be >0"):
        c.inc(0, tags={"route": "/", "code": "200"})
    assert c.set_default_tags({"route": "/"}) is c
    c.inc(tags={"code": "200"})
    c.inc(2, tags={"code": "200"})
    assert c._values[("/", "200")] == 3.0
    assert c.info["default_tags"] == {"route": "/"}


def test_same_name_shares_values_and_a_kind_clash_is_refused():
    M.Gauge("unit_shared").set(1)
    g = M.Gauge("unit_shared")
    g.set(5)
    assert M.Gauge("unit_shared")._values[()] == 5.0
    with pytest.raises(ValueError, match="already exists in this process as a gauge"):
        M.Counter("unit_shared")


def test_snapshot_then_families_then_prometheus_text():
    c = M.Counter("unit_snap_requests", "Requests.", tag_keys=("route",))
    c.inc(tags={"route": "/a"})
    h = M.Histogram("unit_snap_latency_s", "Latency.", boundaries=[0.1, 1.0])
    for v in (0.05, 0.5, 5):
        h.observe(v)
    snap = json.loads(json.dumps(M._REGISTRY.snapshot()))
    other = json.loads(json.dumps(snap))  # a second process with the same values
    fams = parse(render(cluster_metrics.user_families([snap, other])))
    total = fams["unit_snap_requests"]  # the parser strips _total from a counter family
    assert total.type == "counter"
    assert [(s.labels, s.value) for s in total.samples if s.name.endswith("_total")] == [({"route": "/a"}, 2.0)]
    hist = fams["unit_snap_latency_s"]
    buckets = {s.labels["le"]: s.value for s in hist.samples if s.name.endswith("_bucket")}
    assert buckets == {"0.1": 2.0, "1.0": 4.0, "+Inf": 6.0}
    assert [s.value for s in hist.samples if s.name.endswith("_count")] == [6.0]


# ---------------------------------------------------------------- ring buffer
def test_timeseries_is_bounded_and_aligned():
    ts = TimeSeriesStore(capacity=3, max_series=2)
    ts.add({"a": 1}, t=1)
    ts.add({"a": 2, "b": 5}, t=2)
    assert ts.query(["a", "b"]) == {"time": [1, 2], "a": [1.0, 2.0], "b": [None, 5.0]}
    ts.add({"a": 3}, t=3)
    ts.add({"a": 4}, t=4)
    assert ts.query(["a"], since=2) == {"time": [3, 4], "a": [3.0, 4.0]}
    assert ts.query(["a"])["time"] == [2, 3, 4]  # capacity 3
    ts.add({"c": 1}, t=5)  # max_series 2: "b" (stale) leaves
    assert ts.names() == ["a", "c"]
    assert ts.latest("c") == 1.0 and ts.latest("a") is None


# ---------------------------------------------------------------- the head's families
def _node(alive=True, **stats):
    return SimpleNamespace(node_id=b"\x01" * 16, ip="10.0.0.1", alive=alive,
                           total={"CPU": 40000, "memory": 10 * 2**30 * 10000, "node:10.0.0.1": 10000},
                           available={"CPU": 10000, "memory": 10 * 2**30 * 10000}, stats=stats)


def test_collect_builds_every_builtin_family():
    stats = {"cpu_percent": 50.0, "num_cpus": 4, "mem_used_bytes": 2**30, "mem_total_bytes": 4 * 2**30,
             "store_used_bytes": 100, "store_spilled_bytes": 7, "store_capacity_bytes": 1000,
             "workers": [{"pid": 42, "cpu_percent": 12.5, "rss_bytes": 3 * 2**20}],
             "gpus": [{"index": 0, "utilization_percent": 80.0, "mem_used_bytes": 1, "mem_total_bytes": 2}]}
    serve = {"applications": {"app": {"deployments": {"D": {
        "replicas": [{"state": "RUNNING"}, {"state": "STARTING"}], "requests_total": 10, "errors_total": 1,
        "p50_ms": 2.0, "p99_ms": 9.0, "requests_per_s": 1.5}}}}}
    train = {"name": "run1", "status": "RUNNING", "ranks": {"0": {"metrics": {"loss": [[0, 1.0], [1, 0.5]]},
                                                                 "step_s": [[1, 0.25]]}}}
    store = SimpleNamespace(
        nodes={b"1": _node(**stats), b"2": _node(alive=False)},
        actors={1: SimpleNamespace(state=SimpleNamespace(value="ALIVE"))},
        kv={("serve", b"snapshot"): json.dumps(serve).encode(), ("train", b"run:run1"): json.dumps(train).encode()})
    fams = parse(render(cluster_metrics.collect(store, {"RUNNING": 2, "FAILED": 1})))

    def value(name, **labels):
        return [s.value for s in fams[name].samples if all(s.labels.get(k) == v for k, v in labels.items())]

    assert value("raylite_nodes", state="ALIVE") == [1.0] and value("raylite_nodes", state="DEAD") == [1.0]
    assert value("raylite_node_cpu_percent") == [50.0]
    assert value("raylite_object_store_spilled_bytes") == [7.0]
    assert value("raylite_worker_rss_bytes", pid="42") == [3.0 * 2**20]
    assert value("raylite_node_gpu_utilization_percent", gpu="0") == [80.0]
    assert value("raylite_cluster_resources_total", resource="CPU") == [4.0]
    assert value("raylite_cluster_resources_used", resource="CPU") == [3.0]
    assert not value("raylite_cluster_resources_total", resource="node:10.0.0.1")
    assert value("raylite_tasks", state="FAILED") == [1.0]
    assert value("raylite_actors", state="ALIVE") == [1.0]
    assert value("raylite_serve_requests", deployment="D") == [10.0]
    assert value("raylite_serve_replicas", state="STARTING") == [1.0]
    assert value("raylite_serve_latency_ms", quantile="0.99") == [9.0]
    assert value("raylite_train_metric", run="run1", rank="0", metric="loss") == [0.5]
    assert value("raylite_train_step_seconds", rank="0") == [0.25]


def test_two_nodes_on_one_host_count_its_cores_and_memory_once():
    machine = {"num_cpus": 2, "mem_total_bytes": 8 * 2**30, "mem_used_bytes": 2 * 2**30, "store_used_bytes": 10}
    a = {**machine, "host_id": "m1:100", "cpu_percent": 30.0, "time": 1.0}
    b = {**machine, "host_id": "m1:100", "cpu_percent": 40.0, "time": 2.0}  # the same machine, sampled later
    other = {**machine, "host_id": "m2:100", "cpu_percent": 10.0, "time": 1.5, "num_cpus": 4}
    nodes = {bytes([i]): SimpleNamespace(**{**vars(_node(**st)), "node_id": bytes([i]) * 16})
             for i, st in enumerate((a, b, other))}
    fams = parse(render(cluster_metrics.collect(SimpleNamespace(nodes=nodes, actors={}, kv={}), {})))

    def value(name):
        return [s.value for s in fams[name].samples]

    assert value("raylite_cluster_mem_total_bytes") == [16.0 * 2**30]  # two machines, not three
    assert value("raylite_cluster_cpu_percent") == [pytest.approx((40.0 * 2 + 10.0 * 4) / 6)]
    assert value("raylite_cluster_object_store_used_bytes") == [30.0]  # each node's own store still counts
    assert NodeStats().sample([], None)["host_id"]


def test_bad_feed_values_are_ignored():
    store = SimpleNamespace(nodes={}, actors={}, kv={("serve", b"snapshot"): b"not json",
                                                       ("train", b"run:x"): b"[1, 2]",
                                                       ("metrics", b"p"): b'{"metrics": [{"name": 3}]}'})
    assert parse(render(cluster_metrics.collect(store)))["raylite_actors"]


def test_label_values_are_escaped():
    text = render([{"name": "x", "type": "gauge", "help": "h",
                    "samples": [[cluster_metrics.series_key("x", {"a": 'q"\\\n'}), math.pi]]}])
    assert [s.labels for s in parse(text)["x"].samples] == [{"a": 'q"\\\n'}]


# ---------------------------------------------------------------- node stats, train feed
def test_nvidia_smi_rows_and_no_gpu_means_no_rows():
    rows = parse_nvidia_smi("0, NVIDIA H100, 37, 1024, 81559\nbroken line\n")
    assert rows == [{"index": 0, "name": "NVIDIA H100", "utilization_percent": 37.0,
                     "mem_used_bytes": 2**30, "mem_total_bytes": 81559 * 2**20}]
    stats = NodeStats()
    stats._smi = None
    out = stats.sample([{"pid": __import__("os").getpid()}], SimpleNamespace(used_bytes=5))
    assert "gpus" not in out and out["store_used_bytes"] == 5 and out["workers"][0]["rss_bytes"] > 0


def test_train_feed_keeps_per_rank_points_and_step_durations():
    written = {}
    now = [0.0]
    feed = RunFeed("exp", "TorchTrainer", 2, put=lambda k, v: written.__setitem__(k, json.loads(v)),
                   clock=lambda: now[0])
    feed.attempt(1)
    for step in range(3):
        for rank in (0, 1):
            feed.report(rank, step, {"loss": 1.0 / (step + 1), "tag": "x"}, timestamp=100 + step * (1 + rank))
    feed.publish()  # throttled: the attempt was just published
    now[0] = 5.0
    feed.publish()
    doc = written["run:exp"]
    assert doc["ranks"]["1"]["metrics"]["loss"] == [[0, 1.0], [1, 0.5], [2, 1 / 3]]
    assert "tag" not in doc["ranks"]["0"]["metrics"]
    assert doc["ranks"]["1"]["step_s"] == [[1, 2.0], [2, 2.0]]
    feed.finished("FINISHED", None)
    assert written["run:exp"]["status"] == "FINISHED"


def test_grafana_dashboard_queries_only_metrics_raylite_exports():
    import pathlib
    import re

    path = pathlib.Path(__file__).resolve().parents[2] / "grafana" / "raylite-dashboard.json"
    dash = json.loads(path.read_text())
    used = {m for p in dash["panels"] for t in p["targets"] for m in re.findall(r"raylite_[a-z_]+", t["expr"])}
    source = (pathlib.Path(cluster_metrics.__file__)).read_text()
    exported = set(re.findall(r'"(raylite_[a-z_]+)"', source))
    assert used and used <= exported, f"the Grafana dashboard queries unknown metrics: {used - exported}"


def test_gpus_are_read_with_nvidia_smi_where_it_exists(tmp_path, monkeypatch):
    fake = tmp_path / "nvidia-smi"
    fake.write_text("#!/bin/sh\ncase \"$1\" in --query-compute-apps*) echo \"$PPID, 512\";;\n"
                    "*) echo '0, Fake GPU, 55, 2048, 16384'; echo '1, Fake GPU, 5, 0, 16384';; esac\n")
    fake.chmod(0o755)
    monkeypatch.setenv("PATH", f"{tmp_path}:{__import__('os').environ['PATH']}")
    stats = NodeStats(gpu_interval_s=0)
    me = __import__("os").getpid()
    out = stats.sample([{"pid": me, "gpu_ids": [0]}], SimpleNamespace())
    assert [g["utilization_percent"] for g in out["gpus"]] == [55.0, 5.0]
    assert out["gpus"][0]["mem_used_bytes"] == 2 * 2**30
    assert out["workers"][0]["gpu_mem_bytes"] == 512 * 2**20  # the fake reports its parent: us


def test_shutdown_flushes_recorded_values_first(monkeypatch):
    import raylite

    calls = []
    monkeypatch.setattr(M._REGISTRY, "flush", lambda: calls.append("flush") or True)
    if raylite.is_initialized():
        raylite.shutdown()
    calls.clear()
    raylite.shutdown()  # no cluster: still asks the registry to flush first, and does not fail
    assert calls == ["flush"]
