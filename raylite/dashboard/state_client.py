"""Client side of the state API (`raylite.util.state`, `raylite list/get/summary`), over HTTP.

Rows come back as `StateRow`s: dicts whose keys (Ray's field names) also read as attributes,
under Ray's class names (ActorState, TaskState, ...), so both `row.state` and `row["state"]`
work as they do with Ray's objects.
"""

from __future__ import annotations

from typing import Any

from raylite.dashboard.client import ApiClient

DEFAULT_LIMIT = 100


class StateRow(dict):
    def __getattr__(self, name: str) -> Any:
        try:
            return self[name]
        except KeyError:
            raise AttributeError(f"{type(self).__name__} has no field {name!r}") from None

    def to_dict(self) -> dict[str, Any]:
        return dict(self)


class ActorState(StateRow):
    """PENDING_CREATION -> ALIVE [-> RESTARTING -> ALIVE]* -> DEAD."""


class TaskState(StateRow):
    """PENDING_ARGS_AVAIL -> PENDING_NODE_ASSIGNMENT -> RUNNING -> FINISHED | FAILED."""


class NodeState(StateRow):
    """ALIVE -> DEAD."""


class WorkerState(StateRow):
    pass


class PlacementGroupState(StateRow):
    """PENDING -> CREATED [-> PENDING (a node died) -> CREATED]* -> REMOVED."""


class JobState(StateRow):
    """PENDING -> RUNNING -> SUCCEEDED | FAILED | STOPPED."""


class ObjectStateRow(StateRow):
    pass


ROW_TYPES: dict[str, type[StateRow]] = {
    "actors": ActorState, "tasks": TaskState, "nodes": NodeState, "workers": WorkerState,
    "placement_groups": PlacementGroupState, "jobs": JobState, "objects": ObjectStateRow,
}
ID_KEYS = {"actors": "actor_id", "tasks": "task_id", "nodes": "node_id", "workers": "worker_id",
           "placement_groups": "placement_group_id", "jobs": "submission_id", "objects": "object_id"}


def normalize_resource(name: str) -> str:
    """'placement-groups' / 'actor' / 'PLACEMENT_GROUPS' -> 'placement_groups' / 'actors'."""
    key = name.strip().lower().replace("-", "_")
    if key in ROW_TYPES:
        return key
    if key + "s" in ROW_TYPES:
        return key + "s"
    raise ValueError(f"unknown resource {name!r}; valid: {', '.join(r.replace('_', '-') for r in ROW_TYPES)}")


def parse_filter(text: str) -> tuple[str, str, str]:
    """'state=ALIVE' or 'name!=x' -> (key, predicate, value)."""
    for op in ("!=", "="):
        if op in text:
            key, value = text.split(op, 1)
            if key.strip():
                return key.strip(), op, value.strip()
    raise ValueError(f"filter {text!r} is not KEY=VALUE or KEY!=VALUE")


def _params(filters: list[Any] | None, limit: int, detail: bool) -> list[tuple[str, str]]:
    params = [("limit", str(limit)), ("detail", str(detail).lower())]
    for f in filters or []:
        key, op, value = f if isinstance(f, (tuple, list)) else parse_filter(str(f))
        params += [("filter_keys", key), ("filter_predicates", op), ("filter_values", str(value))]
    return params


def list_resource(resource: str, address: str | None = None, filters: list[Any] | None = None,
                  limit: int = DEFAULT_LIMIT, timeout: int = 30, detail: bool = False,
                  raise_on_missing_output: bool = True) -> list[StateRow]:
    resource = normalize_resource(resource)
    api = ApiClient(address, timeout_s=timeout)
    try:
        r = api.request("GET", f"/api/v0/{resource}", params=_params(filters, limit, detail))
        body = r.json()
        if r.status_code >= 400 or not body.get("result"):
            raise ValueError(body.get("msg") or r.text)
    finally:
        api.close()
    cls = ROW_TYPES[resource]
    return [cls(row) for row in body["data"]["result"]["result"]]


def get_resource(resource: str, id: str, address: str | None = None, timeout: int = 30) -> StateRow | None:
    resource = normalize_resource(resource)
    key = ID_KEYS[resource]
    if resource == "jobs" and not id.startswith("raysubmit_"):
        rows = list_resource(resource, address, limit=10**6, timeout=timeout, detail=True)
        return next((r for r in rows if id in (r.get("submission_id"), r.get("job_id"))), None)
    rows = list_resource(resource, address, [(key, "=", id)], limit=10**6, timeout=timeout, detail=True)
    if resource == "tasks" and rows:
        return max(rows, key=lambda r: r.get("attempt_number", 0))
    return rows[0] if rows else None


def summarize(resource: str, address: str | None = None, timeout: int = 30) -> dict[str, Any]:
    resource = normalize_resource(resource)
    api = ApiClient(address, timeout_s=timeout)
    try:
        body = api.json("GET", f"/api/v0/{resource}/summarize")
    finally:
        api.close()
    result = body["data"]["result"]
    if "node_id_to_summary" not in result and isinstance(result.get("result"), dict):
        result = result["result"]  # Ray's wrapper (raylite's server, like Ray's, sends it)
    return result


def timeline_events(address: str | None = None, job_id: str | None = None) -> list[dict[str, Any]]:
    api = ApiClient(address)
    try:
        return api.json("GET", "/api/v0/tasks/timeline", params={"job_id": job_id} if job_id else None)
    finally:
        api.close()
