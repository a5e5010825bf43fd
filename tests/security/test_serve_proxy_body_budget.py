"""The Serve proxy bounds the request bodies it holds over all connections together (issue 29 §5).

Each connection's body is bounded by `max_request_body_size_bytes`, but N silent connections
could each hold nearly that much (an audit held a proxy at 426 MiB with four). Here the proxy
has a 20 MiB total (`max_buffered_request_body_bytes`) with an 8 MiB per-request limit: silent
chunked uploads past the total are refused with 503 and Retry-After, the proxy's peak memory
stays within the budget plus a margin, a real client keeps being served meanwhile, and the
budget is given back when the holders go.

It runs on a cluster of its own, since its proxy's options differ from the other proxy tests'.
"""

from __future__ import annotations

import socket
import time

import httpx
import pytest

import raylite
from tests.conftest import wait_for
from tests.security.test_serve_proxy import connect, peak_rss_mib, read_responses
from tests.serve.conftest import free_port

pytestmark = pytest.mark.timeout(300)

MiB = 1024 * 1024
BUDGET = 20 * MiB


@pytest.fixture(scope="module")
def proxy():
    """(port, proxy pid): /echo accepts 8 MiB bodies, /big 64 MiB (more than the whole budget)."""
    from starlette.requests import Request

    from raylite import serve

    if raylite.is_initialized():
        raylite.shutdown()
    raylite.init(num_cpus=2)
    port = free_port()
    serve.start(http_options={"host": "127.0.0.1", "port": port, "max_request_body_size_bytes": 8 * MiB,
                              "max_buffered_request_body_bytes": BUDGET, "body_read_timeout_s": 60.0})

    @serve.deployment(ray_actor_options={"num_cpus": 0})
    async def echo(request: Request) -> dict:
        return {"len": len(await request.body())}

    serve.run(echo.bind(), name="echo", route_prefix="/echo")
    serve.run(echo.options(name="big", max_request_body_size_bytes=64 * MiB).bind(), name="big",
              route_prefix="/big")
    node = raylite.get_runtime_context().get_node_id()
    actor = raylite.get_actor(f"SERVE_PROXY::{node}", namespace="serve")
    pid = raylite.get(actor.ready.remote())["pid"]
    yield port, pid
    serve.shutdown()
    raylite.shutdown()


CHUNKED_HEAD = b"POST /echo HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n"


def _chunk(data: bytes) -> bytes:
    return b"%x\r\n" % len(data) + data + b"\r\n"


def _silent_upload(port: int, size: int) -> tuple[socket.socket, bytes]:
    """A chunked upload of `size` bytes that never ends; (socket, what the proxy answered so far,
    read for a moment: b"" while it holds the body)."""
    sock = connect(port)
    sock.sendall(CHUNKED_HEAD)
    piece = b"x" * MiB
    try:
        for _ in range(size // MiB):
            sock.sendall(_chunk(piece))
    except OSError:
        pass  # the proxy refused the body and stopped reading
    sock.settimeout(1.0)
    try:
        answer = sock.recv(65536)
    except (TimeoutError, ConnectionResetError):
        answer = b""
    return sock, answer


def test_silent_uploads_past_the_total_are_refused_and_memory_stays_bounded(proxy):
    port, pid = proxy
    before = peak_rss_mib(pid)
    holders, answers = [], []
    try:
        for _ in range(4):  # 4 x 7 MiB of bodies that never end: 28 MiB, over the 20 MiB budget
            sock, answer = _silent_upload(port, 7 * MiB)
            holders.append(sock)
            answers.append(answer)
        held = [a for a in answers if a == b""]
        refused = [a for a in answers if a.startswith(b"HTTP/1.1 503")]
        assert len(held) == 2 and len(refused) == 2, answers  # 2 x 7 MiB fit in 20 MiB, a third does not
        assert all(b"retry-after: 1" in a.lower() and b"max_buffered_request_body_bytes" in a for a in refused)
        # a real client is served meanwhile, and a small upload once the budget has room
        r = httpx.get(f"http://127.0.0.1:{port}/echo/ok", timeout=30)
        assert r.status_code == 200 and r.json() == {"len": 0}
        r = httpx.post(f"http://127.0.0.1:{port}/echo", content=b"y" * MiB, timeout=30)
        assert r.status_code == 200 and r.json() == {"len": MiB}
        grown = peak_rss_mib(pid) - before
        assert grown < BUDGET / MiB + 16, f"the proxy grew by {grown:.0f} MiB holding bodies"
    finally:
        for sock in holders:
            sock.close()
    # the holders are gone: their bytes are given back, a 7 MiB upload fits again
    wait_for(lambda: httpx.post(f"http://127.0.0.1:{port}/echo", content=b"z" * (7 * MiB), timeout=30)
             .status_code == 200, timeout_s=30, what="the budget to be given back")


def test_a_declared_body_that_does_not_fit_now_is_refused_before_it_is_read(proxy):
    port, _pid = proxy
    holder, answer = _silent_upload(port, 7 * MiB)
    other, answer2 = _silent_upload(port, 7 * MiB)
    try:
        assert answer == answer2 == b""
        with connect(port) as sock:  # 7 MiB declared: 14 + 7 > 20, refused at the headers
            sock.sendall(b"POST /echo HTTP/1.1\r\nHost: x\r\nContent-Length: %d\r\n\r\n" % (7 * MiB))
            (status, headers, body), = read_responses(sock)
        assert status == 503 and headers.get("retry-after") == "1", (status, headers, body)
    finally:
        holder.close()
        other.close()


def test_a_body_larger_than_the_whole_budget_is_413(proxy):
    """A route may accept more than the budget, but one body can never exceed the budget: 413
    names the option to raise, instead of a 503 that retrying cannot cure."""
    port, _pid = proxy
    with connect(port) as sock:
        sock.sendall(b"POST /big HTTP/1.1\r\nHost: x\r\nContent-Length: %d\r\n\r\n" % (32 * MiB))
        (status, _headers, body), = read_responses(sock)
    assert status == 413 and b"max_buffered_request_body_bytes" in body


def test_answered_requests_give_their_bytes_back(proxy):
    """Many uploads in turn, each well under the budget, together far over it: all are served."""
    port, _pid = proxy
    deadline = time.monotonic() + 120
    with httpx.Client(timeout=30) as client:
        for i in range(12):  # 12 x 6 MiB = 72 MiB through a 20 MiB budget
            assert time.monotonic() < deadline
            r = client.post(f"http://127.0.0.1:{port}/echo", content=b"w" * (6 * MiB))
            assert r.status_code == 200 and r.json() == {"len": 6 * MiB}, (i, r.status_code, r.text[:200])
