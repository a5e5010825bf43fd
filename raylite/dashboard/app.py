"""build_app(ctx): one Starlette app from every module in raylite.dashboard.routes.

A route module defines `routes(ctx) -> list[starlette.routing.BaseRoute]` and, if it
keeps state, `async def startup(ctx)` / `async def shutdown(ctx)`. Modules are found
with pkgutil, so a new page or feed is one new file. TokenAuth wraps the whole app, so
every route (and every 404) sits behind the token check.
"""

from __future__ import annotations

import contextlib
import importlib
import logging
import pkgutil
from collections.abc import AsyncIterator
from types import ModuleType
from typing import Any

from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse

from raylite.dashboard.auth import TokenAuth
from raylite.dashboard.browser_guard import BrowserGuard
from raylite.dashboard.context import DashboardContext

log = logging.getLogger("raylite.dashboard")


def route_modules() -> list[ModuleType]:
    import raylite.dashboard.routes as pkg

    out = []
    for info in sorted(pkgutil.iter_modules(pkg.__path__), key=lambda i: i.name):
        module = importlib.import_module(f"{pkg.__name__}.{info.name}")
        if callable(getattr(module, "routes", None)):
            out.append(module)
    return out


def build_app(ctx: DashboardContext, *, allow_loopback: bool = False) -> Any:
    """The ASGI app: Starlette with every route module mounted, behind the token check."""
    modules = route_modules()
    routes = [r for m in modules for r in m.routes(ctx)]

    @contextlib.asynccontextmanager
    async def lifespan(app: Starlette) -> AsyncIterator[None]:
        for m in modules:
            if hasattr(m, "startup"):
                await m.startup(ctx)
        try:
            yield
        finally:
            for m in reversed(modules):
                if hasattr(m, "shutdown"):
                    with contextlib.suppress(Exception):
                        await m.shutdown(ctx)
            ctx.head.close()

    app = Starlette(routes=routes, lifespan=lifespan, exception_handlers={Exception: _internal_error})
    app.state.ctx = ctx
    from raylite._core.config import NO_AUTH_TOKEN

    guarded = TokenAuth(app, ctx.token, allow_loopback=allow_loopback, no_auth=ctx.token == NO_AUTH_TOKEN)
    return BrowserGuard(guarded, ctx.config.dashboard_allowed_hosts)


async def _internal_error(request: Request, exc: Exception) -> JSONResponse:
    log.exception("error serving %s", request.url.path, exc_info=exc)
    return JSONResponse({"result": False, "msg": f"{type(exc).__name__}: {exc}"}, status_code=500)
