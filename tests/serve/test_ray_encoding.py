"""Over real HTTP: return values are encoded as Ray Serve encodes them, and callables that take
no request are served (function deployments, classes, sync and async alike)."""

from __future__ import annotations

import dataclasses

import httpx


@dataclasses.dataclass
class Reply:
    name: str
    sizes: list


def test_return_values_are_encoded_like_ray(serve_instance):
    serve, url = serve_instance

    @serve.deployment
    def params(request):
        return request.query_params

    @serve.deployment
    class Shapes:
        def __call__(self, request):
            kind = request.query_params["kind"]
            if kind == "dataclass":
                return Reply("a", [1, 2])
            if kind == "none":
                return None
            if kind == "bytes":
                return b"\x01\x02"
            if kind == "headers":
                return request.headers
            return {"nested": (Reply("b", []),)}

    serve.run(params.bind(), name="params", route_prefix="/params")
    serve.run(Shapes.bind(), name="shapes", route_prefix="/shapes")
    r = httpx.get(f"{url}/params?a=b&c=d")
    assert r.status_code == 200 and r.headers["content-type"] == "application/json"
    assert r.json() == {"a": "b", "c": "d"}
    assert httpx.get(f"{url}/shapes?kind=dataclass").json() == {"name": "a", "sizes": [1, 2]}
    assert httpx.get(f"{url}/shapes?kind=other").text == '{"nested":[{"name":"b","sizes":[]}]}'
    r = httpx.get(f"{url}/shapes?kind=none")
    assert r.status_code == 200 and r.content == b"" and r.headers["content-type"] == "text/plain"
    r = httpx.get(f"{url}/shapes?kind=bytes")
    assert r.content == b"\x01\x02" and r.headers["content-type"] == "text/plain"
    assert httpx.get(f"{url}/shapes?kind=headers", headers={"x-probe": "7"}).json()["x-probe"] == "7"
    serve.delete("params")
    serve.delete("shapes")


def test_callables_without_a_request_parameter_are_served(serve_instance):
    serve, url = serve_instance

    @serve.deployment
    def sleeper():
        return "slept"

    @serve.deployment
    class Counter:
        def __init__(self) -> None:
            self.n = 0

        def __call__(self):
            self.n += 1
            return {"count": self.n}

    @serve.deployment
    class AsyncHello:
        async def __call__(self) -> str:
            return "hello"

    serve.run(sleeper.bind(), name="sleeper", route_prefix="/sleep")
    serve.run(Counter.bind(), name="counter", route_prefix="/count")
    handle = serve.run(AsyncHello.bind(), name="ahello", route_prefix="/ahello")
    assert httpx.get(f"{url}/sleep").text == "slept"
    assert httpx.get(f"{url}/count").json() == {"count": 1}
    assert httpx.post(f"{url}/count", content=b"ignored").json() == {"count": 2}
    assert httpx.get(f"{url}/ahello").text == "hello"
    assert handle.remote().result() == "hello"  # handle calls are unchanged
    for app in ("sleeper", "counter", "ahello"):
        serve.delete(app)
