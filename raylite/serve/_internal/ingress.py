"""`@serve.ingress(app)`: carry a FastAPI (or other ASGI) app to the replica and bind its
class-based routes to the replica's instance.

A FastAPI app with compiled routes does not survive pickling (pydantic's validators and
starlette's `State` recurse on unpickle), so the driver sends a recipe -- the app's settings,
each API route's path, endpoint and options, its middleware and exception handlers -- and the
replica builds a fresh app from it. Routes whose endpoint is a method of the deployment class
get the bound method of the replica's instance, so `self` is not seen as a request parameter.
"""

from __future__ import annotations

import asyncio
import inspect
from typing import Any

import cloudpickle

_APP_KEYS = ("title", "description", "version", "openapi_url", "docs_url", "redoc_url", "summary",
             "openapi_tags", "servers", "swagger_ui_oauth2_redirect_url")


def _picklable(value: Any) -> bool:
    try:
        dumps(value)
        return True
    except Exception:  # noqa: BLE001
        return False


class _IngressPickler(cloudpickle.CloudPickler):
    """Pickles the deployment class and the recipe; any ASGI app object met on the way (say, in a
    pydantic model's saved parent namespace) becomes None -- the replica rebuilds the app."""

    def reducer_override(self, obj: Any) -> Any:
        try:
            from starlette.applications import Starlette
            from starlette.routing import Router
        except ImportError:  # pragma: no cover
            return super().reducer_override(obj)
        if isinstance(obj, Starlette | Router) and not isinstance(obj, type):
            return (_none, ())
        return super().reducer_override(obj)


def _none() -> None:
    return None


def dumps(obj: Any) -> bytes:
    import io

    buf = io.BytesIO()
    _IngressPickler(buf, protocol=5).dump(obj)
    return buf.getvalue()


def app_recipe(app: Any) -> dict:
    if app is None:
        return {"kind": "method"}  # the class's __serve_build_asgi_app__ builds it in the replica
    if inspect.isfunction(app):
        return {"kind": "factory", "factory": app}
    try:
        from fastapi import FastAPI
        from fastapi.routing import APIRoute, APIRouter, APIWebSocketRoute
    except ImportError:  # pragma: no cover
        FastAPI = None  # noqa: N806
    if FastAPI is None or not isinstance(app, FastAPI):
        return {"kind": "asgi", "app": app}
    add_params = [p for p in inspect.signature(APIRouter.add_api_route).parameters
                  if p not in ("self", "path", "endpoint")]
    default_paths = {app.openapi_url, app.docs_url, app.redoc_url, app.swagger_ui_oauth2_redirect_url}
    routes = []
    for route in app.router.routes:
        if isinstance(route, APIRoute):
            kwargs = {}
            for p in add_params:
                if hasattr(route, p):
                    value = getattr(route, p)
                    if _picklable(value):
                        kwargs[p] = value
            routes.append(("api", route.path, route.endpoint, kwargs))
        elif isinstance(route, APIWebSocketRoute):  # @app.websocket(...): its endpoint may be a method too
            routes.append(("ws", route.path, route.endpoint, {"name": route.name,
                                                              "dependencies": list(route.dependencies)}))
        elif getattr(route, "path", None) in default_paths:
            continue
        elif _picklable(route):
            routes.append(("raw", route))
    settings = {k: getattr(app, k) for k in _APP_KEYS if hasattr(app, k) and _picklable(getattr(app, k))}
    middleware = [m for m in app.user_middleware if _picklable(m)]
    handlers = {k: v for k, v in app.exception_handlers.items() if _picklable((k, v))}
    router = app.router
    lifespan = getattr(router, "lifespan_context", None)
    default_lifespan = lifespan is None or getattr(lifespan, "__name__", "") == "_DefaultLifespan" or \
        type(lifespan).__name__ == "_DefaultLifespan"
    return {"kind": "fastapi", "settings": settings, "routes": routes, "middleware": middleware,
            "handlers": handlers, "on_startup": [f for f in getattr(router, "on_startup", []) if _picklable(f)],
            "on_shutdown": [f for f in getattr(router, "on_shutdown", []) if _picklable(f)],
            "lifespan": None if default_lifespan or not _picklable(lifespan) else lifespan}


