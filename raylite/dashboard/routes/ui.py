"""The dashboard page: / serves index.html, /static/ its scripts, styles and vendored libraries.

Everything ships inside the package (raylite/dashboard/static, with uPlot and its license
under static/vendor/), so the page works without internet access. The page is a single
HTML file with plain scripts; each page of it polls the JSON feeds of
routes/dashboard_api.py, the jobs and logs APIs, and the head's history.
"""

from __future__ import annotations

import os
from typing import Any

from starlette.requests import Request
from starlette.responses import FileResponse
from starlette.routing import Mount, Route

STATIC_DIR = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "static")


def routes(ctx: Any) -> list:
    from starlette.staticfiles import StaticFiles

    async def index(request: Request) -> FileResponse:
        return FileResponse(os.path.join(STATIC_DIR, "index.html"), headers={"cache-control": "no-cache"})

    return [Route("/", index), Mount("/static", StaticFiles(directory=STATIC_DIR), name="static")]
