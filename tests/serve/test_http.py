"""Deployments answering real HTTP through the proxy: return types, routing, errors, streaming."""


import asyncio

import httpx
import pytest
from starlette.requests import Request
from starlette.responses import PlainTextResponse, StreamingResponse


def test_function_and_class_deployments_over_http(serve_instance):
    serve, url = serve_instance

    @serve.deployment
    def hello(request: Request) -> dict:
        return {"path": request.url.path, "q": request.query_params.get("q")}

    @serve.deployment(num_replicas=2)
    class Greeter:
        def __init__(self, greeting: str) -> None:
            self.greeting = greeting

        async def __call__(self, request: Request) -> str:
            body = await request.body()
            return f"{self.greeting}, {body.decode()}"

    serve.run(hello.bind(), name="fn", route_prefix="/fn")
    serve.run(Greeter.bind("hello"), name="cls", route_prefix="/greet")
    r = httpx.get(f"{url}/fn/a/b?q=1")
    assert r.status_code == 200 and r.json() == {"path": "/fn/a/b", "q": "1"}
    r = httpx.post(f"{url}/greet", content=b"world")
    assert r.status_code == 200 and r.text == "hello, world"
    assert r.headers["content-type"].startswith("text/plain")
    # X-Request-ID: echoed when given, generated otherwise
    r = httpx.get(f"{url}/fn", headers={"X-Request-ID": "abc-123"})
    assert r.headers["x-request-id"] == "abc-123"
    assert len(httpx.get(f"{url}/fn").headers["x-request-id"]) >= 16
    # longest prefix wins; unknown route is 404
    r = httpx.get(f"{url}/greetings")
    assert r.status_code == 404 and "not found" in r.text
    st = serve.status()
    assert st.applications["cls"].status == "RUNNING"
    assert st.applications["cls"].deployments["Greeter"].status == "HEALTHY"
    assert st.applications["cls"].deployments["Greeter"].replica_states == {"RUNNING": 2}
    serve.delete("fn")
    assert httpx.get(f"{url}/fn").status_code == 404
    assert "fn" not in serve.status().applications
    serve.delete("cls")


def test_errors_become_500_and_replica_keeps_serving(serve_instance):
    serve, url = serve_instance

    @serve.deployment
    class Flaky:
        def __call__(self, request: Request):
            what = request.query_params.get("what")
            if what == "raise":
                raise ValueError("bad input 42")
            if what == "object":
                return object()  # no __dict__ and not a mapping: neither Ray nor raylite can encode it
            if what == "response":
                return PlainTextResponse("teapot", status_code=418)
            return ["ok"]

    serve.run(Flaky.bind(), name="flaky", route_prefix="/flaky")
    r = httpx.get(f"{url}/flaky?what=raise")
    assert r.status_code == 500 and "ValueError" in r.text and "bad input 42" in r.text
    r = httpx.get(f"{url}/flaky?what=object")
    assert r.status_code == 500 and "type object" in r.text
    r = httpx.get(f"{url}/flaky?what=response")
    assert r.status_code == 418 and r.text == "teapot"
    r = httpx.get(f"{url}/flaky")
    assert r.status_code == 200 and r.json() == ["ok"]
    serve.delete("flaky")


def test_streaming_response_is_sent_chunk_by_chunk(serve_instance):
    serve, url = serve_instance

    @serve.deployment
    class Streamer:
        def __init__(self) -> None:
            self.release = asyncio.Event()

        async def __call__(self, request: Request):
            if request.url.path.endswith("/release"):
                self.release.set()
                return "released"

            async def gen():
                yield "data: first\n\n"
                await self.release.wait()  # the first event must reach the client before this
                for i in range(3):
                    yield f"data: {i}\n\n"

            return StreamingResponse(gen(), media_type="text/event-stream")

    serve.run(Streamer.bind(), name="sse", route_prefix="/sse")
    with httpx.Client(timeout=10) as client:
        with client.stream("GET", f"{url}/sse") as r:
            assert r.status_code == 200
            assert r.headers["content-type"].startswith("text/event-stream")
            chunks = r.iter_text()
            assert next(chunks) == "data: first\n\n"
            assert client.get(f"{url}/sse/release").text == "released"
            rest = "".join(chunks)
    assert rest == "data: 0\n\ndata: 1\n\ndata: 2\n\n"
    serve.delete("sse")


