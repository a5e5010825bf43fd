"""Cluster state as Ray's state API rows (ActorState, TaskState, NodeState, ...), from the head.

Each function asks the head (and, for workers and objects, every node and process) and
returns plain dicts with Ray's field names and hex ids, so they serve as JSON unchanged.
"""

from __future__ import annotations

import asyncio
import os
from typing import Any

from raylite._core import protocol as P
from raylite._core import resources as R

_ACTOR_STATES = {"PENDING": "PENDING_CREATION"}
_PG_STATES = {"INFEASIBLE": "PENDING"}


def _hex(value: Any) -> str | None:
    if isinstance(value, (bytes, bytearray)):
        return value.hex() if value else None
    return value or None


async def nodes(ctx: Any) -> list[dict[str, Any]]:
    info = await ctx.head.request(P.GetClusterInfo())
    out = []
    for n in info.nodes:
        total = R.from_fixed(n.get("total") or {})
        out.append({
            "node_id": n["node_id"].hex(), "node_ip": n.get("ip", ""),
            "is_head_node": "node:__internal_head__" in total,
            "state": "ALIVE" if n.get("alive") else "DEAD", "state_message": n.get("death_cause") or None,
            "node_name": n.get("ip", ""),
            "resources_total": {k: v for k, v in total.items() if not k.startswith("node:")},
            "resources_available": {k: v for k, v in R.from_fixed(n.get("available") or {}).items()
                                    if not k.startswith("node:")},
            "labels": dict(n.get("labels") or {}), "address": n.get("address", ""),
        })
    return out


async def actors(ctx: Any) -> list[dict[str, Any]]:
    reply = await ctx.head.request(P.ListActors())
    out = []
    for a in reply.actors:
        cls = (a.get("class_name") or "").rsplit(".", 1)[-1]
        out.append({
            "actor_id": a["actor_id"].hex(), "class_name": cls, "state": _ACTOR_STATES.get(a["state"], a["state"]),
            "job_id": _hex(a.get("job_id")), "name": a.get("name") or "", "node_id": _hex(a.get("node_id")),
            "pid": a.get("pid") or None, "ray_namespace": a.get("namespace") or "",
            "required_resources": R.from_fixed(a.get("required_resources") or {}),
            "death_cause": death_cause(a, cls), "is_detached": bool(a.get("is_detached")),
            "num_restarts": a.get("num_restarts", 0), "max_restarts": a.get("max_restarts", 0),
            "repr_name": "", "worker_id": _hex(a.get("worker_id")),
        })
    return out


def death_cause(a: dict[str, Any], class_name: str) -> dict[str, Any] | None:
    """Ray's ActorDeathCause as a dict (Ray's state clients validate it as one): raylite's reason
    in `error_message`, under `creation_task_failure_context` when the constructor raised."""
    text = a.get("death_cause") or ""
    if not text:
        return None
    context = {"error_message": text, "actor_id": a["actor_id"].hex(), "class_name": class_name,
               "name": a.get("name") or "", "ray_namespace": a.get("namespace") or "", "pid": a.get("pid") or 0,
               "node_ip_address": a.get("node_ip") or ""}
    if "raylite.kill" in text or "ray.kill" in text:
        context["reason"] = "RAY_KILL"
    if "constructor (__init__) raised" in text:
        return {"creation_task_failure_context": {"error_message": text}}
    return {"actor_died_error_context": context}


async def raw_tasks(ctx: Any, job_id: str = "", limit: int = 0) -> list[dict[str, Any]]:
    """The head's rows (times in seconds, ids as bytes); the Chrome trace wants full precision."""
    reply = await ctx.head.request(P.GetTaskEvents(bytes.fromhex(job_id) if job_id else b"", limit))
    ctx.extras["tasks_dropped"] = reply.dropped
    return reply.tasks


async def tasks(ctx: Any, job_id: str = "", limit: int = 0) -> list[dict[str, Any]]:
    return [task_row(r) for r in await raw_tasks(ctx, job_id, limit)]


