"""Ray's state API over HTTP: GET /api/v0/{resource}, /api/v0/{resource}/summarize, timeline.

    GET /api/v0/actors?limit=100&detail=false&filter_keys=state&filter_predicates==&filter_values=ALIVE
    -> {"result": true, "msg": "", "data": {"result": {"result": [rows], "total": N,
        "num_after_truncation": n, "num_filtered": m, "partial_failure_warning": "", "warnings": [...]}}}

resources: actors, tasks, nodes, jobs, workers, placement_groups, objects. Summaries: tasks,
actors, objects, in Ray's wrapper: data.result = {"result": {"node_id_to_summary": ...}, "total",
"num_after_truncation", "num_filtered", "partial_failure_warning", "warnings"}. /api/v0/tasks/timeline[?job_id=..&download=1] is the Chrome trace.
An unknown resource or filter key is a 400 that lists the valid ones. Ray's own client (it sends
`timeout=`) gets rows its strict schemas accept (see ray_shapes.py).
"""

from __future__ import annotations

import json
from typing import Any

from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from raylite.dashboard import ray_shapes
from raylite.dashboard import state as S

RESOURCES = ("actors", "tasks", "nodes", "jobs", "workers", "placement_groups", "objects")
DEFAULT_LIMIT = 100


async def rows_of(ctx: Any, resource: str, job_id: str = "") -> list[dict[str, Any]]:
    if resource == "tasks":
        return await S.tasks(ctx, job_id)
    if resource == "objects":
        return await S.objects(ctx)
    return await getattr(ctx, resource)()


def _error(message: str, status: int = 400) -> JSONResponse:
    return JSONResponse({"result": False, "msg": message, "data": {}}, status_code=status)


def parse_filters(request: Request) -> list[tuple[str, str, str]]:
    keys = request.query_params.getlist("filter_keys")
    preds = request.query_params.getlist("filter_predicates")
    values = request.query_params.getlist("filter_values")
    if not (len(keys) == len(preds) == len(values)):
        raise ValueError("filter_keys, filter_predicates and filter_values must come in triples")
    # keys are matched case-insensitively, as Ray's are (`("STATE", "=", "RUNNING")` works)
    return list(zip((k.lower() for k in keys), preds, values))


def _check_keys(rows: list[dict[str, Any]], filters: list[tuple[str, str, str]], resource: str) -> None:
    if not rows:
        return
    known = set(rows[0])
    for key, _, _ in filters:
        if key not in known:
            raise ValueError(f"cannot filter {resource} by {key!r}; valid keys: {', '.join(sorted(known))}")


def routes(ctx: Any) -> list:
    async def list_resource(request: Request) -> Response:
        resource = request.path_params["resource"]
        if resource not in RESOURCES:
            return _error(f"unknown resource {resource!r}; valid: {', '.join(RESOURCES)}", 404)
        try:
            limit = int(request.query_params.get("limit", DEFAULT_LIMIT))
            filters = parse_filters(request)
        except ValueError as e:
            return _error(str(e))
        job_id = next((v for k, p, v in filters if k == "job_id" and p == "="), "")
        try:
            rows = await rows_of(ctx, resource, job_id if resource == "tasks" else "")
            if ray_shapes.from_ray_client(request.query_params):
                exclude = request.query_params.get("exclude_driver", "true").lower() in ("1", "true")
                rows = ray_shapes.for_ray(resource, rows, exclude)
            _check_keys(rows, filters, resource)
            total = len(rows)
            rows = S.apply_filters(rows, filters)
        except ValueError as e:
            return _error(str(e))
        warnings = []
        if resource == "tasks":
            for job, n in (ctx.extras.get("tasks_dropped") or {}).items():
                if n:
                    warnings.append(f"{n} task events of job {job} were dropped: the head keeps at most "
                                    f"{ctx.config.task_events_max_per_job} tasks per job "
                                    "(RAYLITE_TASK_EVENTS_MAX_PER_JOB).")
        filtered = len(rows)
        rows = rows[:limit] if limit > 0 else rows
        return JSONResponse({"result": True, "msg": "", "data": {"result": {
            "result": rows, "total": total, "num_after_truncation": len(rows), "num_filtered": filtered,
            "partial_failure_warning": "", "warnings": warnings}}})

    async def summarize(request: Request) -> Response:
        resource = request.path_params["resource"]
        fns = {"tasks": S.summarize_tasks, "actors": S.summarize_actors, "objects": S.summarize_objects}
        if resource not in fns:
            return _error(f"no summary for {resource!r}; valid: tasks, actors, objects", 404)
        rows = await rows_of(ctx, resource)
        # Ray's wrapper (its `ray summary` reads total, num_after_truncation, ...) around the summary
        return JSONResponse({"result": True, "msg": "", "data": {"result": {
            "result": fns[resource](rows), "total": len(rows), "num_after_truncation": len(rows),
            "num_filtered": len(rows), "partial_failure_warning": "", "warnings": []}}})

    async def timeline(request: Request) -> Response:
        rows = await S.raw_tasks(ctx, request.query_params.get("job_id", ""))
        body = json.dumps(S.chrome_trace(rows))
        headers = {}
        if request.query_params.get("download") in ("1", "true"):
            headers["Content-Disposition"] = 'attachment; filename="timeline.json"'
        return Response(body, media_type="application/json", headers=headers)

    return [
        Route("/api/v0/tasks/timeline", timeline),
        Route("/api/v0/{resource}/summarize", summarize),
        Route("/api/v0/{resource}", list_resource),
    ]
