"""`@serve.ingress(app)`: carry a FastAPI (or other ASGI) app to the replica and bind its
class-based routes to the replica's instance.

A FastAPI app with compiled routes does not survive pickling (pydantic's validators and
starlette's `State` recurse on unpickle), so the driver sends a recipe -- the app's settings,
each API route's path, endpoint and options, its middleware and exception handlers -- and the
replica builds a fresh app from it. Routes whose endpoint is a method of the deployment class
get the bound method of the replica's instance, so `self` is not seen as a request parameter.
"""

from __future__ import annotations

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
    return {"kind": "fastapi", "settings": settings, "routes": routes, "middleware": middleware,
            "handlers": handlers}


def build_app_from_recipe(recipe: dict, cls: type, instance: Any) -> Any:
    if recipe["kind"] == "asgi":
        return recipe["app"]
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
    return app
