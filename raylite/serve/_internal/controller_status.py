"""The controller's read side: status in Ray's shapes, request metrics and the KV snapshot,
autoscaling glue around the pure policy, and the "this replica can never be placed" check."""

from __future__ import annotations

import json
import time
from collections import deque
from collections.abc import Iterator
from typing import Any

from raylite.serve._internal.deployment_state import (
    STARTING,
    DeploymentRecord,
    ReplicaRecord,
    percentile,
)

WINDOW_S = 10.0


class Metrics:
    """Per-deployment request counts, errors and latencies over a sliding window."""

    def __init__(self) -> None:
        self.last: dict[str, tuple[int, int]] = {}
        self.events: dict[tuple[str, str], deque] = {}
        self.lat: dict[tuple[str, str], deque] = {}
        self.totals: dict[tuple[str, str], list[int]] = {}

    def add(self, dep: DeploymentRecord, rec: ReplicaRecord, m: dict) -> None:
        key = (dep.app_name, dep.name)
        now = time.time()
        prev = self.last.get(rec.replica_id, (0, 0))
        dreq, derr = m["requests"] - prev[0], m["errors"] - prev[1]
        self.last[rec.replica_id] = (m["requests"], m["errors"])
        ev = self.events.setdefault(key, deque(maxlen=4096))
        ev.append((now, dreq, derr))
        tot = self.totals.setdefault(key, [0, 0])
        tot[0] += dreq
        tot[1] += derr
        lat = self.lat.setdefault(key, deque(maxlen=20000))
        for x in m["latencies_ms"]:
            lat.append((now, x))

    def summary(self, app: str, dname: str) -> dict:
        key = (app, dname)
        now = time.time()
        ev = [e for e in self.events.get(key, ()) if now - e[0] <= WINDOW_S]
        nreq = sum(e[1] for e in ev)
        nerr = sum(e[2] for e in ev)
        span = max(1.0, min(WINDOW_S, now - ev[0][0] + 0.5)) if ev else WINDOW_S
        lats = sorted(x for t, x in self.lat.get(key, ()) if now - t <= WINDOW_S)
        tot = self.totals.get(key, [0, 0])
        return {"requests_per_s": round(nreq / span, 2), "error_rate": round(nerr / nreq, 4) if nreq else 0.0,
                "p50_ms": round(percentile(lats, 0.5), 3), "p90_ms": round(percentile(lats, 0.9), 3),
                "p99_ms": round(percentile(lats, 0.99), 3), "requests_total": tot[0], "errors_total": tot[1]}


def app_deployments(ctrl: Any, name: str, app: dict) -> Iterator[tuple[str, DeploymentRecord]]:
    """The deployments of one application that the controller has records for."""
    for dname in app["deployments"]:
        dep = ctrl.deps.get((name, dname))
        if dep is not None:
            yield dname, dep


def status_dict(ctrl: Any) -> dict:
    """Ray's ServeStatus as plain data (serve.status() turns it into dataclasses)."""
    apps = {}
    for name, app in ctrl.apps.items():
        deps = {}
        for dname, dep in app_deployments(ctrl, name, app):
            states: dict[str, int] = {}
            for r in dep.replicas.values():
                states[r.state] = states.get(r.state, 0) + 1
            deps[dname] = {"name": dname, "status": dep.status, "status_trigger": status_trigger(dep),
                           "replica_states": states, "message": dep.message}
        apps[name] = {"name": name, "status": app["status"], "message": app.get("message", ""),
                      "last_deployed_time_s": app.get("deployed_at", 0.0), "deployments": deps,
                      "route_prefix": app.get("route_prefix")}
    proxies = {node: "HEALTHY" for node in ctrl.proxies.proxies}
    for node in ctrl.proxies.errors:
        proxies[node] = "UNHEALTHY"
    return {"proxies": proxies, "applications": apps, "target_capacity": None}


def status_trigger(dep: DeploymentRecord) -> str:
    if dep.status == "DEPLOY_FAILED":
        return "REPLICA_STARTUP_FAILED"
    if dep.status == "HEALTHY":
        return "CONFIG_UPDATE_COMPLETED"
    return "CONFIG_UPDATE_STARTED"