def task_row(r: dict[str, Any]) -> dict[str, Any]:
    def ms(key: str) -> int | None:
        value = r.get(key)
        return int(value * 1000) if value else None

    return {
        "task_id": r["task_id"].hex(), "attempt_number": r.get("attempt_number", 0), "name": r.get("name", ""),
        "state": r.get("state", ""), "job_id": _hex(r.get("job_id")), "actor_id": _hex(r.get("actor_id")),
        "type": r.get("type", "NORMAL_TASK"), "func_or_class_name": r.get("func_or_class_name", ""),
        # Ray's clients require a string; a task the driver submitted has no parent here
        "parent_task_id": _hex(r.get("parent_task_id")) or "", "node_id": _hex(r.get("node_id")),
        "worker_id": _hex(r.get("worker_id")), "worker_pid": r.get("worker_pid"),
        "error_type": r.get("error_type"), "error_message": r.get("error_message"),
        "language": r.get("language", "PYTHON"), "required_resources": r.get("required_resources") or {},
        "events": r.get("events", []), "creation_time_ms": ms("creation_time_s"),
        "start_time_ms": ms("start_time_s"), "end_time_ms": ms("end_time_s"),
    }


async def jobs(ctx: Any) -> list[dict[str, Any]]:
    from raylite.dashboard.routes.jobs import details, driver_details, internal_driver

    drivers = (await ctx.head.request(P.ListJobs())).jobs
    manager = ctx.extras.get("jobs")
    rows = [details(r, drivers) for r in await manager.list()] if manager is not None else []
    rows += [driver_details(d) for d in drivers if not d.get("submission_id") and not internal_driver(d)]
    return rows


async def placement_groups(ctx: Any) -> list[dict[str, Any]]:
    reply = await ctx.head.request(P.ListPlacementGroups())
    out = []
    for pg in reply.groups:
        nodes_ = pg.get("bundle_nodes") or []
        bundles = [{"bundle_id": i, "node_id": _hex(nodes_[i]) if i < len(nodes_) else None,
                    "unit_resources": R.from_fixed(b)} for i, b in enumerate(pg.get("bundles") or [])]
        out.append({"placement_group_id": pg["pg_id"].hex(), "name": pg.get("name") or "",
                    "state": _PG_STATES.get(pg["state"], pg["state"]), "strategy": pg.get("strategy", ""),
                    "bundles": bundles, "stats": {"error": pg.get("error") or None},
                    "is_detached": bool(pg.get("detached")), "creator_job_id": ""})
    return out


async def _node_infos(ctx: Any) -> list[tuple[dict[str, Any], Any]]:
    cluster = await ctx.head.request(P.GetClusterInfo())

    async def ask(n: dict[str, Any]) -> tuple[dict[str, Any], Any] | None:
        address = n.get("local_address") or n["address"]
        if address.startswith("unix://") and not os.path.exists(address[len("unix://"):]):
            address = n["address"]
        try:
            return n, await ctx.head.request_peer(address, P.GetNodeInfo(), 5.0)
        except Exception:  # noqa: BLE001  a node going away
            return None

    found = await asyncio.gather(*(ask(n) for n in cluster.nodes if n.get("alive")))
    return [f for f in found if f is not None]


async def workers(ctx: Any) -> list[dict[str, Any]]:
    out = []
    for n, info in await _node_infos(ctx):
        for worker_id, kind, _address, pid in getattr(info, "clients", []) or []:
            out.append({"worker_id": _hex(worker_id), "is_alive": True,
                        "worker_type": "DRIVER" if kind == "driver" else "WORKER", "exit_type": None,
                        "node_id": n["node_id"].hex(), "ip": n.get("ip", ""), "pid": pid, "exit_detail": None})
    return out


async def objects(ctx: Any) -> list[dict[str, Any]]:
    """Every object: asks each node for its store and clients, and each client for its refs."""
    from raylite._state import _join

    node_infos = await _node_infos(ctx)
    addresses: dict[str, str] = {}
    for n, info in node_infos:
        for _wid, _kind, address, _pid in getattr(info, "clients", []) or []:
            if address:
                addresses[address] = n.get("ip", "")
    processes: dict[str, Any] = {}

    async def ask(address: str) -> None:
        try:
            reply = await ctx.head.request_peer(address, P.ListOwnedObjects(), 5.0)
            processes[address] = (reply.kind, reply.pid, addresses[address], reply.objects)
        except Exception:  # noqa: BLE001  exited meanwhile
            pass

    await asyncio.gather(*(ask(a) for a in addresses))
    return [row.to_dict() for row in _join(node_infos, processes)]


