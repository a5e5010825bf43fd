"""DeploymentHandle: calls, composition, streaming, responses as arguments, replica context."""

import asyncio

import httpx
import pytest

import raylite
from raylite.serve.handle import DeploymentHandle, DeploymentResponse, DeploymentResponseGenerator


def test_handle_calls_composition_and_streaming(serve_instance):
    serve, url = serve_instance

    @serve.deployment(num_replicas=2)
    class Adder:
        def __init__(self, base: int) -> None:
            self.base = base

        def __call__(self, x: int) -> int:
            return self.base + x

        async def add(self, x: int, y: int) -> int:
            return x + y + self.base

        def count(self, n: int):
            yield from range(n)

        async def acount(self, n: int):
            for i in range(n):
                await asyncio.sleep(0)
                yield {"i": i}

        def whoami(self) -> tuple:
            ctx = serve.get_replica_context()
            return ctx.app_name, ctx.deployment

        def boom(self) -> None:
            raise KeyError("missing")

    @serve.deployment
    class Front:
        def __init__(self, adder: DeploymentHandle) -> None:
            assert isinstance(adder, DeploymentHandle)
            self.adder = adder

        async def __call__(self, request) -> dict:
            x = int(request.query_params["x"])
            one = self.adder.remote(x)           # a response passed on without awaiting it
            two = await self.adder.add.remote(one, 1)
            return {"result": two}

    handle = serve.run(Front.bind(Adder.bind(100)), name="comp", route_prefix="/comp")
    assert httpx.get(f"{url}/comp?x=1").json() == {"result": 202}
    adder = serve.get_deployment_handle("Adder", app_name="comp")
    resp = adder.remote(5)
    assert isinstance(resp, DeploymentResponse)
    assert resp.result(timeout_s=10) == 105
    assert adder.add.remote(1, 2).result() == 103
    assert adder.options(method_name="add").remote(2, 2).result() == 104
    # a response as an argument to another call
    assert adder.add.remote(adder.remote(0), 0).result() == 200
    gen = adder.options(stream=True).count.remote(4)
    assert isinstance(gen, DeploymentResponseGenerator)
    assert list(gen) == [0, 1, 2, 3]

    async def consume() -> list:
        out = [x async for x in adder.options(stream=True).acount.remote(3)]
        return out + [await adder.add.remote(0, 0)]

    assert asyncio.run(consume()) == [{"i": 0}, {"i": 1}, {"i": 2}, 100]
    assert adder.whoami.remote().result() == ("comp", "Adder")
    with pytest.raises(KeyError, match="missing"):
        adder.boom.remote().result()
    assert adder.remote(1).result() == 101  # the replica keeps serving after an error
    assert serve.get_app_handle("comp").remote  # ingress handle exists
    assert handle.deployment_name == "Front"
    ref = asyncio.run(_to_ref(adder.remote(7)))
    assert raylite.get(ref) == 107
    with pytest.raises(Exception, match="does not exist"):
        serve.get_app_handle("nope")
    serve.delete("comp")


async def _to_ref(resp):
    return await resp._to_object_ref()


def test_multiplexed_model_id_and_request_context(serve_instance):
    serve, url = serve_instance

    @serve.deployment
    class Ctx:
        def __call__(self, request) -> dict:
            from raylite.serve.context import _serve_request_context

            ctx = _serve_request_context.get()
            return {"model": ctx.multiplexed_model_id, "route": ctx.route, "app": ctx.app_name,
                    "rid": ctx.request_id}

        def model(self) -> str:
            from raylite.serve.context import _serve_request_context

            return _serve_request_context.get().multiplexed_model_id

    handle = serve.run(Ctx.bind(), name="ctx", route_prefix="/ctx")
    r = httpx.get(f"{url}/ctx", headers={"serve_multiplexed_model_id": "m1", "x-request-id": "r9"})
    assert r.json() == {"model": "m1", "route": "/ctx", "app": "ctx", "rid": "r9"}
    assert handle.options(multiplexed_model_id="m2").model.remote().result() == "m2"
    serve.delete("ctx")