async def write_snapshot(ctrl: Any) -> None:
    """Publish apps, deployments, replicas and metrics as JSON in the KV ("serve", "snapshot")."""
    from raylite.experimental.internal_kv import _internal_kv_put_async

    apps = {}
    for name, app in ctrl.apps.items():
        deps = {}
        for dname, dep in app_deployments(ctrl, name, app):
            deps[dname] = {
                "status": dep.status, "message": dep.message, "target_replicas": dep.target_replicas,
                "replicas": [{"replica_id": r.replica_id, "state": r.state, "node_id": r.info.get("node_id"),
                              "pid": r.info.get("pid"), "ongoing_requests": r.ongoing,
                              "actor_name": r.actor_name} for r in dep.replicas.values()],
                **ctrl.metrics.summary(name, dname)}
        apps[name] = {"status": app["status"], "message": app.get("message", ""),
                      "route_prefix": app.get("route_prefix"), "deployments": deps}
    snap = {"time": time.time(), "applications": apps, "http_options": {
        k: v for k, v in ctrl.http_options.items() if k in ("host", "port")},
        "proxies": status_dict(ctrl)["proxies"]}
    try:
        await _internal_kv_put_async("snapshot", json.dumps(snap, default=str).encode(), namespace="serve")
    except Exception:  # noqa: BLE001 - the next round tries again
        pass


# ------------------------------------------------------------ autoscaling glue
def make_autoscaler(cfg: dict, dep: DeploymentRecord) -> Any:
    """The built-in request-based policy, or the deployment's custom policy."""
    from raylite.serve._internal.custom_autoscaling import CustomPolicyAutoscaler, is_custom

    if is_custom(cfg):
        return CustomPolicyAutoscaler(dict(cfg), dep.app_name, dep.name)
    from raylite.serve._internal.autoscaling import AutoscalingPolicy

    return AutoscalingPolicy(dict(cfg))


def wants_custom_metrics(dep: DeploymentRecord) -> bool:
    """Whether replicas should report `record_autoscaling_stats()` (autoscaling is on)."""
    return bool(dep.config.get("autoscaling_config"))


def record_replica(dep: DeploymentRecord, rid: str, ongoing: float, stats: dict | None = None) -> None:
    now = time.monotonic()
    dep.autoscaler.record_replica_metrics(rid, float(ongoing), now)
    if stats and hasattr(dep.autoscaler, "record_custom_metrics"):
        dep.autoscaler.record_custom_metrics(rid, stats, now)


def record_handle(dep: DeploymentRecord, hid: str, queued: float) -> None:
    dep.autoscaler.record_handle_metrics(hid, float(queued), time.monotonic())


def drop_replica(dep: DeploymentRecord, rid: str) -> None:
    try:
        dep.autoscaler.drop_replica(rid)
    except (AttributeError, NotImplementedError):
        pass


