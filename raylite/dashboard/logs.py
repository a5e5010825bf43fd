"""Log files of every node, found and read through the nodes (so any machine's logs can be read).

A file is named by (node id, file name). Worker files are worker-<worker id>-<pid>.out/.err,
the node daemon's is node.err, the API server's dashboard.log, a submitted job's
job-driver-<submission id>.log (on the head). `resolve()` turns an actor, task or job id
into the file that holds its output.
"""

from __future__ import annotations

import asyncio
import fnmatch
from typing import Any

from raylite._core import protocol as P


class LogNotFound(LookupError):
    """No such node, file, actor, task or job; the message says which and what exists."""


def category(name: str) -> str:
    if name.startswith("worker-"):
        return "worker_out" if name.endswith(".out") else "worker_err"
    if name.startswith("job-driver-"):
        return "job_driver"
    if name.startswith("node"):
        return "node"
    if name.startswith("dashboard"):
        return "dashboard"
    return "other"


async def _nodes(ctx: Any) -> list[dict[str, Any]]:
    from raylite.dashboard import state

    return [n for n in await state.nodes(ctx) if n["state"] == "ALIVE"]


async def list_files(ctx: Any, node_id: str = "", glob: str = "") -> list[dict[str, Any]]:
    out = []
    for n in await _nodes(ctx):
        if node_id and not n["node_id"].startswith(node_id):
            continue
        try:
            reply = await ctx.head.request_peer(n["address"], P.ListLogs(), 5.0)
        except Exception:  # noqa: BLE001  a node going away
            continue
        for name, size, mtime in reply.files:
            if glob and not fnmatch.fnmatch(name, glob):
                continue
            out.append({"node_id": n["node_id"], "node_ip": n["node_ip"], "filename": name, "size": size,
                        "mtime": mtime, "category": category(name)})
    return out


async def node_address(ctx: Any, node_id: str) -> tuple[str, str]:
    """(full node id, address) for a node id or prefix; the head's node when empty."""
    nodes = await _nodes(ctx)
    if not node_id:
        head = next((n for n in nodes if n["is_head_node"]), None) or (nodes[0] if nodes else None)
        if head is None:
            raise LogNotFound("the cluster has no alive node")
        return head["node_id"], head["address"]
    matches = [n for n in nodes if n["node_id"].startswith(node_id)]
    if len(matches) != 1:
        known = ", ".join(n["node_id"][:12] for n in nodes)
        raise LogNotFound(f"node {node_id!r} {'is ambiguous' if matches else 'is not an alive node'}; "
                          f"alive nodes: {known}")
    return matches[0]["node_id"], matches[0]["address"]


async def _task_rows_with_worker(ctx: Any, task_id: str) -> list[dict]:
    """The task's rows that name the worker that ran it. The owner may report a task's end
    before that worker's own events (node, pid) arrive on its next flush: a task the
    cluster knows is waited for that long, not reported as never run."""
    from raylite.dashboard import state

    deadline = asyncio.get_running_loop().time() + 2 * ctx.config.task_events_flush_interval_s + 0.5
    while True:
        known = [t for t in await state.tasks(ctx) if t["task_id"] == task_id]
        rows = [t for t in known if t.get("worker_id")]
        if rows or not known or asyncio.get_running_loop().time() > deadline:
            return rows
        await asyncio.sleep(0.1)


async def resolve(ctx: Any, *, node_id: str = "", filename: str = "", actor_id: str = "", task_id: str = "",
                  job_id: str = "", suffix: str = "out") -> tuple[str, str, str]:
    """(node id, node address, file name) of what the caller named."""
    from raylite.dashboard import state

    if actor_id:
        actor = next((a for a in await state.actors(ctx) if a["actor_id"] == actor_id), None)
        if actor is None:
            raise LogNotFound(f"actor {actor_id} is not known to this cluster (see `raylite list actors`)")
        if not actor.get("worker_id") or not actor.get("pid"):
            raise LogNotFound(f"actor {actor_id} has not started on a worker yet (state {actor['state']})")
        node_id, filename = actor["node_id"], f"worker-{actor['worker_id'][:16]}-{actor['pid']}.{suffix}"
    elif task_id:
        rows = await _task_rows_with_worker(ctx, task_id)
        if not rows:
            raise LogNotFound(f"task {task_id} is not known to this cluster or has not run yet "
                              "(see `raylite list tasks`)")
        t = max(rows, key=lambda r: r["attempt_number"])
        node_id, filename = t["node_id"], f"worker-{t['worker_id'][:16]}-{t['worker_pid']}.{suffix}"
    elif job_id:
        sid = job_id
        manager = ctx.extras.get("jobs")
        rec = await manager.get(job_id) if manager is not None else None
        if rec is None:
            from raylite.dashboard.routes.jobs import find

            rec, _ = await find(ctx, job_id)
        if rec is None:
            raise LogNotFound(f"job {job_id} is not a submitted job of this cluster (see `raylite job list`); "
                              "only submitted jobs have a driver log")
        sid = rec.submission_id
        node_id, filename = ctx.node_id, f"job-driver-{sid}.log"
    elif not filename:
        raise LogNotFound("name a log: --node-id with a file name, --actor-id, --task-id or --job-id "
                          "(`raylite logs` with no argument lists the files)")
    full_id, address = await node_address(ctx, node_id or "")
    return full_id, address, filename
