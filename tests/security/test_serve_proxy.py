"""Serve's HTTP proxy is a public edge: what a hostile client sends is bounded in memory and in
time, and real clients keep being served while it tries.

Each attack talks raw HTTP over a socket (helpers below). Memory is the proxy process's peak
RSS (VmHWM in /proc): it must stay within a small margin of what it was before the attack.
"""

from __future__ import annotations

import selectors
import socket
import threading
import time

import httptools
import httpx
import pytest

import raylite

pytestmark = pytest.mark.timeout(300)

MiB = 1024 * 1024
# the module's proxy: short read timeouts so the time-based defences are seen in a test
OPTIONS = {"header_read_timeout_s": 1.0, "body_read_timeout_s": 1.0, "keep_alive_timeout_s": 1.0,
           "max_request_body_size_bytes": 8 * MiB}


# ------------------------------------------------------------------ raw HTTP helpers
class _Responses:
    """httptools callbacks collecting (status, headers, body) of each response on a connection."""

    def __init__(self) -> None:
        self.parser = httptools.HttpResponseParser(self)
        self.done: list[tuple[int, dict, bytes]] = []
        self._headers: dict = {}
        self._body: list[bytes] = []

    def on_header(self, name: bytes, value: bytes) -> None:
        self._headers[name.decode().lower()] = value.decode("latin-1")

    def on_body(self, body: bytes) -> None:
        self._body.append(body)

    def on_message_complete(self) -> None:
        self.done.append((self.parser.get_status_code(), self._headers, b"".join(self._body)))
        self._headers, self._body = {}, []


def connect(port: int) -> socket.socket:
    return socket.create_connection(("127.0.0.1", port), timeout=30)


def read_responses(sock: socket.socket, n: int = 1, timeout_s: float = 30.0) -> list[tuple[int, dict, bytes]]:
    """Read until `n` complete responses arrived (or the server closed the connection)."""
    collector = _Responses()
    sock.settimeout(timeout_s)
    while len(collector.done) < n:
        try:
            data = sock.recv(65536)
        except (ConnectionResetError, TimeoutError):
            break
        if not data:
            break
        collector.parser.feed_data(data)
    return collector.done


def request(port: int, data: bytes, n: int = 1) -> list[tuple[int, dict, bytes]]:
    with connect(port) as sock:
        sock.sendall(data)
        return read_responses(sock, n)


def closed_by_server(sock: socket.socket, timeout_s: float) -> bytes:
    """Everything the server sends until it closes the connection (fails the test on timeout)."""
    sock.settimeout(timeout_s)
    out = b""
    while True:
        try:
            data = sock.recv(65536)
        except ConnectionResetError:
            return out
        if not data:
            return out
        out += data


def send_while_reading(sock: socket.socket, chunks, timeout_s: float = 60.0) -> list[tuple[int, dict, bytes]]:
    """Stream `chunks` from a thread while reading the answer: the server may answer (and stop
    reading) long before the client is done sending."""
    def sender() -> None:
        try:
            for chunk in chunks:
                sock.sendall(chunk)
        except OSError:
            pass  # the proxy refused the rest, as it should

    t = threading.Thread(target=sender, daemon=True)
    t.start()
    out = read_responses(sock, 1, timeout_s)
    sock.close()
    t.join(timeout_s)
    return out


def peak_rss_mib(pid: int) -> float:
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) / 1024.0
    raise AssertionError("no VmHWM")


# ------------------------------------------------------------------ the proxy under test
@pytest.fixture(scope="module")
def proxy():
    """(port, proxy pid): a Serve proxy with OPTIONS, an echo app at /echo and one whose
    deployment accepts at most 1 MiB bodies at /small."""
    from starlette.requests import Request

    from raylite import serve

    if raylite.is_initialized():
        raylite.shutdown()
    raylite.init(num_cpus=4)
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    serve.start(http_options={"host": "127.0.0.1", "port": port, **OPTIONS})

    @serve.deployment
    async def echo(request: Request) -> dict:
        body = await request.body()
        return {"path": request.url.path, "len": len(body)}

    serve.run(echo.bind(), name="echo", route_prefix="/echo")
    serve.run(echo.options(name="small", max_request_body_size_bytes=MiB).bind(), name="small",
              route_prefix="/small")
    node = raylite.get_runtime_context().get_node_id()
    actor = raylite.get_actor(f"SERVE_PROXY::{node}", namespace="serve")
    pid = raylite.get(actor.ready.remote())["pid"]
    yield port, pid
    serve.shutdown()
    raylite.shutdown()


