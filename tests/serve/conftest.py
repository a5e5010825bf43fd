"""Serve fixtures: one local cluster + one Serve instance per test module, on a free port."""

from __future__ import annotations

import pytest

import raylite
from tests.api_fixtures import free_port  # noqa: F401 - one helper, re-exported


@pytest.fixture(scope="module")
def serve_instance():
    """(serve module, base URL): 8 logical CPUs so several 1-CPU replicas fit on this 2-core box."""
    from raylite import serve

    if raylite.is_initialized():
        raylite.shutdown()
    raylite.init(num_cpus=8)
    port = free_port()
    serve.start(http_options={"host": "127.0.0.1", "port": port, "request_timeout_s": 8})
    yield serve, f"http://127.0.0.1:{port}"
    serve.shutdown()
    raylite.shutdown()
