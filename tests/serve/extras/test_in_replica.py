"""@serve.batch and @serve.multiplexed inside real replicas, through handles and HTTP."""

from __future__ import annotations

import asyncio

import pytest

import raylite.serve as serve_pkg

httpx = pytest.importorskip("httpx")
pytestmark = pytest.mark.skipif(not hasattr(serve_pkg, "run"),
                                reason="the Serve runtime (branch serve) is not merged here")


@pytest.fixture(scope="module")
def serve(serve_instance):
    """The shared Serve instance of tests/serve/conftest.py."""
    return serve_instance[0]


@pytest.fixture(scope="module")
def url(serve_instance):
    return serve_instance[1]


def test_batch_in_a_replica_gathers_concurrent_handle_calls(serve):
    @serve.deployment(max_ongoing_requests=32, ray_actor_options={"num_cpus": 0})
    class Batcher:
        def __init__(self) -> None:
            self.sizes: list[int] = []

        @serve.batch(max_batch_size=8, batch_wait_timeout_s=0.5)
        async def double(self, xs: list[int]) -> list[int]:
            self.sizes.append(len(xs))
            return [2 * x for x in xs]

        async def sizes_seen(self) -> list[int]:
            return self.sizes

    handle = serve.run(Batcher.bind(), name="batcher", route_prefix="/batcher")

    async def main():
        return await asyncio.gather(*(handle.double.remote(i) for i in range(8)))

    assert asyncio.run(main()) == [2 * i for i in range(8)]
    sizes = handle.sizes_seen.remote().result(timeout_s=60)
    assert sum(sizes) == 8 and max(sizes) > 1
    serve.delete("batcher")


def test_multiplexed_model_id_from_handle_options_and_http_header(serve, url):
    @serve.deployment(ray_actor_options={"num_cpus": 0})
    class Models:
        def __init__(self) -> None:
            self.loads: list[str] = []

        @serve.multiplexed(max_num_models_per_replica=2)
        async def get_model(self, model_id: str) -> str:
            self.loads.append(model_id)
            return f"model-{model_id}"

        async def __call__(self, request=None) -> dict:
            model_id = serve.get_multiplexed_model_id()
            return {"model": await self.get_model(model_id), "loads": list(self.loads)}

    handle = serve.run(Models.bind(), name="models", route_prefix="/models")
    first = handle.options(multiplexed_model_id="a").remote().result(timeout_s=60)
    assert first == {"model": "model-a", "loads": ["a"]}
    r = httpx.get(f"{url}/models", headers={"serve_multiplexed_model_id": "b"},
                  timeout=30)
    assert r.status_code == 200 and r.json() == {"model": "model-b", "loads": ["a", "b"]}
    again = handle.options(multiplexed_model_id="a").remote().result(timeout_s=60)
    assert again["loads"] == ["a", "b"]  # cached: no second load
    handle.options(multiplexed_model_id="c").remote().result(timeout_s=60)  # evicts b (least recent)
    last = handle.options(multiplexed_model_id="b").remote().result(timeout_s=60)
    assert last["loads"] == ["a", "b", "c", "b"]
    serve.delete("models")