async def build_app_from_recipe(recipe: dict, cls: type, instance: Any) -> Any:
    """The replica's ASGI app; a factory or `__serve_build_asgi_app__` may be sync or async."""
    kind = recipe["kind"]
    if kind == "asgi":
        return recipe["app"]
    if kind in ("factory", "method"):
        out = recipe["factory"]() if kind == "factory" else instance.__serve_build_asgi_app__()
        if inspect.isawaitable(out):
            out = await out
        if out is None or not callable(out):
            what = "the ingress factory" if kind == "factory" else "__serve_build_asgi_app__"
            raise TypeError(f"{what} must return an ASGI app (such as a FastAPI app), not {out!r}")
        return out
    from fastapi import FastAPI

    methods: dict[Any, str] = {}
    for name, member in inspect.getmembers(cls):
        func = getattr(member, "__func__", member)
        if inspect.isfunction(func):
            methods[func] = name
    app = FastAPI(**recipe["settings"])
    for entry in recipe["routes"]:
        if entry[0] == "api":
            _, path, endpoint, kwargs = entry
            if endpoint in methods:
                endpoint = getattr(instance, methods[endpoint])
            app.router.add_api_route(path, endpoint, **kwargs)
        elif entry[0] == "ws":
            _, path, endpoint, kwargs = entry
            if endpoint in methods:
                endpoint = getattr(instance, methods[endpoint])
            app.router.add_api_websocket_route(path, endpoint, **kwargs)
        else:
            app.router.routes.append(entry[1])
    for m in recipe["middleware"]:
        app.user_middleware.append(m)
    for k, v in recipe["handlers"].items():
        app.exception_handlers[k] = v
    for hook in ("on_startup", "on_shutdown"):
        getattr(app.router, hook).extend(recipe.get(hook, ()))
    if recipe.get("lifespan") is not None:
        app.router.lifespan_context = recipe["lifespan"]
    return app


class Lifespan:
    """Runs an ASGI app's lifespan protocol in the replica: startup before the first request (a
    failure fails the replica's start, as in Ray), shutdown when the replica stops. `state` is the
    lifespan state that requests see as `request.state`. Apps without lifespan support are fine."""

    def __init__(self, app: Any) -> None:
        self.app = app
        self.state: dict = {}
        self._inbox: asyncio.Queue = asyncio.Queue()
        self._outbox: asyncio.Queue = asyncio.Queue()
        self._task: asyncio.Task | None = None
        self.supported = False

    async def _receive(self) -> dict:
        return await self._inbox.get()

    async def _send(self, message: dict) -> None:
        await self._outbox.put(message)

    async def _exchange(self, kind: str) -> None:
        await self._inbox.put({"type": f"lifespan.{kind}"})
        got = asyncio.ensure_future(self._outbox.get())
        await asyncio.wait([got, self._task], return_when=asyncio.FIRST_COMPLETED)
        if not got.done():  # the app returned (or raised) instead of answering: no lifespan support
            got.cancel()
            return
        message = got.result()
        if message["type"] == f"lifespan.{kind}.failed":
            raise RuntimeError(f"the ASGI app's lifespan {kind} failed: {message.get('message', '')}")
        self.supported = True

    async def startup(self) -> None:
        scope = {"type": "lifespan", "asgi": {"version": "3.0", "spec_version": "2.0"}, "state": self.state}
        self._task = asyncio.ensure_future(self._run(scope))
        await self._exchange("startup")

    async def _run(self, scope: dict) -> None:
        try:
            await self.app(scope, self._receive, self._send)
        except Exception:  # noqa: BLE001 - per the ASGI spec: the app does not do lifespan
            pass

    async def shutdown(self, timeout_s: float = 10.0) -> None:
        if not self.supported or self._task is None or self._task.done():
            return
        try:
            await asyncio.wait_for(self._exchange("shutdown"), timeout_s)
        except (asyncio.TimeoutError, RuntimeError):
            pass