# ------------------------------------------------------------------ filters and summaries
def apply_filters(rows: list[dict[str, Any]], filters: list[tuple[str, str, str]]) -> list[dict[str, Any]]:
    """Ray's filters: (key, "=" | "!=", value); strings compare case-insensitively."""
    for key, op, value in filters:
        if op not in ("=", "!="):
            raise ValueError(f"unsupported filter predicate {op!r}: use '=' or '!='")
        want = str(value).lower()
        rows = [r for r in rows if (str(_field(r, key)).lower() == want) == (op == "=")]
    return rows


def _field(row: dict[str, Any], key: str) -> Any:
    value = row.get(key)
    return "" if value is None else value


def summarize_tasks(rows: list[dict[str, Any]]) -> dict[str, Any]:
    """Ray's task summary: per function name, counts by state and type."""
    summary: dict[str, dict[str, Any]] = {}
    for r in rows:
        key = r.get("func_or_class_name") or r.get("name") or "?"
        s = summary.setdefault(key, {"func_or_class_name": key, "type": r.get("type"), "state_counts": {}})
        s["state_counts"][r["state"]] = s["state_counts"].get(r["state"], 0) + 1
    return {"node_id_to_summary": {"cluster": {"summary": summary, "total_tasks": len(rows),
                                               "total_actor_tasks": sum(r.get("type") == "ACTOR_TASK" for r in rows),
                                               "total_actor_scheduled": sum(r.get("type") == "ACTOR_CREATION_TASK"
                                                                            for r in rows),
                                               "summary_by": "func_name"}}}


def summarize_actors(rows: list[dict[str, Any]]) -> dict[str, Any]:
    summary: dict[str, dict[str, Any]] = {}
    for r in rows:
        s = summary.setdefault(r["class_name"], {"class_name": r["class_name"], "state_counts": {}})
        s["state_counts"][r["state"]] = s["state_counts"].get(r["state"], 0) + 1
    return {"node_id_to_summary": {"cluster": {"summary": summary, "total_actors": len(rows),
                                               "summary_by": "class"}}}


def summarize_objects(rows: list[dict[str, Any]]) -> dict[str, Any]:
    summary: dict[str, dict[str, Any]] = {}
    for r in rows:
        key = r.get("location") or "?"
        s = summary.setdefault(key, {"location": key, "total_objects": 0, "total_size_mb": 0.0,
                                     "ref_type_counts": {}})
        s["total_objects"] += 1
        s["total_size_mb"] += (r.get("object_size") or 0) / 2**20
        ref = r.get("reference_type") or "?"
        s["ref_type_counts"][ref] = s["ref_type_counts"].get(ref, 0) + 1
    return {"node_id_to_summary": {"cluster": {"summary": summary, "total_objects": len(rows),
                                               "total_size_mb": sum(s["total_size_mb"] for s in summary.values()),
                                               "summary_by": "location"}}}


def chrome_trace(raw: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Chrome-trace events ("X" complete events, times in microseconds) of task and actor
    executions, per node (pid) and worker (tid), as chrome://tracing and Perfetto read them."""
    events: list[dict[str, Any]] = []
    names: set[tuple[str, int]] = set()
    for item in raw:
        start_s, end_s = item.get("start_time_s"), item.get("end_time_s")
        if not start_s:
            continue
        r = task_row(item)
        start, end = start_s * 1000, (end_s or start_s) * 1000
        node = (r.get("node_id") or "unknown")[:8]
        tid = r.get("worker_pid") or 0
        if (node, tid) not in names:
            names.add((node, tid))
            events.append({"name": "thread_name", "ph": "M", "pid": f"Node {node}", "tid": f"worker {tid}",
                           "args": {"name": f"worker pid={tid}"}})
        events.append({
            "cat": r.get("type", "NORMAL_TASK").lower(), "name": r.get("name") or r.get("func_or_class_name"),
            "pid": f"Node {node}", "tid": f"worker {tid}", "ph": "X", "ts": start * 1000,
            "dur": max(1, (end - start) * 1000), "cname": "rail_response" if r.get("state") == "FAILED" else "generic_work",
            "args": {"task_id": r["task_id"], "state": r.get("state"), "job_id": r.get("job_id"),
                     "actor_id": r.get("actor_id"), "attempt_number": r.get("attempt_number"),
                     "error_message": r.get("error_message")},
        })
    return events
