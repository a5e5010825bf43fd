"""`@serve.ingress(factory)`: a function building a FastAPI app in each replica (middleware,
exception handlers, `Depends(serve.get_deployment_handle)`, lifespan) answers over Serve's HTTP
exactly what the same app answers when called directly."""

from __future__ import annotations

import asyncio
import contextlib
import time

import httpx
import pytest

pytest.importorskip("fastapi")


def build_app():
    from fastapi import Depends, FastAPI, Request
    from fastapi.responses import JSONResponse
    from pydantic import BaseModel

    from raylite import serve

    class TextIn(BaseModel):
        text: str

    class Prediction(BaseModel):
        label: str
        score: float

    @contextlib.asynccontextmanager
    async def lifespan(app):
        yield {"model": "tiny"}  # lifespan state: requests see it as request.state.model

    app = FastAPI(title="factory", lifespan=lifespan)

    @app.middleware("http")
    async def tag(request, call_next):
        response = await call_next(request)
        response.headers["X-Handled-By"] = "middleware"
        return response

    @app.exception_handler(ValueError)
    async def value_error(request, exc):
        return JSONResponse(status_code=400, content={"error": "Invalid input", "detail": str(exc)})

    def classifier():
        return serve.get_deployment_handle("Classifier", "factory")

    app.state.classifier_dependency = classifier

    @app.get("/health")
    def health(request: Request):
        return {"status": "ok", "model": request.state.model}

    @app.post("/predict", response_model=Prediction)
    async def predict(body: TextIn, handle=Depends(classifier)):
        if not body.text.strip():
            raise ValueError("text cannot be empty")
        return Prediction(**(await handle.predict.remote(body.text)))

    @app.get("/items/{item_id}")
    def item(item_id: int, q: str | None = None):
        return {"item_id": item_id, "q": q}

    return app


class _FakeResponse:
    def __init__(self, value) -> None:
        self.value = value

    def __await__(self):
        async def get():
            return self.value

        return get().__await__()


class _FakeHandle:
    class predict:  # noqa: N801 - mimics handle.predict.remote(...)
        @staticmethod
        def remote(text: str):
            return _FakeResponse({"label": "positive" if len(text) > 10 else "negative", "score": 0.5})


REQUESTS = [
    ("GET", "/health", None),
    ("POST", "/predict", {"text": "this is a long enough text"}),
    ("POST", "/predict", {"text": "   "}),          # ValueError -> the app's own 400 handler
    ("POST", "/predict", {"wrong": 1}),            # FastAPI's 422 validation body
    ("GET", "/items/7?q=x", None),
    ("GET", "/items/seven", None),                 # path parameter that is not an int: 422
    ("GET", "/missing", None),                     # 404 from the router
    ("DELETE", "/health", None),                   # 405
]


def _direct_answers() -> list[tuple]:
    app = build_app()
    app.dependency_overrides[app.state.classifier_dependency] = lambda: _FakeHandle()

    async def run() -> list[tuple]:
        out = []
        async with contextlib.AsyncExitStack() as stack:
            # run the lifespan so request.state.model exists, as Serve's replica does
            state = await stack.enter_async_context(app.router.lifespan_context(app)) or {}

            async def with_state(scope, receive, send):  # what an ASGI server does with lifespan state
                scope["state"] = dict(state)
                await app(scope, receive, send)

            transport = httpx.ASGITransport(app=with_state)
            client = await stack.enter_async_context(httpx.AsyncClient(transport=transport, base_url="http://x"))
            for method, path, body in REQUESTS:
                r = await client.request(method, path, json=body)
                out.append((r.status_code, r.headers.get("content-type"), r.headers.get("x-handled-by"), r.json()))
        return out

    return asyncio.run(run())


def test_factory_app_answers_what_fastapi_answers(serve_instance):
    from raylite.serve.application import ingress

    serve, url = serve_instance

    @serve.deployment
    class Classifier:
        def predict(self, text: str) -> dict:
            return {"label": "positive" if len(text) > 10 else "negative", "score": 0.5}

    @serve.deployment
    @ingress(build_app)
    class Api:
        def __init__(self, classifier) -> None:
            self.classifier = classifier

    serve.run(Api.bind(Classifier.bind()), name="factory", route_prefix="/factory")
    served = []
    for method, path, body in REQUESTS:
        r = httpx.request(method, f"{url}/factory{path}", json=body, timeout=10)
        served.append((r.status_code, r.headers.get("content-type"), r.headers.get("x-handled-by"), r.json()))
    assert served == _direct_answers()
    serve.delete("factory")


def test_ingress_without_a_class_and_with_a_build_method(serve_instance):
    from fastapi import FastAPI

    serve, url = serve_instance
    started = []

    def factory():
        app = FastAPI()

        @app.on_event("startup")
        async def boot():
            started.append(time.time())
            app.state.booted = True

        @app.get("/")
        def root():
            return {"booted": getattr(app.state, "booted", False)}

        return app

    serve.run(serve.deployment(serve.ingress(factory)()).bind(), name="bare", route_prefix="/bare")
    assert httpx.get(f"{url}/bare/").json() == {"booted": True}  # the startup hook ran in the replica

    @serve.deployment
    @serve.ingress()
    class Built:
        def __init__(self, greeting: str) -> None:
            self.greeting = greeting

        def __serve_build_asgi_app__(self):
            app = FastAPI()

            @app.get("/hi")
            def hi():
                return self.greeting

            return app

    serve.run(Built.bind("hello"), name="built", route_prefix="/built")
    assert httpx.get(f"{url}/built/hi").json() == "hello"
    serve.delete("bare")
    serve.delete("built")


def test_ingress_rejects_what_ray_rejects():
    from raylite import serve

    with pytest.raises(ValueError, match="__call__"):
        @serve.ingress(lambda: None)
        class WithCall:
            def __call__(self):
                return 1

    with pytest.raises(ValueError, match="__serve_build_asgi_app__"):
        @serve.ingress()
        class Nothing:
            pass
