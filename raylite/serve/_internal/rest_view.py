"""What the controller tells the Serve REST API (`get_rest_details`): every application,
deployment and replica with the facts Ray's ServeInstanceDetails carries, as plain data.

The controller only gathers; `rest_details` turns this into Ray's JSON shape.
"""

from __future__ import annotations

import os
import time
from typing import Any

import raylite
from raylite.serve._internal import controller_status


def _wall_clock(monotonic_s: float) -> float:
    """A replica's start (kept on the monotonic clock) as a Unix time; 0 when unknown."""
    return time.time() - (time.monotonic() - monotonic_s) if monotonic_s else 0.0


def _deployment(dep: Any) -> dict:
    config = dep.config
    actor_options = dict(dep.target.get("ray_actor_options") or {})
    required = {"CPU": actor_options.get("num_cpus", 1)}
    if actor_options.get("num_gpus"):
        required["GPU"] = actor_options["num_gpus"]
    if actor_options.get("memory"):
        required["memory"] = actor_options["memory"]
    required.update(actor_options.get("resources") or {})
    replicas = [{"replica_id": r.replica_id, "state": r.state, "actor_name": r.actor_name,
                 "node_id": r.info.get("node_id") or r.node_id or None, "pid": r.info.get("pid"),
                 "start_time_s": _wall_clock(r.started_at)} for r in dep.replicas.values()]
    return {"status": dep.status, "status_trigger": controller_status.status_trigger(dep), "message": dep.message,
            "target_num_replicas": dep.target_replicas, "required_resources": required,
            "config": {k: config.get(k) for k in ("num_replicas", "max_ongoing_requests", "max_queued_requests",
                                                   "user_config", "autoscaling_config",
                                                   "graceful_shutdown_wait_loop_s", "graceful_shutdown_timeout_s",
                                                   "health_check_period_s", "health_check_timeout_s")
                       if config.get(k) is not None},
            "ray_actor_options": {k: v for k, v in actor_options.items() if k != "runtime_env"},
            "replicas": replicas}


def rest_view(ctrl: Any) -> dict:
    ctx = raylite.get_runtime_context()
    apps = {}
    for name, app in ctrl.apps.items():
        deps = {dname: _deployment(dep) for dname, dep in controller_status.app_deployments(ctrl, name, app)}
        apps[name] = {"status": app["status"], "message": app.get("message", ""),
                      "route_prefix": app.get("route_prefix"), "last_deployed_time_s": app.get("deployed_at", 0.0),
                      "deployments": deps}
    return {"controller": {"node_id": ctx.get_node_id(), "actor_id": ctx.get_actor_id(),
                           "pid": os.getpid()},
            "proxies": controller_status.status_dict(ctrl)["proxies"],
            "proxy_location": ctrl.proxy_location, "http_options": dict(ctrl.http_options),
            "applications": apps}
