"""/api/version and /api/ray/version (Ray's job and Serve clients check them before anything
else; the same JSON, as in Ray) and /api/gcs_healthz."""

from __future__ import annotations

import os
from typing import Any

from starlette.requests import Request
from starlette.responses import JSONResponse, PlainTextResponse
from starlette.routing import Route

# the Ray API level raylite answers to; Ray's JobSubmissionClient requires >= 2.8
RAY_API_VERSION = "2.40.0"


def raylite_version() -> str:
    from importlib import metadata

    try:
        return metadata.version("raylite")
    except Exception:  # noqa: BLE001  a source tree
        return "0+unknown"


def routes(ctx: Any) -> list:
    async def version(request: Request) -> JSONResponse:
        return JSONResponse({"version": "4", "ray_version": RAY_API_VERSION, "ray_commit": "raylite",
                             "raylite_version": raylite_version(),
                             "session_name": os.path.basename(ctx.session_dir)})

    async def healthz(request: Request) -> PlainTextResponse:
        from raylite._core import protocol as P

        await ctx.head.request(P.GetClusterInfo(), 5.0)
        return PlainTextResponse("success")

    return [Route("/api/version", version), Route("/api/ray/version", version),
            Route("/api/gcs_healthz", healthz)]