def test_user_config_and_rolling_redeploy(serve_instance):
    serve, url = serve_instance

    def make(version: str):
        @serve.deployment(name="Conf", num_replicas=2, user_config={"greeting": "hi"})
        class Conf:
            def __init__(self) -> None:
                self.greeting = None

            def reconfigure(self, config: dict) -> None:
                self.greeting = config["greeting"]

            def __call__(self, request) -> str:
                return f"{version}:{self.greeting}"

        return Conf

    Conf = make("v1")
    serve.run(Conf.bind(), name="conf", route_prefix="/conf")
    assert httpx.get(f"{url}/conf").text == "v1:hi"
    pids_before = _replica_ids(serve, "conf", "Conf")
    # user_config only: replicas reconfigured in place
    serve.run(Conf.options(user_config={"greeting": "hello"}).bind(), name="conf", route_prefix="/conf")
    from tests.conftest import wait_for

    wait_for(lambda: {httpx.get(f"{url}/conf").text for _ in range(6)} == {"v1:hello"}, timeout_s=20,
             what="reconfigure on every replica")
    assert _replica_ids(serve, "conf", "Conf") == pids_before
    # new code: rolling update to new replicas
    serve.run(make("v2").bind(), name="conf", route_prefix="/conf")
    wait_for(lambda: {httpx.get(f"{url}/conf").text for _ in range(6)} == {"v2:hi"}, timeout_s=30,
             what="rolling update")
    wait_for(lambda: not (_replica_ids(serve, "conf", "Conf") & pids_before), timeout_s=30,
             what="old replicas to stop")
    serve.delete("conf")


def _replica_ids(serve, app: str, dep: str) -> set:
    from raylite.serve._internal.client import get_controller

    reps = raylite.get(get_controller().list_replicas.remote(app, dep))
    return {r["replica_id"] for r in reps if r["state"] == "RUNNING"}


def test_max_ongoing_requests_holds_across_routers(serve_instance):
    serve, url = serve_instance

    @serve.deployment(max_ongoing_requests=1)
    class One:
        def __init__(self) -> None:
            self.active = self.peak = 0

        async def __call__(self, request=None) -> int:
            self.active += 1
            self.peak = max(self.peak, self.active)
            await asyncio.sleep(0.2)
            self.active -= 1
            return self.peak

        def peak_seen(self) -> int:
            return self.peak

    handle = serve.run(One.bind(), name="one", route_prefix="/one")

    async def both() -> None:
        async with httpx.AsyncClient(timeout=30) as client:
            http = [client.get(f"{url}/one") for _ in range(3)]
            calls = [handle.remote() for _ in range(3)]  # the driver's router, apart from the proxy's
            results = await asyncio.gather(*http, *calls)
        assert all(r.status_code == 200 for r in results[:3]), [(r.status_code, r.text) for r in results[:3]]

    asyncio.run(both())
    assert handle.peak_seen.remote().result() == 1
    serve.delete("one")


def test_requests_for_a_model_go_to_the_replica_that_loaded_it(serve_instance):
    serve, _url = serve_instance

    @serve.deployment(num_replicas=2, max_ongoing_requests=8)
    class Models:
        @serve.multiplexed(max_num_models_per_replica=2)
        async def get_model(self, model_id: str) -> str:
            return f"model-{model_id}"

        async def __call__(self) -> tuple:
            import os

            model = await self.get_model(serve.get_multiplexed_model_id())
            return model, os.getpid()

    handle = serve.run(Models.bind(), name="models", route_prefix=None)
    model, pid = handle.options(multiplexed_model_id="a").remote().result()
    assert model == "model-a"
    from raylite.serve._internal.client import get_controller
    from tests.conftest import wait_for

    def reported() -> bool:
        reps = raylite.get(get_controller().list_replicas.remote("models", "Models"))
        return any(r["pid"] == pid and "a" in r["model_ids"] for r in reps)

    # once the replica's loaded models are reported (metrics poll), "a" always goes there
    wait_for(reported, timeout_s=20, what="the replica to report model 'a'")
    import time

    time.sleep(0.5)  # the controller's publish reaching this process's router (a long poll)
    pids = {handle.options(multiplexed_model_id="a").remote().result()[1] for _ in range(12)}
    assert pids == {pid}
    serve.delete("models")
