"""Redeploying on a cluster with no spare room (2 CPUs, 1-CPU replicas), as Ray allows: a new graph
under the same app name replaces the old one, and a rolling update never needs more than the
target's resources."""

from __future__ import annotations

import httpx
import pytest

import raylite
from tests.serve.conftest import free_port


@pytest.fixture(scope="module")
def small_serve():
    from raylite import serve

    if raylite.is_initialized():
        raylite.shutdown()
    raylite.init(num_cpus=2)
    port = free_port()
    serve.start(http_options={"host": "127.0.0.1", "port": port})
    yield serve, f"http://127.0.0.1:{port}"
    serve.shutdown()
    raylite.shutdown()


def test_new_graph_replaces_the_old_one_on_a_full_cluster(small_serve):
    serve, url = small_serve

    @serve.deployment
    class Old:
        def __call__(self) -> str:
            return "old"

        def __del__(self) -> None:
            import time

            time.sleep(4)  # a slow goodbye: the old replicas hold their CPUs a while

    @serve.deployment
    class OldFront:
        def __init__(self, old) -> None:
            self.old = old

        async def __call__(self) -> str:
            return await self.old.remote()

        def __del__(self) -> None:
            import time

            time.sleep(4)

    @serve.deployment
    class Model:
        def __call__(self) -> str:
            return "model"

    @serve.deployment
    class Router:
        def __init__(self, model) -> None:
            self.model = model

        async def __call__(self) -> str:
            return await self.model.remote()

    serve.run(OldFront.bind(Old.bind()))  # both CPUs taken
    assert httpx.get(url).text == "old"
    handle = serve.run(Router.bind(Model.bind()), timeout_s=60)  # same app name: "default"
    assert handle.remote().result() == "model"
    assert httpx.get(url).text == "model"
    assert set(serve.status().applications["default"].deployments) == {"Router", "Model"}
    serve.delete("default")


def test_rolling_update_fits_in_the_targets_resources(small_serve):
    serve, url = small_serve

    @serve.deployment(num_replicas=2)
    class Versioned:
        def __init__(self, version: str) -> None:
            self.version = version

        def __call__(self) -> str:
            return self.version

    serve.run(Versioned.bind("v1"), name="roll", route_prefix="/roll")
    assert {httpx.get(f"{url}/roll").text for _ in range(10)} == {"v1"}
    handle = serve.run(Versioned.bind("v2"), name="roll", route_prefix="/roll", timeout_s=60)
    assert {handle.remote().result() for _ in range(10)} == {"v2"}
    replicas = serve.status().applications["roll"].deployments["Versioned"].replica_states
    assert replicas == {"RUNNING": 2}
    serve.delete("roll")
