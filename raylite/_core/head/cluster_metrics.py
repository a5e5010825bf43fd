"""The cluster's metrics, computed by the head from what it already holds (pure, no I/O).

One function, `collect()`, turns the head's tables into Prometheus-shaped families:
node load reports (machine CPU/memory, object store, per-worker CPU/RSS, GPUs), the
actor table, task events, and three feeds that libraries and user code write to the
KV store through the public API:
- namespace "metrics": one JSON value per process from `raylite.util.metrics`;
- namespace "serve", key "snapshot": Serve's applications, deployments and request stats;
- namespace "train", keys "run:<name>": each Train run's status and per-rank metrics.

Each family is {"name", "type", "help", "samples": [[series key, value], ...]} where a
series key is the Prometheus sample name with its labels (`raylite_tasks{state="RUNNING"}`).
The head renders them at `/metrics` and, every few seconds, appends every series to its
ring buffer (timeseries.py), from which the dashboard draws its charts.
"""

from __future__ import annotations

import json
import math
from collections.abc import Iterable, Mapping
from typing import Any

_SCALE = 10000  # resources.py fixed point
_BYTES_RESOURCES = ("memory", "object_store_memory")


def per_host(samples: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """One sample per host (the newest) from the nodes' samples, for machine-wide figures;
    a sample without a host id (an older node) stands for a host of its own."""
    newest: dict[Any, dict[str, Any]] = {}
    for i, s in enumerate(samples):
        key = s.get("host_id") or ("node", i)
        if key not in newest or s.get("time", 0) > newest[key].get("time", 0):
            newest[key] = s
    return list(newest.values())


def series_key(name: str, labels: Mapping[str, Any] | None = None) -> str:
    if not labels:
        return name
    body = ",".join(f'{k}="{_escape(str(v))}"' for k, v in labels.items())
    return f"{name}{{{body}}}"


def _escape(value: str) -> str:
    return value.replace("\\", "\\\\").replace("\n", "\\n").replace('"', '\\"')


class _Families:
    def __init__(self) -> None:
        self.out: dict[str, dict[str, Any]] = {}

    def add(self, name: str, kind: str, help_: str, value: float, suffix: str = "", **labels: Any) -> None:
        fam = self.out.setdefault(name, {"name": name, "type": kind, "help": help_, "samples": []})
        if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value):
            return
        fam["samples"].append([series_key(name + suffix, labels), float(value)])


def collect(store: Any, task_states: Mapping[str, int] | None = None) -> list[dict[str, Any]]:
    """Every family the head knows now; `store` is the ControlStore."""
    f = _Families()
    _nodes(f, store.nodes.values())
    _actors(f, store.actors.values())
    for state, n in sorted((task_states or {}).items()):
        f.add("raylite_tasks", "gauge", "Task attempts by state (as kept by the head's task events).", n,
              state=state)
    kv = store.kv
    _serve(f, _json(kv.get(("serve", b"snapshot"))))
    _train(f, [_json(v) for (ns, k), v in kv.items() if ns == "train" and k.startswith(b"run:")])
    families = list(f.out.values())
    families += user_families(_json(v) for (ns, _k), v in kv.items() if ns == "metrics")
    return families


def _json(raw: bytes | None) -> Any:
    if not raw:
        return None
    try:
        return json.loads(raw)
    except ValueError:
        return None