def served(port: int) -> None:
    """A real client is answered while (or right after) an attack runs."""
    r = httpx.get(f"http://127.0.0.1:{port}/echo/ok", timeout=30)
    assert r.status_code == 200 and r.json() == {"path": "/echo/ok", "len": 0}


# ------------------------------------------------------------------ headers
def test_huge_header_value_is_431_without_buffering_it(proxy):
    port, pid = proxy
    before = peak_rss_mib(pid)
    sock = connect(port)
    head = b"GET /echo HTTP/1.1\r\nHost: x\r\nX-Big: "
    out = send_while_reading(sock, [head] + [b"a" * MiB] * 256)  # a 256 MiB header value
    assert out and out[0][0] == 431, out
    assert b"max_header_size_bytes" in out[0][2]
    assert out[0][1].get("connection") == "close"
    served(port)
    assert peak_rss_mib(pid) - before < 32, "the proxy buffered the header"


def test_twenty_thousand_headers_are_431(proxy):
    port, pid = proxy
    before = peak_rss_mib(pid)
    headers = b"".join(b"X-H%d: v\r\n" % i for i in range(20_000))
    out = send_while_reading(connect(port), [b"GET /echo HTTP/1.1\r\nHost: x\r\n", headers, b"\r\n"])
    assert out and out[0][0] == 431
    served(port)
    assert peak_rss_mib(pid) - before < 32


def test_more_headers_than_max_header_count_is_431(proxy):
    port, _pid = proxy
    headers = b"".join(b"X-H%d: v\r\n" % i for i in range(150))  # small in bytes, too many in number
    out = request(port, b"GET /echo HTTP/1.1\r\nHost: x\r\n" + headers + b"\r\n")
    assert out[0][0] == 431 and b"max_header_count=100" in out[0][2]


def test_overlong_url_is_414(proxy):
    port, _pid = proxy
    out = send_while_reading(connect(port), [b"GET /echo/" + b"a" * (64 * 1024) + b" HTTP/1.1\r\n\r\n"])
    assert out and out[0][0] == 414


def test_an_error_answers_in_order_after_pipelined_requests(proxy):
    port, _pid = proxy
    bad = b"GET /echo/2 HTTP/1.1\r\nHost: x\r\n" + b"".join(b"X-H%d: v\r\n" % i for i in range(150)) + b"\r\n"
    out = request(port, b"GET /echo/1 HTTP/1.1\r\nHost: x\r\n\r\n" + bad, n=2)
    assert [status for status, _, _ in out] == [200, 431]


# ------------------------------------------------------------------ bodies
def test_declared_body_over_the_limit_is_413_before_it_is_sent(proxy):
    port, pid = proxy
    before = peak_rss_mib(pid)
    # Expect: 100-continue: the client waits for the go-ahead, which must not come
    with connect(port) as sock:
        sock.sendall(b"POST /echo HTTP/1.1\r\nHost: x\r\nContent-Length: %d\r\nExpect: 100-continue\r\n\r\n"
                     % (200 * MiB))
        out = read_responses(sock)
    assert out[0][0] == 413 and b"max_request_body_size_bytes" in out[0][2]
    # and without Expect: the body that follows is not read
    out = send_while_reading(connect(port), [b"POST /echo HTTP/1.1\r\nHost: x\r\nContent-Length: %d\r\n\r\n"
                                             % (200 * MiB)] + [b"b" * MiB] * 200)
    assert out and out[0][0] == 413
    served(port)
    assert peak_rss_mib(pid) - before < 32


def test_chunked_body_over_the_limit_is_413_and_memory_stays_bounded(proxy):
    port, pid = proxy
    before = peak_rss_mib(pid)
    chunk = b"%x\r\n%s\r\n" % (MiB, b"c" * MiB)
    out = send_while_reading(connect(port), [b"POST /echo HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n"]
                             + [chunk] * 200)  # 200 MiB against the proxy's 8 MiB
    assert out and out[0][0] == 413
    served(port)
    assert peak_rss_mib(pid) - before < 48, "the proxy held more than about its body limit"