def test_fastapi_ingress_and_validation(serve_instance):
    serve, url = serve_instance
    from fastapi import FastAPI
    from pydantic import BaseModel

    api = FastAPI()

    class Item(BaseModel):
        name: str
        price: float

    @serve.deployment
    @serve.ingress(api)
    class Shop:
        def __init__(self, currency: str) -> None:
            self.currency = currency

        @api.get("/items/{item_id}")
        def get_item(self, item_id: int) -> dict:
            return {"id": item_id, "currency": self.currency}

        @api.post("/items")
        async def create(self, item: Item) -> dict:
            return {"name": item.name, "total": item.price * 2, "currency": self.currency}

    serve.run(Shop.bind("EUR"), name="shop", route_prefix="/shop")
    r = httpx.get(f"{url}/shop/items/7")
    assert r.status_code == 200 and r.json() == {"id": 7, "currency": "EUR"}
    r = httpx.post(f"{url}/shop/items", json={"name": "pen", "price": 1.5})
    assert r.status_code == 200 and r.json() == {"name": "pen", "total": 3.0, "currency": "EUR"}
    r = httpx.post(f"{url}/shop/items", json={"name": "pen"})
    assert r.status_code == 422 and "price" in r.text
    assert httpx.get(f"{url}/shop/nope").status_code == 404
    serve.delete("shop")


def test_full_queue_is_503(serve_instance):
    serve, url = serve_instance

    @serve.deployment(max_ongoing_requests=1, max_queued_requests=1)
    class Slow:
        def __init__(self) -> None:
            self.gate = asyncio.Event()

        async def __call__(self, request: Request) -> str:
            if request.url.path.endswith("/open"):
                self.gate.set()
                return "opened"
            await self.gate.wait()
            return "done"

    serve.run(Slow.bind(), name="slow", route_prefix="/slow")
    handle = serve.get_app_handle("slow")

    async def burst() -> list[int]:
        async with httpx.AsyncClient(timeout=10) as client:
            tasks = [asyncio.ensure_future(client.get(f"{url}/slow")) for _ in range(4)]
            await asyncio.sleep(0.5)
            # one runs, one is queued, the rest are refused; then let them finish
            while not all(t.done() for t in tasks[2:]) and sum(t.done() for t in tasks) < 2:
                await asyncio.sleep(0.05)
            await asyncio.sleep(0.3)
            return [t.result().status_code for t in tasks if t.done()], tasks

    async def run() -> list[int]:
        done_codes, tasks = await burst()
        assert done_codes.count(503) >= 1
        r = handle.options(method_name="__call__")
        del r
        return done_codes

    codes = asyncio.run(run())
    assert 503 in codes
    # open the gate through a fresh request path so the queued ones complete
    serve.delete("slow")


def test_request_timeout_is_408(serve_instance):
    serve, url = serve_instance

    @serve.deployment
    async def sleepy(request: Request) -> str:
        await asyncio.sleep(60)
        return "late"

    serve.run(sleepy.bind(), name="sleepy", route_prefix="/sleepy")
    r = httpx.get(f"{url}/sleepy", timeout=30)
    assert r.status_code == 408 and "request_timeout_s" in r.text
    serve.delete("sleepy")


def test_client_disconnect_cancels_the_request(serve_instance):
    serve, url = serve_instance

    @serve.deployment
    class Waiter:
        def __init__(self) -> None:
            self.cancelled = 0

        async def __call__(self, request: Request) -> str:
            try:
                await asyncio.sleep(60)
            except asyncio.CancelledError:
                self.cancelled += 1
                raise
            return "late"

        def count(self) -> int:
            return self.cancelled

    handle = serve.run(Waiter.bind(), name="waiter", route_prefix="/waiter")
    with pytest.raises(httpx.ReadTimeout):
        httpx.get(f"{url}/waiter", timeout=0.7)
    from tests.conftest import wait_for

    wait_for(lambda: handle.count.remote().result() == 1, timeout_s=10, what="the replica to see the cancel")
    serve.delete("waiter")


def test_proxy_health_and_routes_win_over_an_app_at_the_root(serve_instance):
    """KubeRay's RayService worker probe reads :8000/-/healthz whatever the apps' prefixes are."""
    serve, url = serve_instance

    @serve.deployment
    def catch_all(request: Request) -> str:
        return "app"

    serve.run(catch_all.bind(), name="root_app", route_prefix="/")
    try:
        assert httpx.get(f"{url}/anything").text == "app"
        r = httpx.get(f"{url}/-/healthz")
        assert (r.status_code, r.text) == (200, "success")
        assert httpx.get(f"{url}/-/routes").json().get("/") == "root_app"
    finally:
        serve.delete("root_app")