def _nodes(f: _Families, nodes: Iterable[Any]) -> None:
    totals: dict[str, float] = {}
    used: dict[str, float] = {}
    alive_stats = []
    nodes = list(nodes)
    for state, alive in (("ALIVE", True), ("DEAD", False)):
        f.add("raylite_nodes", "gauge", "Nodes by state.", sum(1 for n in nodes if n.alive is alive), state=state)
    for n in nodes:
        if not n.alive:
            continue
        for k, v in n.total.items():
            if "_group_" in k or k == "bundle" or k.startswith("node:"):
                continue
            totals[k] = totals.get(k, 0.0) + v / _SCALE
            used[k] = used.get(k, 0.0) + (v - n.available.get(k, 0)) / _SCALE
        s = n.stats or {}
        if s:
            alive_stats.append(s)
        node = {"node_id": n.node_id.hex(), "ip": n.ip}
        for key, name, help_ in (
            ("cpu_percent", "raylite_node_cpu_percent", "Machine CPU use of the node, percent of all cores."),
            ("mem_used_bytes", "raylite_node_mem_used_bytes", "Machine memory in use on the node, bytes."),
            ("mem_total_bytes", "raylite_node_mem_total_bytes", "Machine memory of the node, bytes."),
            ("store_used_bytes", "raylite_object_store_used_bytes", "Object store bytes in shared memory."),
            ("store_spilled_bytes", "raylite_object_store_spilled_bytes", "Object store bytes spilled to disk."),
            ("store_capacity_bytes", "raylite_object_store_capacity_bytes", "Object store capacity, bytes."),
        ):
            if key in s:
                f.add(name, "gauge", help_, s[key], **node)
        for w in s.get("workers", []):
            labels = {**node, "pid": w.get("pid", 0)}
            f.add("raylite_worker_cpu_percent", "gauge", "CPU use of a worker process, percent of one core.",
                  w.get("cpu_percent", 0.0), **labels)
            f.add("raylite_worker_rss_bytes", "gauge", "Resident memory of a worker process, bytes.",
                  w.get("rss_bytes", 0), **labels)
            if "gpu_mem_bytes" in w:
                f.add("raylite_worker_gpu_mem_bytes", "gauge", "GPU memory a worker process uses, bytes.",
                      w["gpu_mem_bytes"], **labels)
        for g in s.get("gpus", []):
            labels = {**node, "gpu": g.get("index", 0)}
            f.add("raylite_node_gpu_utilization_percent", "gauge", "GPU utilisation, percent.",
                  g.get("utilization_percent", 0.0), **labels)
            f.add("raylite_node_gpu_mem_used_bytes", "gauge", "GPU memory in use, bytes.",
                  g.get("mem_used_bytes", 0), **labels)
            f.add("raylite_node_gpu_mem_total_bytes", "gauge", "GPU memory, bytes.",
                  g.get("mem_total_bytes", 0), **labels)
    for k in sorted(totals):
        unit = "bytes" if k in _BYTES_RESOURCES else "units (CPU: cores)"
        f.add("raylite_cluster_resources_total", "gauge", f"Logical resources of alive nodes, {unit}.",
              totals[k], resource=k)
        f.add("raylite_cluster_resources_used", "gauge", f"Logical resources in use, {unit}.",
              used[k], resource=k)
    if alive_stats:
        hosts = per_host(alive_stats)  # nodes sharing a machine share its cores and memory
        cores = sum(s.get("num_cpus", 1) for s in hosts)
        busy = sum(s.get("cpu_percent", 0.0) * s.get("num_cpus", 1) for s in hosts)
        f.add("raylite_cluster_cpu_percent", "gauge", "CPU use over all alive nodes' machines, percent.",
              busy / cores if cores else 0.0)
        for key, name, help_ in (
            ("mem_used_bytes", "raylite_cluster_mem_used_bytes", "Memory in use, all machines, bytes."),
            ("mem_total_bytes", "raylite_cluster_mem_total_bytes", "Memory, all machines (once each), bytes."),
        ):
            f.add(name, "gauge", help_, sum(s.get(key, 0) for s in hosts))
        for key, name, help_ in (
            ("store_used_bytes", "raylite_cluster_object_store_used_bytes", "Object store use, all nodes, bytes."),
            ("store_spilled_bytes", "raylite_cluster_object_store_spilled_bytes",
             "Object store bytes spilled, all nodes."),
        ):
            f.add(name, "gauge", help_, sum(s.get(key, 0) for s in alive_stats))


def _actors(f: _Families, actors: Iterable[Any]) -> None:
    counts = {"PENDING": 0, "ALIVE": 0, "RESTARTING": 0, "DEAD": 0}
    for a in actors:
        state = getattr(a.state, "value", str(a.state))
        counts[state] = counts.get(state, 0) + 1
    for state, n in counts.items():
        f.add("raylite_actors", "gauge", "Actors by state.", n, state=state)


def _serve(f: _Families, snap: Any) -> None:
    """Serve's snapshot: {"applications": {app: {"deployments": {name: {...}}}}} (lists of
    dicts with a "name" are accepted too). Per deployment: "replicas" (list of dicts with
    "state"), "requests_total", "errors_total", and "p50_ms"/"p90_ms"/"p99_ms" (or a
    "latency_ms" dict {"p50": ...})."""
    if not isinstance(snap, dict):
        return
    for app_name, app in _named(snap.get("applications")):
        for dep_name, dep in _named(app.get("deployments")):
            labels = {"application": app_name, "deployment": dep_name}
            states: dict[str, int] = {}
            for r in dep.get("replicas") or []:
                st = str(r.get("state", "UNKNOWN")) if isinstance(r, dict) else "RUNNING"
                states[st] = states.get(st, 0) + 1
            for st, n in states.items():
                f.add("raylite_serve_replicas", "gauge", "Serve replicas by state.", n, **labels, state=st)
            req = _first(dep, "requests_total", "requests", "num_requests")
            err = _first(dep, "errors_total", "errors", "num_errors")
            if req is not None:
                f.add("raylite_serve_requests_total", "counter", "Requests handled per deployment.", req, **labels)
            if err is not None:
                f.add("raylite_serve_errors_total", "counter", "Requests that failed per deployment.", err, **labels)
            lat = dep.get("latency_ms")
            if not isinstance(lat, dict):  # Serve's snapshot: "p50_ms", "p90_ms", "p99_ms"
                lat = {k[:-3]: v for k, v in dep.items() if k.startswith("p") and k.endswith("_ms")}
            if lat:
                for q, v in lat.items():
                    quantile = {"p50": "0.5", "p90": "0.9", "p95": "0.95", "p99": "0.99"}.get(q, q)
                    f.add("raylite_serve_latency_ms", "gauge", "Request latency percentiles, milliseconds.",
                          v, **labels, quantile=quantile)