def test_body_limit_is_per_deployment(proxy):
    port, _pid = proxy
    r = httpx.post(f"http://127.0.0.1:{port}/small", content=b"x" * (MiB // 2), timeout=30)
    assert r.status_code == 200 and r.json()["len"] == MiB // 2
    r = httpx.post(f"http://127.0.0.1:{port}/small", content=b"x" * (2 * MiB), timeout=30)
    assert r.status_code == 413 and str(MiB) in r.text
    r = httpx.post(f"http://127.0.0.1:{port}/echo", content=b"x" * (2 * MiB), timeout=30)  # the proxy's 8 MiB
    assert r.status_code == 200 and r.json()["len"] == 2 * MiB


# ------------------------------------------------------------------ time
def test_slow_headers_are_408_and_the_connection_closes(proxy):
    port, _pid = proxy
    with connect(port) as sock:
        sock.sendall(b"GET /echo HTTP/1.1\r\nHost: x\r\n")  # ... and never the blank line
        answer = closed_by_server(sock, timeout_s=30)
    assert answer.startswith(b"HTTP/1.1 408") and b"headers did not arrive within 1.0s" in answer


def test_stalled_body_is_408(proxy):
    port, _pid = proxy
    with connect(port) as sock:
        sock.sendall(b"POST /echo HTTP/1.1\r\nHost: x\r\nContent-Length: 10\r\n\r\nabc")
        answer = closed_by_server(sock, timeout_s=30)
    assert answer.startswith(b"HTTP/1.1 408") and b"body did not arrive" in answer


def test_idle_keep_alive_connection_is_closed(proxy):
    port, _pid = proxy
    with connect(port) as sock:
        sock.sendall(b"GET /echo HTTP/1.1\r\nHost: x\r\n\r\n")
        assert read_responses(sock)[0][0] == 200
        assert closed_by_server(sock, timeout_s=30) == b""  # closed after keep_alive_timeout_s, no answer


def test_two_thousand_slowloris_connections_do_not_starve_real_clients(proxy):
    port, pid = proxy
    before = peak_rss_mib(pid)
    socks = []
    try:
        for i in range(2000):
            s = socket.create_connection(("127.0.0.1", port), timeout=30)
            s.sendall(b"GET /echo HTTP/1.1\r\nHost: x\r\nX-Slow-%d: " % i)
            socks.append(s)
        for _ in range(5):
            served(port)
        # every one of them is answered 408 and closed by the header read timeout
        sel = selectors.DefaultSelector()
        for s in socks:
            s.setblocking(False)
            sel.register(s, selectors.EVENT_READ)
        answered = set()
        deadline = time.monotonic() + 60
        while len(answered) < len(socks) and time.monotonic() < deadline:
            for key, _ in sel.select(timeout=1.0):
                try:
                    key.fileobj.recv(65536)
                except OSError:
                    pass
                answered.add(key.fileobj)
                sel.unregister(key.fileobj)
        assert len(answered) == len(socks), f"{len(socks) - len(answered)} slow connections still open"
    finally:
        for s in socks:
            s.close()
    served(port)
    assert peak_rss_mib(pid) - before < 64


# ------------------------------------------------------------------ paths
def test_dot_segments_are_resolved_before_routing(proxy):
    port, _pid = proxy
    for raw in (b"/echo/../x", b"/echo/%2e%2e/x", b"/echo/..%2fx", b"/echo/./../x"):
        out = request(port, b"GET " + raw + b" HTTP/1.1\r\nHost: x\r\n\r\n")
        assert out[0][0] == 404, (raw, out)  # it is /x, which no app serves
        assert b"'/x'" in out[0][2]
    out = request(port, b"GET /echo/a/./b/../c HTTP/1.1\r\nHost: x\r\n\r\n")
    assert out[0][0] == 200 and b'"/echo/a/c"' in out[0][2]
    out = request(port, b"GET /small/../echo/z HTTP/1.1\r\nHost: x\r\n\r\n")  # lands on /echo, as a client means
    assert out[0][0] == 200 and b'"/echo/z"' in out[0][2]


def test_limits_are_validated_with_the_field_name():
    from raylite.serve._internal import options

    with pytest.raises(ValueError, match="http_options.max_header_count"):
        options.http_options({"max_header_count": 0})
    with pytest.raises(ValueError, match="deployment.max_request_body_size_bytes"):
        options.deployment_config({"max_request_body_size_bytes": -1})
