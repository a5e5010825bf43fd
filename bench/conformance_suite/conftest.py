"""Ray's test fixtures (`ray_start_regular`, `ray_start_cluster`, `shutdown_only`, `serve_instance`,
...) written again against the public `ray` API, for running Ray's own test modules unmodified on
Ray 2.60 and on raylite (bench/conformance_tests.py copies this file beside them).

The same fixtures run on both sides, so a difference in outcome is a difference of the system,
not of the scaffolding. Each fixture takes the parameters Ray's do (`request.param`, indirect
parametrization) with Ray's defaults (1 CPU, a 150 MiB object store, the namespace
"default_test_namespace").
"""

from __future__ import annotations

import contextlib
import os
import socket
import sys
from collections.abc import Iterator
from typing import Any

import pytest
import ray

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import ray_test_helpers  # noqa: E402

ray_test_helpers.install(sys.modules[__name__])

from ray.cluster_utils import Cluster  # noqa: E402

_DEFAULTS: dict[str, Any] = {
    "num_cpus": 1,
    "object_store_memory": 150 * 1024 * 1024,
    "namespace": "default_test_namespace",
}


def pytest_configure(config: pytest.Config) -> None:
    for marker in ("asyncio", "timeout"):
        config.addinivalue_line("markers", marker)


@contextlib.contextmanager
def _ray_start(**kwargs: Any) -> Iterator[Any]:
    init_kwargs = dict(_DEFAULTS)
    init_kwargs.update(kwargs)
    info = ray.init("local", **init_kwargs)
    try:
        yield info
    finally:
        ray.shutdown()
        os.environ.pop("RAY_ADDRESS", None)


@pytest.fixture
def shutdown_only() -> Iterator[None]:
    yield None
    ray.shutdown()
    os.environ.pop("RAY_ADDRESS", None)


def _param(request: pytest.FixtureRequest) -> dict:
    return dict(getattr(request, "param", {}) or {})


@pytest.fixture
def ray_start_regular(request: pytest.FixtureRequest) -> Iterator[Any]:
    with _ray_start(**_param(request)) as info:
        yield info


@pytest.fixture(scope="module")
def ray_start_regular_shared(request: pytest.FixtureRequest) -> Iterator[Any]:
    with _ray_start(**_param(request)) as info:
        yield info


@pytest.fixture(scope="module")
def ray_start_regular_shared_2_cpus(request: pytest.FixtureRequest) -> Iterator[Any]:
    with _ray_start(num_cpus=2, **_param(request)) as info:
        yield info


@pytest.fixture
def ray_start_2_cpus(request: pytest.FixtureRequest) -> Iterator[Any]:
    with _ray_start(num_cpus=2, **_param(request)) as info:
        yield info


@pytest.fixture
def ray_start_10_cpus(request: pytest.FixtureRequest) -> Iterator[Any]:
    with _ray_start(num_cpus=10, **_param(request)) as info:
        yield info


@contextlib.contextmanager
def _ray_start_cluster(**kwargs: Any) -> Iterator[Any]:
    init_kwargs = dict(_DEFAULTS)
    num_nodes = kwargs.pop("num_nodes", 0)
    do_init = kwargs.pop("do_init", num_nodes > 0)
    kwargs.pop("skip_cluster", None)
    init_kwargs.update(kwargs)
    namespace = init_kwargs.pop("namespace")
    cluster = Cluster()
    try:
        for i in range(num_nodes):
            if i > 0:
                init_kwargs.pop("_system_config", None)
            cluster.add_node(**init_kwargs)
            if i == 0 and do_init:
                ray.init(address=cluster.address, namespace=namespace)
        yield cluster
    finally:
        ray.shutdown()
        cluster.shutdown()
        os.environ.pop("RAY_ADDRESS", None)


@pytest.fixture
def ray_start_cluster(request: pytest.FixtureRequest) -> Iterator[Any]:
    with _ray_start_cluster(**_param(request)) as cluster:
        yield cluster


@pytest.fixture
def ray_start_cluster_enabled(request: pytest.FixtureRequest) -> Iterator[Any]:
    with _ray_start_cluster(**_param(request)) as cluster:
        yield cluster


@pytest.fixture
def ray_start_cluster_init(request: pytest.FixtureRequest) -> Iterator[Any]:
    with _ray_start_cluster(do_init=True, **_param(request)) as cluster:
        yield cluster


@pytest.fixture
def ray_start_cluster_head(request: pytest.FixtureRequest) -> Iterator[Any]:
    with _ray_start_cluster(do_init=True, num_nodes=1, **_param(request)) as cluster:
        yield cluster


@contextlib.contextmanager
def call_ray_start_context(request: Any) -> Iterator[str]:
    """Ray's version runs `ray start --head` and, at the end, `ray stop --force`, which stops
    every Ray cluster on the machine: not on a machine shared with other engineers."""
    pytest.skip("harness: `ray start`/`ray stop --force` fixtures are not run on a shared machine")
    yield ""


@pytest.fixture
def set_enable_auto_connect(request: pytest.FixtureRequest) -> Iterator[bool]:
    pytest.skip("harness: ray._private.auto_init_hook is one of Ray's internals")
    yield False


@pytest.fixture
def error_pubsub() -> Iterator[None]:
    pytest.skip("harness: the error pubsub is one of Ray's GCS internals")
    yield None


def _free_port(preferred: int) -> int:
    with socket.socket() as s:
        try:
            s.bind(("127.0.0.1", preferred))
            return preferred
        except OSError:
            s.bind(("127.0.0.1", 0))
            return s.getsockname()[1]


class _ServeInstance:
    """What the tests use of Ray's serve client: nothing but its presence; teardown is public API."""

    def delete_all_apps(self) -> None:
        from ray import serve

        for name in list(serve.status().applications):
            serve.delete(name)


@pytest.fixture(scope="session")
def _shared_serve_instance() -> Iterator[_ServeInstance]:
    from ray import serve

    port = _free_port(8000)
    os.environ["CONFORMANCE_SERVE_PORT"] = str(port)
    ray.init(num_cpus=36, namespace="default_test_namespace")
    serve.start(http_options={"host": "127.0.0.1", "port": port})
    yield _ServeInstance()
    serve.shutdown()
    ray.shutdown()


@pytest.fixture
def serve_instance(_shared_serve_instance: _ServeInstance) -> Iterator[_ServeInstance]:
    yield _shared_serve_instance
    _shared_serve_instance.delete_all_apps()