def _named(items: Any) -> list[tuple[str, dict[str, Any]]]:
    if isinstance(items, dict):
        return [(str(k), v) for k, v in items.items() if isinstance(v, dict)]
    if isinstance(items, list):
        return [(str(v.get("name", i)), v) for i, v in enumerate(items) if isinstance(v, dict)]
    return []


def _first(d: Mapping[str, Any], *keys: str) -> Any:
    for k in keys:
        if isinstance(d.get(k), int | float):
            return d[k]
    return None


def _train(f: _Families, runs: Iterable[Any]) -> None:
    for run in runs:
        if not isinstance(run, dict):
            continue
        name = str(run.get("name", "?"))
        f.add("raylite_train_runs", "gauge", "Train runs by status.", 1, run=name, status=run.get("status", "?"))
        for rank, data in (run.get("ranks") or {}).items():
            for metric, points in (data.get("metrics") or {}).items():
                if points:
                    f.add("raylite_train_metric", "gauge", "Last value each rank reported with train.report().",
                          points[-1][1], run=name, rank=rank, metric=metric)
            steps = data.get("step_s") or []
            if steps:
                f.add("raylite_train_step_seconds", "gauge", "Time between a rank's last two reports, seconds.",
                      steps[-1][1], run=name, rank=rank)


def user_families(processes: Iterable[Any]) -> list[dict[str, Any]]:
    """Families of `raylite.util.metrics` values of many processes, summed per tag set.

    Counters and histograms add up across processes; a gauge keeps the newest process's
    value per tag set. A name used with two kinds keeps the first kind seen.
    """
    meta: dict[str, dict[str, Any]] = {}
    values: dict[str, dict[tuple, Any]] = {}
    procs = [p for p in processes if isinstance(p, dict)]
    for proc in sorted(procs, key=lambda p: p.get("time", 0)):
        for m in proc.get("metrics", []):
            name, kind = m.get("name"), m.get("type")
            if not isinstance(name, str) or kind not in ("counter", "gauge", "histogram"):
                continue
            if name not in meta:
                meta[name] = {"type": kind, "help": m.get("description", ""), "bounds": m.get("boundaries", [])}
                values[name] = {}
            elif meta[name]["type"] != kind:
                continue
            keys = list(m.get("tag_keys", []))
            table = values[name]
            for tag_values, value in m.get("samples", []):
                key = tuple(zip(keys, tag_values, strict=False))
                if kind == "counter":
                    table[key] = table.get(key, 0.0) + float(value)
                elif kind == "gauge":
                    table[key] = float(value)
                else:
                    acc = table.setdefault(key, {"buckets": [0] * len(value["buckets"]), "sum": 0.0, "count": 0})
                    if len(acc["buckets"]) == len(value["buckets"]):
                        acc["buckets"] = [a + b for a, b in zip(acc["buckets"], value["buckets"], strict=True)]
                        acc["sum"] += value["sum"]
                        acc["count"] += value["count"]
    out = []
    for name, m in meta.items():
        # the text format names a counter's family after its sample: "<name>_total"
        family = name + "_total" if m["type"] == "counter" and not name.endswith("_total") else name
        f = _Families()
        for key, value in values[name].items():
            labels = dict(key)
            if m["type"] == "counter":
                f.add(family, "counter", m["help"], value, **labels)
            elif m["type"] == "gauge":
                f.add(family, "gauge", m["help"], value, **labels)
            else:
                running = 0
                for bound, count in zip([*m["bounds"], math.inf], value["buckets"], strict=False):
                    running += count
                    le = "+Inf" if bound == math.inf else repr(float(bound))
                    f.add(family, "histogram", m["help"], running, "_bucket", **labels, le=le)
                f.add(family, "histogram", m["help"], value["sum"], "_sum", **labels)
                f.add(family, "histogram", m["help"], value["count"], "_count", **labels)
        out.extend(f.out.values())
    return out
