"""Logs over HTTP: GET /api/v0/logs (list) and /api/v0/logs/file (read, tail, follow).

    GET /api/v0/logs?node_id=<id or prefix>&glob=worker-*
        -> {"result": true, "msg": "", "data": {"result": [{node_id, node_ip, filename, size, mtime, category}]}}
    GET /api/v0/logs/file?node_id=..&filename=..  (or actor_id= | task_id= | job_id=, suffix=out|err)
        &lines=N (last N lines; default all) &follow=1 (keep streaming what is appended)
        -> text/plain, streamed
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from typing import Any

from starlette.requests import Request
from starlette.responses import JSONResponse, Response, StreamingResponse
from starlette.routing import Route

from raylite._core import protocol as P
from raylite.dashboard import logs as L

_CHUNK = 1 << 20


def routes(ctx: Any) -> list:
    async def list_logs(request: Request) -> Response:
        q = request.query_params
        rows = await L.list_files(ctx, q.get("node_id", ""), q.get("glob", ""))
        return JSONResponse({"result": True, "msg": "", "data": {"result": rows}})

    async def read_file(request: Request) -> Response:
        q = request.query_params
        try:
            lines = int(q.get("lines", "-1"))
            node_id, address, name = await L.resolve(
                ctx, node_id=q.get("node_id", ""), filename=q.get("filename", ""), actor_id=q.get("actor_id", ""),
                task_id=q.get("task_id", ""), job_id=q.get("job_id", ""), suffix=q.get("suffix", "out"))
        except ValueError:
            return JSONResponse({"result": False, "msg": "lines must be an integer"}, status_code=400)
        except L.LogNotFound as e:
            return JSONResponse({"result": False, "msg": str(e)}, status_code=404)
        first = await ctx.head.request_peer(address, P.ReadLog(name, 0, _CHUNK, lines if lines >= 0 else -1))
        if not first.found:
            return JSONResponse({"result": False, "msg": f"no log file {name!r} on node {node_id[:12]} "
                                 "(`raylite logs` lists them)"}, status_code=404)
        follow = q.get("follow") in ("1", "true")
        return StreamingResponse(_stream(ctx, address, name, first, lines, follow, request),
                                 media_type="text/plain; charset=utf-8")

    return [Route("/api/v0/logs", list_logs), Route("/api/v0/logs/file", read_file)]


async def _stream(ctx: Any, address: str, name: str, first: Any, lines: int, follow: bool,
                  request: Request) -> AsyncIterator[bytes]:
    yield first.data
    offset = first.end
    if lines < 0:  # a whole-file read: go on until the end
        while True:
            reply = await ctx.head.request_peer(address, P.ReadLog(name, offset, _CHUNK))
            if not reply.data:
                break
            offset = reply.end
            yield reply.data
    while follow and not await request.is_disconnected():
        reply = await ctx.head.request_peer(address, P.ReadLog(name, offset, _CHUNK))
        if reply.data:
            offset = reply.end
            yield reply.data
        else:
            await asyncio.sleep(0.25)
