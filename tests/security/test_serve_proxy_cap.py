"""The Serve proxy's connection cap: at `max_connections`, a new client is served and the
longest-idle connection is closed to make room.

It runs on a cluster of its own, since its proxy's options differ from the other proxy tests'
(a test that restarted the shared proxy changed what the tests after it found, in random order).
"""

from __future__ import annotations

import httpx
import pytest

import raylite
from tests.conftest import wait_for
from tests.security.test_serve_proxy import closed_by_server, connect
from tests.serve.conftest import free_port

pytestmark = pytest.mark.timeout(300)


@pytest.fixture
def capped_port():
    """The port of a Serve proxy that holds at most 200 connections, with an app at /hi."""
    from raylite import serve

    if raylite.is_initialized():
        raylite.shutdown()
    raylite.init(num_cpus=2)
    port = free_port()
    serve.start(http_options={"host": "127.0.0.1", "port": port, "max_connections": 200,
                              "keep_alive_timeout_s": 120.0})

    @serve.deployment
    def hi(request) -> str:
        return "hi"

    serve.run(hi.bind(), name="hi", route_prefix="/hi")
    yield port
    serve.shutdown()
    raylite.shutdown()


def test_connection_cap_closes_the_longest_idle_connection_for_a_new_one(capped_port):
    idle = []
    try:
        for _ in range(200):
            idle.append(connect(capped_port))
        wait_for(lambda: httpx.get(f"http://127.0.0.1:{capped_port}/hi", timeout=10).text == "hi", timeout_s=30,
                 what="a real client to be served past the connection cap")
        # the oldest idle connection made room: the server closed it
        assert closed_by_server(idle[0], timeout_s=30) == b""
    finally:
        for s in idle:
            s.close()
