"""raylite.util.state: Ray's state API (list_*, get_*, summarize_*, list_logs, get_log).

    from raylite.util.state import list_actors, list_tasks, get_actor, summarize_tasks
    for actor in list_actors(filters=[("state", "=", "ALIVE")]):
        print(actor.actor_id, actor.class_name, actor.state)

Rows carry Ray's field names and read both as attributes and as dict keys. Everything but
`list_objects`/`summarize_objects` goes through the head's HTTP API (like Ray's); `address`
is that API's URL (default: the cluster this process is connected to, or the one running on
this machine). `list_objects` reports every object with its size, owner, where it is (INLINE,
SHARED_MEMORY or SPILLED) and who holds references to it.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from raylite._state import (
    ObjectState,
    format_objects,
    get_cluster_demand,
    publish_autoscaler_view,
    summarize_objects,
)
from raylite._state import list_objects as _list_objects_here
from raylite.dashboard.state_client import (
    ActorState,
    JobState,
    NodeState,
    PlacementGroupState,
    StateRow,
    TaskState,
    WorkerState,
    get_resource,
    list_resource,
    summarize,
)

__all__ = [
    "ActorState", "JobState", "NodeState", "ObjectState", "PlacementGroupState", "StateRow", "TaskState",
    "WorkerState", "format_objects", "get_actor", "get_cluster_demand", "publish_autoscaler_view", "get_job", "get_log", "get_node", "get_placement_group",
    "get_task", "get_worker", "list_actors", "list_jobs", "list_logs", "list_nodes", "list_objects",
    "list_placement_groups", "list_tasks", "list_workers", "summarize_actors", "summarize_objects",
    "summarize_tasks",
]

Filters = list[tuple[str, str, Any]] | None


def list_actors(address: str | None = None, filters: Filters = None, limit: int = 100, timeout: int = 30,
                detail: bool = False, raise_on_missing_output: bool = True, _explain: bool = False) -> list[Any]:
    return list_resource("actors", address, filters, limit, timeout, detail)


def list_tasks(address: str | None = None, filters: Filters = None, limit: int = 100, timeout: int = 30,
               detail: bool = False, raise_on_missing_output: bool = True, _explain: bool = False) -> list[Any]:
    return list_resource("tasks", address, filters, limit, timeout, detail)


def list_nodes(address: str | None = None, filters: Filters = None, limit: int = 100, timeout: int = 30,
               detail: bool = False, raise_on_missing_output: bool = True, _explain: bool = False) -> list[Any]:
    return list_resource("nodes", address, filters, limit, timeout, detail)


def list_jobs(address: str | None = None, filters: Filters = None, limit: int = 100, timeout: int = 30,
              detail: bool = False, raise_on_missing_output: bool = True, _explain: bool = False) -> list[Any]:
    return list_resource("jobs", address, filters, limit, timeout, detail)


def list_workers(address: str | None = None, filters: Filters = None, limit: int = 100, timeout: int = 30,
                 detail: bool = False, raise_on_missing_output: bool = True, _explain: bool = False) -> list[Any]:
    return list_resource("workers", address, filters, limit, timeout, detail)


def list_placement_groups(address: str | None = None, filters: Filters = None, limit: int = 100,
                          timeout: int = 30, detail: bool = False, raise_on_missing_output: bool = True,
                          _explain: bool = False) -> list[Any]:
    return list_resource("placement_groups", address, filters, limit, timeout, detail)


def list_objects(address: str | None = None, filters: Filters = None, limit: int = 100, timeout: int = 30,
                 detail: bool = False, raise_on_missing_output: bool = True, _explain: bool = False) -> list[Any]:
    """In a connected driver: asked directly (ObjectState rows); elsewhere: through the API."""
    import raylite

    if raylite.is_initialized() and address is None:
        return _list_objects_here(address, filters, limit, timeout, detail)
    return list_resource("objects", address, filters, limit, timeout, detail)


def get_actor(id: str, address: str | None = None, timeout: int = 30, _explain: bool = False) -> Any:
    return get_resource("actors", id, address, timeout)


def get_task(id: str, address: str | None = None, timeout: int = 30, _explain: bool = False) -> Any:
    return get_resource("tasks", id, address, timeout)


def get_node(id: str, address: str | None = None, timeout: int = 30, _explain: bool = False) -> Any:
    return get_resource("nodes", id, address, timeout)


def get_job(id: str, address: str | None = None, timeout: int = 30, _explain: bool = False) -> Any:
    return get_resource("jobs", id, address, timeout)


def get_worker(id: str, address: str | None = None, timeout: int = 30, _explain: bool = False) -> Any:
    return get_resource("workers", id, address, timeout)


def get_placement_group(id: str, address: str | None = None, timeout: int = 30, _explain: bool = False) -> Any:
    return get_resource("placement_groups", id, address, timeout)


def summarize_tasks(address: str | None = None, timeout: int = 30, raise_on_missing_output: bool = True,
                    _explain: bool = False) -> dict[str, Any]:
    return summarize("tasks", address, timeout)


def summarize_actors(address: str | None = None, timeout: int = 30, raise_on_missing_output: bool = True,
                     _explain: bool = False) -> dict[str, Any]:
    return summarize("actors", address, timeout)


def list_logs(address: str | None = None, node_id: str | None = None, node_ip: str | None = None,
              glob_filter: str | None = None, timeout: int = 30) -> dict[str, list[str]]:
    """Log file names by category (worker_out, worker_err, node, job_driver, dashboard)."""
    from raylite.dashboard.log_client import list_logs as _list

    out: dict[str, list[str]] = {}
    for row in _list(address, node_id or "", glob_filter or ""):
        if node_ip and row["node_ip"] != node_ip:
            continue
        out.setdefault(row["category"], []).append(row["filename"])
    return out


def get_log(address: str | None = None, node_id: str | None = None, node_ip: str | None = None,
            filename: str | None = None, actor_id: str | None = None, task_id: str | None = None,
            pid: int | None = None, follow: bool = False, tail: int = 1000, timeout: int = 30,
            suffix: str = "out", encoding: str | None = "utf-8", errors: str | None = "strict",
            submission_id: str | None = None, **kwargs: Any) -> Iterator[str]:
    """Yield a log's text in chunks (the last `tail` lines; -1: all; follow: keep going)."""
    from raylite.dashboard.log_client import stream_log

    for chunk in stream_log(address, node_id=node_id or "", filename=filename or "", actor_id=actor_id or "",
                            task_id=task_id or "", job_id=submission_id or "", tail=tail, follow=follow,
                            suffix=suffix):
        yield chunk.decode(encoding or "utf-8", errors or "strict")
