"""A lean HTTP/1.1 server for the proxy: httptools parsing, callbacks all the way.

Why not uvicorn + ASGI here: the proxy does no application work, it only moves a request into
one frame and a frame back into a response. uvicorn spends most of its per-request time on a
task, ASGI message dicts and header normalisation (measured: ~290 us of proxy CPU per request);
here a request that finds a replica with room goes parser callback -> frame write, and the reply
frame's callback writes the whole response with one `transport.write` -- no task, no future.

Supports keep-alive (idle timeout), pipelined requests (answered in order), chunked request
bodies, `Expect: 100-continue`, streamed responses (chunked transfer encoding, each chunk
written as it arrives), per-request timeouts and cancelling the replica's work when the client
disconnects. Routing and forwarding policy live in `proxy.py`.
"""

from __future__ import annotations

import asyncio
from collections import deque
from http import HTTPStatus
from typing import Any

try:
    import httptools
except ImportError as e:  # raylite installed without the serve extra
    raise ImportError("raylite Serve's HTTP proxy needs the 'httptools' package on every node: "
                      "pip install 'raylite[serve]'") from e

_REASONS = {s.value: s.phrase.encode() for s in HTTPStatus}
_STATUS_LINES: dict[int, bytes] = {}


def status_line(status: int) -> bytes:
    line = _STATUS_LINES.get(status)
    if line is None:
        line = b"HTTP/1.1 %d %s\r\n" % (status, _REASONS.get(status, b"Unknown"))
        _STATUS_LINES[status] = line
    return line


class Request:
    """One parsed request, and where its response is in being written."""

    __slots__ = ("conn", "method", "path", "query", "headers", "body", "keep_alive", "http_version",
                 "request_id", "model_id", "streaming", "done", "cancel_cb", "timer", "chunked", "head")

    def __init__(self, conn: HttpConnection) -> None:
        self.conn = conn
        self.headers: list[tuple[bytes, bytes]] = []
        self.body = b""
        self.request_id = ""
        self.model_id = ""
        self.streaming = False
        self.done = False
        self.cancel_cb: Any = None
        self.timer: Any = None
        self.chunked = False
        self.head = False

    # ------------------------------------------------------------ writing the response
    def respond(self, status: int, headers: list, body: bytes) -> None:
        if self.done:
            return
        self.done = True
        conn = self.conn
        if conn.transport is None or conn.closing:
            conn.finished(self)
            return
        parts = [status_line(status)]
        has_len = False
        for k, v in headers:
            if k.lower() == b"content-length":
                has_len = True
            parts.append(k + b": " + v + b"\r\n")
        if not has_len:
            parts.append(b"content-length: %d\r\n" % len(body))
        parts.append(b"x-request-id: " + self.request_id.encode("latin-1") + b"\r\n")
        if not self.keep_alive:
            parts.append(b"connection: close\r\n")
        parts.append(b"\r\n")
        if not self.head:
            parts.append(body)
        conn.transport.write(b"".join(parts))
        conn.finished(self)

    def start_stream(self, status: int, headers: list) -> None:
        conn = self.conn
        self.streaming = True
        if conn.transport is None or conn.closing:
            return
        parts = [status_line(status)]
        has_len = False
        for k, v in headers:
            if k.lower() == b"content-length":
                has_len = True
            parts.append(k + b": " + v + b"\r\n")
        self.chunked = not has_len
        if self.chunked:
            parts.append(b"transfer-encoding: chunked\r\n")
        parts.append(b"x-request-id: " + self.request_id.encode("latin-1") + b"\r\n")
        if not self.keep_alive:
            parts.append(b"connection: close\r\n")
        parts.append(b"\r\n")
        conn.transport.write(b"".join(parts))

    def write_chunk(self, chunk: bytes) -> None:
        conn = self.conn
        if self.done or conn.transport is None or conn.closing or not chunk:
            return
        if self.chunked:
            conn.transport.write(b"%x\r\n%s\r\n" % (len(chunk), chunk))
        else:
            conn.transport.write(chunk)

    def end_stream(self, ok: bool = True) -> None:
        if self.done:
            return
        self.done = True
        conn = self.conn
        if not ok:  # the replica failed mid-stream: the body cannot be completed, so drop the connection
            conn.finished(self)
            conn.close()
            return
        if self.chunked and conn.transport is not None and not conn.closing:
            conn.transport.write(b"0\r\n\r\n")
        conn.finished(self)


