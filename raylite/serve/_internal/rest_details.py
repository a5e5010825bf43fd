"""Ray's ServeInstanceDetails JSON (GET /api/serve/applications/), from the controller's view.

Pure: `instance_details(view, configs, building, failed, api_type)` where `view` is what the
controller's `get_rest_details` returns (None: Serve is not running), `configs` the documents
deployed through `PUT` / `serve deploy` (application -> its config section), `building` the
applications whose deploy task still runs (name -> start time) and `failed` those whose task
failed (name -> reason). Ray's own `serve status` / `serve shutdown` and KubeRay validate this
JSON against Ray's pydantic models, so every field here has the name and type Ray's has; fields
raylite cannot know are null or empty, as Ray's models allow.
"""

from __future__ import annotations

API_TYPES = ("imperative", "declarative")
_HTTP_FIELDS = ("host", "port", "root_path", "request_timeout_s", "keep_alive_timeout_s")
_DEPLOYMENT_FIELDS = ("num_replicas", "max_ongoing_requests", "max_queued_requests", "user_config",
                      "autoscaling_config", "graceful_shutdown_wait_loop_s", "graceful_shutdown_timeout_s",
                      "health_check_period_s", "health_check_timeout_s")
_ACTOR_FIELDS = ("num_cpus", "num_gpus", "memory", "resources", "accelerator_type")


def empty() -> dict:
    """Ray's answer when Serve does not run: `serve shutdown` reads controller_info.node_id None."""
    return {"controller_info": {}, "proxies": {}, "applications": {}, "target_capacity": None}


def _actor_details(node_id: str | None = None, actor_id: str | None = None, actor_name: str | None = None,
                   pid: int | None = None) -> dict:
    return {"node_id": node_id, "node_ip": None, "node_instance_id": None, "actor_id": actor_id,
            "actor_name": actor_name, "worker_id": None, "log_file_path": None}


def _deployment_config(name: str, dep: dict) -> dict:
    cfg = {"name": name}
    cfg.update({k: v for k, v in dep.get("config", {}).items() if k in _DEPLOYMENT_FIELDS and v is not None})
    actor = {k: v for k, v in dep.get("ray_actor_options", {}).items() if k in _ACTOR_FIELDS and v is not None}
    if actor:
        cfg["ray_actor_options"] = actor
    return cfg


def _deployment(name: str, dep: dict) -> dict:
    replicas = [{**_actor_details(r.get("node_id"), None, r.get("actor_name")), "replica_id": r["replica_id"],
                 "state": r["state"], "pid": r.get("pid"), "start_time_s": float(r.get("start_time_s") or 0.0)}
                for r in dep.get("replicas", [])]
    return {"name": name, "status": dep["status"], "status_trigger": dep["status_trigger"],
            "message": dep.get("message", ""), "deployment_config": _deployment_config(name, dep),
            "target_num_replicas": int(dep.get("target_num_replicas") or 0),
            "required_resources": dep.get("required_resources", {}), "replicas": replicas,
            "recent_dead_replicas": []}


def _app_config(doc: dict | None) -> dict | None:
    if not doc:
        return None
    apps = doc.get("applications") or [None]
    return apps[0]


def _app(name: str, app: dict | None, doc: dict | None, building_s: float | None, failed: str | None) -> dict:
    app_config = _app_config(doc)
    route_prefix = (app or {}).get("route_prefix", (app_config or {}).get("route_prefix", "/"))
    out = {"name": name, "route_prefix": route_prefix, "docs_path": None,
           "status": "RUNNING", "message": "", "last_deployed_time_s": 0.0,
           "deployed_app_config": app_config, "source": "declarative" if doc is not None else "imperative",
           "deployments": {}, "external_scaler_enabled": bool((app_config or {}).get("external_scaler_enabled")),
           "deployment_topology": None}
    deployed_s = float((app or {}).get("last_deployed_time_s") or 0.0)
    if app is not None:
        out["deployments"] = {d: _deployment(d, dep) for d, dep in app.get("deployments", {}).items()}
    if failed is not None:
        out.update(status="DEPLOY_FAILED", message=f"Deploying application {name!r} failed:\n{failed}",
                   last_deployed_time_s=building_s or deployed_s)
    elif app is None or (building_s is not None and deployed_s < building_s):
        # the new config has not reached the controller yet: what runs is the previous one
        out.update(status="DEPLOYING", message="Importing and deploying the application.",
                   last_deployed_time_s=building_s or 0.0)
    else:
        out.update(status=app["status"], message=app.get("message", ""), last_deployed_time_s=deployed_s)
    return out


def instance_details(view: dict | None, configs: dict[str, dict], building: dict[str, float],
                     failed: dict[str, str], api_type: str | None = None) -> dict:
    if view is None and not building and not failed:
        return empty()
    view = view or {"applications": {}, "proxies": {}, "http_options": {}, "proxy_location": "EveryNode",
                    "controller": {}}
    target_capacity = next((d.get("target_capacity") for d in configs.values() if "target_capacity" in d), None)
    apps = {}
    names = list(view["applications"]) + [n for n in (*building, *failed) if n not in view["applications"]]
    for name in names:
        app = _app(name, view["applications"].get(name), configs.get(name), building.get(name), failed.get(name))
        if api_type is None or app["source"] == api_type:
            apps[name] = app
    ctrl = view.get("controller") or {}
    http = {k: view["http_options"][k] for k in _HTTP_FIELDS if k in view.get("http_options", {})}
    return {
        "controller_info": _actor_details(ctrl.get("node_id"), ctrl.get("actor_id"), "SERVE_CONTROLLER_ACTOR")
        if ctrl else {},
        "proxy_location": view.get("proxy_location") or "EveryNode",
        "http_options": http or None,
        "grpc_options": {"port": 9000, "grpc_servicer_functions": [], "request_timeout_s": None},
        "proxies": {node: {**_actor_details(node), "status": status} for node, status in view["proxies"].items()},
        "applications": apps,
        "target_capacity": target_capacity,
        "target_groups": [],
    }
