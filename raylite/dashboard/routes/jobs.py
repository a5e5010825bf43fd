"""Ray's jobs REST API (same paths, methods and JSON), so Ray's JobSubmissionClient works.

    POST   /api/jobs/                      submit -> {"job_id", "submission_id"}
    GET    /api/jobs/                      list of JobDetails (submitted jobs and plain drivers)
    GET    /api/jobs/{id}                  JobDetails (id: submission id or a driver's job id)
    GET    /api/jobs/{id}/logs             {"logs": "..."}
    WS     /api/jobs/{id}/logs/tail        text frames as the log grows; closed when the job ends
    POST   /api/jobs/{id}/stop             {"stopped": bool}
    DELETE /api/jobs/{id}                  {"deleted": bool} (terminal jobs only)
    GET/PUT /api/packages/{scheme}/{name}  working_dir packages, as Ray's client uploads them

Errors are plain text with a 4xx status, as Ray's server answers (Ray's client raises
RuntimeError("Request failed with status code N: <text>.")).
"""

from __future__ import annotations

import asyncio
import json
import os
from typing import Any

from starlette.requests import Request
from starlette.responses import JSONResponse, PlainTextResponse, Response
from starlette.routing import Route, WebSocketRoute
from starlette.websockets import WebSocket, WebSocketDisconnect

from raylite._core import protocol as P
from raylite._core.runtime_env import packaging
from raylite.dashboard.job_manager import (
    MAX_SUBMIT_BODY_BYTES,
    TERMINAL,
    JobError,
    JobManager,
    JobRecord,
)

MAX_LISTED_RUNTIME_ENV_BYTES = 8 * 1024

_DETAIL_FIELDS = ("status", "entrypoint", "message", "error_type", "start_time", "end_time", "metadata",
                  "runtime_env", "driver_agent_http_address", "driver_node_id", "driver_exit_code",
                  "entrypoint_num_cpus", "entrypoint_num_gpus", "entrypoint_memory", "entrypoint_resources")


async def startup(ctx: Any) -> None:
    manager = ctx.extras["jobs"] = JobManager(ctx)
    await manager.recover()


async def shutdown(ctx: Any) -> None:
    manager = ctx.extras.get("jobs")
    if manager is not None:
        await manager.shutdown()


async def _body(request: Request, limit: int, what: str) -> bytes:
    """The request's body, refused with 413 past `limit` bytes: by its Content-Length before a
    byte of it is read, else (chunked) as soon as the count passes the limit."""
    declared = request.headers.get("content-length", "")
    too_big = JobError(f"{what} may be at most {limit / 2**20:.0f} MiB; this request's body is larger", 413)
    if declared.isdigit() and int(declared) > limit:
        raise too_big
    chunks, size = [], 0
    async for chunk in request.stream():
        size += len(chunk)
        if size > limit:
            raise too_big
        chunks.append(chunk)
    return b"".join(chunks)


def _error(e: JobError) -> PlainTextResponse:
    return PlainTextResponse(str(e), status_code=e.status)


async def _drivers(ctx: Any) -> list[dict[str, Any]]:
    return (await ctx.head.request(P.ListJobs())).jobs


def details(rec: JobRecord, drivers: list[dict[str, Any]]) -> dict[str, Any]:
    row: dict[str, Any] = {"type": "SUBMISSION", "job_id": None, "submission_id": rec.submission_id,
                           "driver_info": None}
    row.update({k: getattr(rec, k) for k in _DETAIL_FIELDS})
    mine = [d for d in drivers if d.get("submission_id") == rec.submission_id]
    if mine:
        d = mine[-1]
        row["job_id"] = d["job_id"].hex()
        row["driver_info"] = {"id": d["job_id"].hex(), "node_ip_address": "127.0.0.1", "pid": str(d.get("pid", ""))}
    return row


def _listed(row: dict[str, Any]) -> dict[str, Any]:
    """A listing row: a large runtime_env is summed up (GET /api/jobs/{id} has all of it), so
    listing many jobs stays small."""
    size = len(json.dumps(row.get("runtime_env") or {}))
    if size > MAX_LISTED_RUNTIME_ENV_BYTES:
        row["runtime_env"] = {"_truncated": f"{size} bytes of runtime_env; GET /api/jobs/"
                                            f"{row['submission_id']} returns all of it"}
    return row


# drivers the cluster runs for itself (the Serve REST agent), left out of job lists as Ray leaves
# out its dashboard's own driver (namespace "_ray_internal_...")
INTERNAL_NAMESPACES = ("_raylite_internal", "_ray_internal_")


def internal_driver(d: dict[str, Any]) -> bool:
    return str(d.get("namespace") or "").startswith(INTERNAL_NAMESPACES)


def driver_details(d: dict[str, Any]) -> dict[str, Any]:
    """A driver that joined the cluster by itself (not submitted): Ray's type DRIVER."""
    alive = d.get("alive", False)
    return {"type": "DRIVER", "job_id": d["job_id"].hex(), "submission_id": None,
            "driver_info": {"id": d["job_id"].hex(), "node_ip_address": "127.0.0.1", "pid": str(d.get("pid", ""))},
            "status": "RUNNING" if alive else "SUCCEEDED", "entrypoint": d.get("entrypoint", ""),
            "message": None, "error_type": None, "start_time": d.get("start_time") or None,
            "end_time": None if alive else (d.get("end_time") or None), "metadata": {}, "runtime_env": {},
            "driver_agent_http_address": None, "driver_node_id": None, "driver_exit_code": None}