class HttpConnection(asyncio.Protocol):
    """One client connection: parses requests and hands complete ones to `dispatch` in order."""

    def __init__(self, server: HttpServer) -> None:
        self.server = server
        self.transport: asyncio.Transport | None = None
        self.parser = httptools.HttpRequestParser(self)
        self.queue: deque[Request] = deque()
        self.cur: Request | None = None
        self.url = b""
        self.body_parts: list[bytes] = []
        self.closing = False
        self.idle_timer: Any = None
        self.paused = False
        self.client: tuple | None = None

    # ------------------------------------------------------------ asyncio.Protocol
    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport  # type: ignore[assignment]
        peer = transport.get_extra_info("peername")
        self.client = tuple(peer[:2]) if isinstance(peer, tuple) else None
        self.server.connections.add(self)
        self._arm_idle()

    def data_received(self, data: bytes) -> None:
        if self.idle_timer is not None:
            self.idle_timer.cancel()
            self.idle_timer = None
        try:
            self.parser.feed_data(data)
        except httptools.HttpParserUpgrade:
            self._plain_error(400, b"WebSocket and protocol upgrades are not supported by raylite's proxy")
        except httptools.HttpParserError as e:
            self._plain_error(400, f"Invalid HTTP request: {e}".encode())

    def connection_lost(self, exc: BaseException | None) -> None:
        self.closing = True
        self.server.connections.discard(self)
        if self.idle_timer is not None:
            self.idle_timer.cancel()
        for req in self.queue:
            if not req.done:
                req.done = True
                if req.cancel_cb is not None:
                    req.cancel_cb()
                if req.timer is not None:
                    req.timer.cancel()
        self.queue.clear()
        self.transport = None

    # ------------------------------------------------------------ httptools callbacks
    def on_message_begin(self) -> None:
        self.cur = Request(self)
        self.url = b""
        self.body_parts = []

    def on_url(self, url: bytes) -> None:
        self.url += url

    def on_header(self, name: bytes, value: bytes) -> None:
        req = self.cur
        name = name.lower()
        req.headers.append((name, value))
        if name == b"x-request-id":
            req.request_id = value.decode("latin-1")
        elif name == b"serve_multiplexed_model_id" or name == b"serve-multiplexed-model-id":
            req.model_id = value.decode("latin-1")

    def on_headers_complete(self) -> None:
        for k, v in self.cur.headers:
            if k == b"expect" and v.lower() == b"100-continue" and self.transport is not None:
                self.transport.write(b"HTTP/1.1 100 Continue\r\n\r\n")

    def on_body(self, body: bytes) -> None:
        self.body_parts.append(body)

    def on_message_complete(self) -> None:
        req = self.cur
        self.cur = None
        parser = self.parser
        req.method = parser.get_method().decode()
        req.head = req.method == "HEAD"
        req.http_version = parser.get_http_version()
        req.keep_alive = parser.should_keep_alive()
        url = self.url
        q = url.find(b"?")
        if q >= 0:
            req.path, req.query = url[:q].decode("utf-8", "surrogateescape"), url[q + 1:]
        else:
            req.path, req.query = url.decode("utf-8", "surrogateescape"), b""
        if len(self.body_parts) == 1:
            req.body = self.body_parts[0]
        elif self.body_parts:
            req.body = b"".join(self.body_parts)
        self.queue.append(req)
        if len(self.queue) == 1:
            self.server.dispatch(req)
        elif len(self.queue) > 32 and not self.paused and self.transport is not None:
            self.paused = True
            self.transport.pause_reading()

    # ------------------------------------------------------------ helpers
    def finished(self, req: Request) -> None:
        if req.timer is not None:
            req.timer.cancel()
        if self.queue and self.queue[0] is req:
            self.queue.popleft()
        if not req.keep_alive:
            self.close()
            return
        if self.paused and len(self.queue) < 8 and self.transport is not None:
            self.paused = False
            self.transport.resume_reading()
        if self.queue:
            self.server.dispatch(self.queue[0])
        else:
            self._arm_idle()

    def _arm_idle(self) -> None:
        if self.closing:
            return
        loop = self.server.loop
        self.idle_timer = loop.call_later(self.server.keep_alive_s, self._idle_close)

    def _idle_close(self) -> None:
        if not self.queue:
            self.close()

    def _plain_error(self, status: int, body: bytes) -> None:
        if self.transport is not None and not self.closing:
            self.transport.write(status_line(status) + b"content-type: text/plain; charset=utf-8\r\n"
                                 b"content-length: %d\r\nconnection: close\r\n\r\n" % len(body) + body)
        self.close()

    def close(self) -> None:
        if not self.closing:
            self.closing = True
            if self.transport is not None:
                self.transport.close()


class HttpServer:
    """Owns the listening socket; `dispatch(request)` is the proxy's routing callback."""

    def __init__(self, loop: asyncio.AbstractEventLoop, dispatch: Any, keep_alive_s: float = 5.0) -> None:
        self.loop = loop
        self.dispatch = dispatch
        self.keep_alive_s = keep_alive_s
        self.connections: set[HttpConnection] = set()
        self.server: asyncio.AbstractServer | None = None

    async def start(self, sock: Any) -> None:
        self.server = await self.loop.create_server(lambda: HttpConnection(self), sock=sock, backlog=2048)

    def close(self) -> None:
        if self.server is not None:
            self.server.close()
        for conn in list(self.connections):
            conn.close()
