"""State rows as Ray 2.60's own state client (`ray list/get/summary`) validates them.

Ray's client turns every row into a strict schema (ActorState, TaskState, ObjectState, ...):
required fields must be there and enum-like fields must hold one of Ray's values. raylite's
rows already carry Ray's names; what differs is asked for only by Ray's client, which always
sends `timeout=` (raylite's own client never does), so raylite's `raylite list` and
`raylite.util.state` keep raylite's richer values (an object's PENDING task, a BORROWED
reference) while Ray's client gets the nearest value it accepts.
"""

from __future__ import annotations

from typing import Any

_TASK_STATES = {"NIL", "PENDING_ARGS_AVAIL", "PENDING_NODE_ASSIGNMENT", "PENDING_OBJ_STORE_MEM_AVAIL",
                "PENDING_ARGS_FETCH", "SUBMITTED_TO_WORKER", "PENDING_ACTOR_TASK_ARGS_FETCH",
                "PENDING_ACTOR_TASK_ORDERING_OR_CONCURRENCY", "RUNNING", "RUNNING_IN_RAY_GET",
                "RUNNING_IN_RAY_WAIT", "FINISHED", "FAILED", "GETTING_AND_PINNING_ARGS"}
_REFERENCE_TYPES = {"ACTOR_HANDLE", "PINNED_IN_MEMORY", "LOCAL_REFERENCE", "USED_BY_PENDING_TASK",
                    "CAPTURED_IN_OBJECT", "UNKNOWN_STATUS"}
_WORKER_TYPES = {"WORKER", "DRIVER", "SPILL_WORKER", "RESTORE_WORKER"}


def from_ray_client(query: Any) -> bool:
    """Ray's state client sends `timeout` with every list, get and summary request."""
    return "timeout" in query


def _task_state(state: Any) -> str:
    state = str(state or "NIL")
    if state in _TASK_STATES:
        return state
    return "PENDING_NODE_ASSIGNMENT" if state.startswith("PENDING") else "NIL"


def _task(row: dict[str, Any]) -> dict[str, Any]:
    return {**row, "state": _task_state(row.get("state")), "job_id": row.get("job_id") or "",
            "parent_task_id": row.get("parent_task_id") or ""}


def _object(row: dict[str, Any]) -> dict[str, Any]:
    ref = row.get("reference_type")
    return {**row, "task_status": _task_state(row.get("task_status")), "attempt_number": row.get("attempt_number", 0),
            "reference_type": ref if ref in _REFERENCE_TYPES else "LOCAL_REFERENCE",
            "call_site": row.get("call_site") or "disabled",
            "type": row.get("type") if row.get("type") in _WORKER_TYPES else "WORKER",
            "pid": row.get("pid") or 0, "ip": row.get("ip") or ""}


def _actor(row: dict[str, Any]) -> dict[str, Any]:
    return {**row, "job_id": row.get("job_id") or ""}


def _placement_group(row: dict[str, Any]) -> dict[str, Any]:
    return {**row, "creator_job_id": row.get("creator_job_id") or ""}


def _worker(row: dict[str, Any]) -> dict[str, Any]:
    return {**row, "node_id": row.get("node_id") or "", "pid": row.get("pid") or 0}


_CONVERT = {"tasks": _task, "objects": _object, "actors": _actor, "placement_groups": _placement_group,
            "workers": _worker}


def for_ray(resource: str, rows: list[dict[str, Any]], exclude_driver: bool) -> list[dict[str, Any]]:
    """Rows as Ray's schema accepts them; like Ray, `exclude_driver` (its default) hides drivers
    from the worker list and driver tasks from the task list."""
    convert = _CONVERT.get(resource)
    out = [convert(r) for r in rows] if convert else list(rows)
    if exclude_driver and resource == "workers":
        out = [r for r in out if r.get("worker_type") != "DRIVER"]
    if exclude_driver and resource == "tasks":
        out = [r for r in out if r.get("type") != "DRIVER_TASK"]
    return out