async def find(ctx: Any, job_id: str) -> tuple[JobRecord | None, dict[str, Any] | None]:
    manager: JobManager = ctx.extras["jobs"]
    rec = await manager.get(job_id)
    if rec is not None:
        return rec, None
    for d in await _drivers(ctx):
        if d["job_id"].hex() == job_id:
            if d.get("submission_id"):
                return await manager.get(d["submission_id"]), None
            return None, d
    return None, None


def routes(ctx: Any) -> list:
    def manager() -> JobManager:
        return ctx.extras["jobs"]

    async def submit(request: Request) -> Response:
        try:
            body = json.loads(await _body(request, MAX_SUBMIT_BODY_BYTES, "a job submission"))
        except JobError as e:
            return _error(e)
        except ValueError:
            return PlainTextResponse("the request body is not JSON; send a JobSubmitRequest object", 400)
        if not isinstance(body, dict):
            return PlainTextResponse("the request body must be a JSON object", 400)
        try:
            rec = await manager().submit(body)
        except JobError as e:
            return _error(e)
        return JSONResponse({"job_id": rec.submission_id, "submission_id": rec.submission_id})

    async def list_jobs(request: Request) -> Response:
        drivers = await _drivers(ctx)
        rows = [_listed(details(r, drivers)) for r in await manager().list()]
        rows += [driver_details(d) for d in drivers if not d.get("submission_id") and not internal_driver(d)]
        return JSONResponse(rows)

    async def get_job(request: Request) -> Response:
        job_id = request.path_params["job_id"]
        rec, driver = await find(ctx, job_id)
        if rec is not None:
            return JSONResponse(details(rec, await _drivers(ctx)))
        if driver is not None:
            return JSONResponse(driver_details(driver))
        return PlainTextResponse(f"Job {job_id} does not exist.", 404)

    async def job_logs(request: Request) -> Response:
        job_id = request.path_params["job_id"]
        rec, _ = await find(ctx, job_id)
        if rec is None:
            return PlainTextResponse(f"Job {job_id} does not exist.", 404)
        return JSONResponse({"logs": manager().logs(rec)})

    async def _act_on_job(request: Request, action: str, answer_key: str) -> Response:
        """Stop or delete a job given by job id or submission id; Ray's {"stopped"|"deleted": bool}."""
        job_id = request.path_params["job_id"]
        rec, _ = await find(ctx, job_id)
        try:
            done = await getattr(manager(), action)(rec.submission_id if rec else job_id)
        except JobError as e:
            return _error(e)
        return JSONResponse({answer_key: done})

    async def stop_job(request: Request) -> Response:
        return await _act_on_job(request, "stop", "stopped")

    async def delete_job(request: Request) -> Response:
        return await _act_on_job(request, "delete", "deleted")

    async def tail(ws: WebSocket) -> None:
        job_id = ws.path_params["job_id"]
        rec, _ = await find(ctx, job_id)
        await ws.accept()
        if rec is None:
            await ws.close(code=1008, reason=f"Job {job_id} does not exist.")
            return
        try:
            await _stream_log(ws, manager(), rec.submission_id, manager().log_file(rec))
        except WebSocketDisconnect:
            return
        await ws.close()

    async def package_get(request: Request) -> Response:
        name = request.path_params["name"]
        if await manager().package_exists(name):
            return PlainTextResponse("Package exists.")
        return PlainTextResponse(f"Package {name} does not exist", 404)

    async def package_put(request: Request) -> Response:
        try:
            data = await _body(request, packaging.MAX_PACKAGE_BYTES, "a working_dir or py_modules package")
            await manager().store_package(request.path_params["name"], data)
        except JobError as e:
            return _error(e)
        return PlainTextResponse("Successfully uploaded.")

    return [
        Route("/api/jobs/", submit, methods=["POST"]),
        Route("/api/jobs/", list_jobs, methods=["GET"]),
        Route("/api/jobs/{job_id}", get_job, methods=["GET"]),
        Route("/api/jobs/{job_id}", delete_job, methods=["DELETE"]),
        Route("/api/jobs/{job_id}/logs", job_logs, methods=["GET"]),
        Route("/api/jobs/{job_id}/stop", stop_job, methods=["POST"]),
        WebSocketRoute("/api/jobs/{job_id}/logs/tail", tail),
        Route("/api/packages/{scheme}/{name}", package_get, methods=["GET"]),
        Route("/api/packages/{scheme}/{name}", package_put, methods=["PUT"]),
    ]


async def _stream_log(ws: WebSocket, manager: JobManager, submission_id: str, path: str) -> None:
    """Send the log from the start, then what is appended, until the job ended and all is sent."""
    pos = 0
    while True:
        rec = await manager.get(submission_id)
        done = rec is None or rec.status in TERMINAL
        chunk = _read_from(path, pos)
        if chunk:
            pos += len(chunk)
            await ws.send_text(chunk.decode(errors="replace"))
        elif done:
            return
        else:
            await asyncio.sleep(0.2)


def _read_from(path: str, pos: int, limit: int = 1 << 20) -> bytes:
    try:
        with open(path, "rb") as f:
            if os.fstat(f.fileno()).st_size <= pos:
                return b""
            f.seek(pos)
            return f.read(limit)
    except OSError:
        return b""