def autoscale(ctrl: Any, dep: DeploymentRecord, now: float) -> None:
    if dep.autoscaler is None or dep.status == "DEPLOY_FAILED":
        return
    current = dep.target_replicas
    running = dep.running()
    want = int(dep.autoscaler.decide(current, time.monotonic(), len(running),
                                      running_ids=[r.replica_id for r in running]))
    g = dep.config.get("gang_scheduling_config")
    if g and want > 0:  # whole gangs only: round up, never below what the policy asked for
        size = int(g["gang_size"])
        want = -(-want // size) * size
    if want != current:
        dep.target_replicas = want
        dep.message = f"{'Upscaling' if want > current else 'Downscaling'} from {current} to {want} replicas."


def autoscale_app(ctrl: Any, app_name: str, now: float) -> None:
    """One tick of an application-level policy over the app's autoscaling deployments."""
    from raylite.serve._internal.custom_autoscaling import decide_for_app

    app = ctrl.apps.get(app_name)
    policy = ctrl.app_policies.get(app_name)
    if app is None or policy is None:
        return
    members = {}
    for dname in app["deployments"]:
        dep = ctrl.deps.get((app_name, dname))
        if dep is None or dep.autoscaler is None or dep.status == "DEPLOY_FAILED":
            continue
        members[dname] = (dep.autoscaler, dep.target_replicas, [r.replica_id for r in dep.running()])
    if not members:
        return
    for dname, want in decide_for_app(policy, members, time.monotonic()).items():
        dep = ctrl.deps[(app_name, dname)]
        g = dep.config.get("gang_scheduling_config")
        if g and want > 0:
            want = -(-want // int(g["gang_size"])) * int(g["gang_size"])
        if want != dep.target_replicas:
            current = dep.target_replicas
            dep.target_replicas = want
            dep.message = f"{'Upscaling' if want > current else 'Downscaling'} from {current} to {want} replicas."


# ------------------------------------------------------------ capacity
_last_check: dict[str, float] = {}


def infeasible_message(ctrl: Any, dep: DeploymentRecord, rec: ReplicaRecord) -> str:
    """A message when a pending replica can never be placed: Serve's replicas ask for more of a
    resource than the whole cluster has. "" while it may still start."""
    import raylite

    now = time.monotonic()
    if now - rec.started_at < 3.0 or now - _last_check.get(rec.replica_id, 0.0) < 1.0:
        return ""
    _last_check[rec.replica_id] = now
    if rec.info:
        return ""
    total = raylite.cluster_resources()
    demand: dict[str, float] = {}
    for d in ctrl.deps.values():
        per = _per_replica(d)
        for r in d.replicas.values():
            if r.state in (STARTING, "RUNNING"):
                for k, v in per.items():
                    demand[k] = demand.get(k, 0.0) + v
    per = _per_replica(dep)
    for k, need in demand.items():
        if need > total.get(k, 0.0) + 1e-9 and per.get(k, 0):
            return (f"deployment {dep.name!r} (app {dep.app_name!r}) cannot place its replicas: each replica "
                    f"requests {_fmt(per)}; Serve's {_count(ctrl)} replicas need {k}={need:g} in total but the "
                    f"cluster has {k}={total.get(k, 0.0):g} ({_fmt(total)}). Lower num_replicas or the "
                    "ray_actor_options resources, or add nodes.")
    return ""


def unplaceable_group_message(ctrl: Any, dep: DeploymentRecord) -> str:
    """A message when a replica's placement group can never be placed beside Serve's other
    deployments: their live replicas plus this group's bundles ask for more of a resource than
    the whole cluster has (a TP=2 LLM replica's two 1-CPU bundles and a 1-CPU ingress on two
    1-CPU nodes). "" while it may still be placed. Names what the others hold and the fix."""
    import raylite

    bundles = [dict(b) for b in dep.target.get("placement_group_bundles") or []]
    need: dict[str, float] = {}
    for b in bundles:
        for k, v in b.items():
            need[k] = need.get(k, 0.0) + float(v)
    held: dict[str, dict[str, float]] = {}  # other deployment -> what its live replicas hold
    for d in ctrl.deps.values():
        if d is dep:
            continue
        per = _group_need(d) or _per_replica(d)
        for r in d.replicas.values():
            if r.state in (STARTING, "RUNNING"):
                mine = held.setdefault(d.name, {})
                for k, v in per.items():
                    mine[k] = mine.get(k, 0.0) + v
    total = raylite.cluster_resources()
    for k, want in need.items():
        others = sum(h.get(k, 0.0) for h in held.values())
        if want > 1e-9 and want + others > total.get(k, 0.0) + 1e-9:
            holders = ", ".join(f"{name!r} holds {k}={h[k]:g}" for name, h in sorted(held.items()) if h.get(k))
            fix = (f"Give the other deployments fewer {k} (for an LLM app's ingress: "
                   "ingress_deployment_config={'ray_actor_options': {'num_cpus': 0}}), "
                   "lower the replica's placement_group_bundles, or add nodes.")
            return (f"deployment {dep.name!r} (app {dep.app_name!r}) can never be placed: its replica's "
                    f"placement group's bundles {[_fmt(b) for b in bundles]} need {k}={want:g}"
                    + (f" beside what Serve's other replicas hold ({holders})" if holders else "")
                    + f", but the cluster has {k}={total.get(k, 0.0):g} ({_fmt(total)}). {fix}")
    return ""


def _group_need(dep: DeploymentRecord) -> dict[str, float]:
    out: dict[str, float] = {}
    for b in dep.target.get("placement_group_bundles") or []:
        for k, v in b.items():
            out[k] = out.get(k, 0.0) + float(v)
    return out


def _per_replica(dep: DeploymentRecord) -> dict[str, float]:
    opts = dict(dep.target.get("ray_actor_options") or {})
    out = {"CPU": float(opts.get("num_cpus", 1))}
    if opts.get("num_gpus"):
        out["GPU"] = float(opts["num_gpus"])
    if opts.get("memory"):
        out["memory"] = float(opts["memory"])
    for k, v in (opts.get("resources") or {}).items():
        out[k] = float(v)
    return {k: v for k, v in out.items() if v}


def _count(ctrl: Any) -> int:
    return sum(len(d.live()) for d in ctrl.deps.values())


def _fmt(res: dict) -> str:
    keep = {k: v for k, v in res.items() if not k.startswith("node:") and k != "object_store_memory"}
    return "{" + ", ".join(f"{k}: {v:g}" for k, v in sorted(keep.items())) + "}"
