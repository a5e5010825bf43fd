"""JSON feeds of the dashboard page, under /api/dashboard/ (read-only).

Each feed is one or two head requests shaped for one page, so the page's JavaScript
stays simple: ids as hex, times in seconds, byte counts as integers (the page adds the
units). Jobs and logs come from the Ray-shaped REST routes (/api/jobs/, /api/v0/logs)
of their own modules; Serve, Train and Tune come from the KV feeds their libraries publish.
"""

from __future__ import annotations

import json
from typing import Any

from starlette.requests import Request
from starlette.responses import JSONResponse
from starlette.routing import Route

from raylite._core.head.cluster_metrics import per_host

_SCALE = 10000  # fixed-point resource amounts on the wire


def plain(value: Any) -> Any:
    """Wire values as JSON: bytes become hex, containers recurse."""
    if isinstance(value, bytes | bytearray):
        return bytes(value).hex()
    if isinstance(value, dict):
        return {str(plain(k)): plain(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [plain(v) for v in value]
    if isinstance(value, float) and value != value:  # NaN is no JSON
        return None
    return value


def _resources(fixed: dict[str, int]) -> dict[str, float]:
    return {k: v / _SCALE for k, v in fixed.items()
            if "_group_" not in k and k != "bundle" and not k.startswith("node:")}


async def _kv_json(ctx: Any, namespace: str, key: bytes) -> Any:
    from raylite._core import protocol as P

    raw = (await ctx.head.request(P.KvGet(namespace, key))).value
    try:
        return json.loads(raw) if raw else None
    except ValueError:
        return None


async def nodes(ctx: Any) -> list[dict[str, Any]]:
    from raylite._core import protocol as P

    info = await ctx.head.request(P.GetClusterInfo())
    out = []
    for n in info.nodes:
        total, avail = _resources(n["total"]), _resources(n["available"])
        out.append({
            "node_id": n["node_id"].hex(), "ip": n["ip"], "state": "ALIVE" if n["alive"] else "DEAD",
            "is_head": n["node_id"].hex() == ctx.node_id, "death_cause": n.get("death_cause", ""),
            "resources_total": total, "resources_used": {k: total[k] - avail.get(k, 0.0) for k in total},
            "labels": n.get("labels", {}), "stats": plain(n.get("stats") or {}) if n["alive"] else {},
        })
    return out


async def actors(ctx: Any) -> list[dict[str, Any]]:
    from raylite._core import protocol as P

    rows = (await ctx.head.request(P.ListActors())).actors
    return [plain({k: v for k, v in r.items() if k != "required_resources"}) | {
        "required_resources": _resources(r.get("required_resources") or {})} for r in rows]


async def tasks(ctx: Any, limit: int = 2000) -> list[dict[str, Any]]:
    from raylite._core import protocol as P

    rows = (await ctx.head.request(P.GetTaskEvents(b"", limit))).tasks
    return [plain(r) for r in rows]


async def serve_snapshot(ctx: Any) -> Any:
    return await _kv_json(ctx, "serve", b"snapshot")


async def train_runs(ctx: Any) -> list[dict[str, Any]]:
    from raylite._core import protocol as P

    keys = (await ctx.head.request(P.KvKeys("train", b"run:"))).value or []
    runs = [await _kv_json(ctx, "train", k) for k in keys]
    return sorted((r for r in runs if isinstance(r, dict)), key=lambda r: r.get("started_at", 0), reverse=True)


async def tune_experiments(ctx: Any, name: str | None = None, trials: bool = True) -> list[dict[str, Any]]:
    """Tune experiments newest first (raylite/tune/execution/dashboard_feed.py writes them);
    one by name, and without their trials for a summary."""
    from raylite._core import protocol as P

    if name is not None:
        keys = [f"experiment:{name}".encode()]
    else:
        keys = (await ctx.head.request(P.KvKeys("tune", b"experiment:"))).value or []
    docs = [d for d in [await _kv_json(ctx, "tune", k) for k in keys] if isinstance(d, dict)]
    if not trials:
        docs = [{k: v for k, v in d.items() if k != "trials"} for d in docs]
    return sorted(docs, key=lambda d: d.get("started_at", 0), reverse=True)


async def timeseries(ctx: Any, names: list[str], prefix: str, since: float) -> dict[str, Any]:
    from raylite._core import protocol as P

    return (await ctx.head.request(P.GetTimeSeries(names, prefix, since))).series


def routes(ctx: Any) -> list:
    async def get_nodes(request: Request) -> JSONResponse:
        return JSONResponse(await nodes(ctx))

    async def get_actors(request: Request) -> JSONResponse:
        return JSONResponse(await actors(ctx))

    async def get_tasks(request: Request) -> JSONResponse:
        limit = int(request.query_params.get("limit", "2000"))
        return JSONResponse(await tasks(ctx, limit))

    async def get_serve(request: Request) -> JSONResponse:
        return JSONResponse({"snapshot": await serve_snapshot(ctx)})

    async def get_train(request: Request) -> JSONResponse:
        return JSONResponse(await train_runs(ctx))

    async def get_tune(request: Request) -> JSONResponse:
        q = request.query_params
        return JSONResponse(await tune_experiments(ctx, q.get("name"), q.get("trials", "1") not in ("0", "false")))

    async def get_series(request: Request) -> JSONResponse:
        q = request.query_params
        names = [n for n in q.getlist("name") if n]
        since = float(q.get("since", "0") or 0)
        return JSONResponse(await timeseries(ctx, names, q.get("prefix", ""), since))

    async def get_overview(request: Request) -> JSONResponse:
        from raylite._core import protocol as P

        node_rows = await nodes(ctx)
        actor_rows = await actors(ctx)
        task_rows = await tasks(ctx, 500)  # the newest, for recent failures
        families = (await ctx.head.request(P.GetClusterMetrics())).families
        task_counts = {key.split('"')[1]: int(value) for fam in families if fam["name"] == "raylite_tasks"
                       for key, value in fam["samples"] if value}
        jobs = plain((await ctx.head.request(P.ListJobs())).jobs)
        total: dict[str, float] = {}
        used: dict[str, float] = {}
        for n in node_rows:
            if n["state"] == "ALIVE":
                for k, v in n["resources_total"].items():
                    total[k] = total.get(k, 0.0) + v
                    used[k] = used.get(k, 0.0) + n["resources_used"].get(k, 0.0)
        failures = [t for t in task_rows if t.get("state") == "FAILED"][-10:]
        failures += [{"type": "ACTOR", "name": a.get("name") or a.get("class_name"),
                      "actor_id": a.get("actor_id"), "error_message": a.get("death_cause")}
                     for a in actor_rows if a.get("state") == "DEAD" and actor_failed(a.get("death_cause", ""))][-10:]
        # machine figures once per host: nodes sharing a machine report the same cores and memory
        stats = per_host([n["stats"] for n in node_rows if n["state"] == "ALIVE" and n["stats"]])
        cores = sum(st.get("num_cpus", 1) for st in stats)
        machine = {"cpu_percent": sum(st.get("cpu_percent", 0) * st.get("num_cpus", 1) for st in stats) / cores
                   if cores else None, "num_cpus": cores,
                   "mem_used_bytes": sum(st.get("mem_used_bytes", 0) for st in stats),
                   "mem_total_bytes": sum(st.get("mem_total_bytes", 0) for st in stats)}
        return JSONResponse({
            "resources_total": total, "resources_used": used, "machine": machine,
            "nodes": {"ALIVE": sum(n["state"] == "ALIVE" for n in node_rows),
                      "DEAD": sum(n["state"] == "DEAD" for n in node_rows)},
            "actors": _count(actor_rows), "tasks": task_counts, "drivers": jobs,
            "train": [{k: r.get(k) for k in ("name", "status", "attempt", "num_workers", "reports")}
                      for r in await train_runs(ctx)],
            "tune": [{k: d.get(k) for k in ("name", "status", "metric", "mode", "num_trials", "trial_counts", "best")}
                     for d in await tune_experiments(ctx, trials=False)],
            "serve": await serve_snapshot(ctx), "failures": failures,
        })

    async def get_routes(request: Request) -> JSONResponse:
        """The paths this server serves, so the page calls only the APIs that exist here."""
        return JSONResponse(sorted({getattr(r, "path", "") for r in request.app.routes} - {""}))

    prefix = "/api/dashboard"
    return [Route(f"{prefix}/routes", get_routes), Route(f"{prefix}/overview", get_overview), Route(f"{prefix}/nodes", get_nodes),
            Route(f"{prefix}/actors", get_actors), Route(f"{prefix}/tasks", get_tasks),
            Route(f"{prefix}/serve", get_serve), Route(f"{prefix}/train", get_train), Route(f"{prefix}/tune", get_tune),
            Route(f"{prefix}/timeseries", get_series)]


# causes of an actor's end that are no failure: the user or the system stopped it on purpose
_INTENDED_ENDS = ("raylite.kill", "ray.kill", "owner", "placement group was removed", "exit_actor", "was stopped")


def actor_failed(cause: str) -> bool:
    """Whether a DEAD actor's cause reads as a failure (constructor error, crash, unschedulable)."""
    return bool(cause) and not any(s in cause for s in _INTENDED_ENDS)


def _count(rows: list[dict[str, Any]]) -> dict[str, int]:
    out: dict[str, int] = {}
    for r in rows:
        out[r.get("state", "?")] = out.get(r.get("state", "?"), 0) + 1
    return out
