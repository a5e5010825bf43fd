"""A lean HTTP/1.1 server for the proxy: httptools parsing, callbacks all the way, with limits.

Why not uvicorn + ASGI here: the proxy does no application work, it only moves a request into
one frame and a frame back into a response. uvicorn spends most of its per-request time on a
task, ASGI message dicts and header normalisation (measured: ~290 us of proxy CPU per request);
here a request that finds a replica with room goes parser callback -> frame write, and the reply
frame's callback writes the whole response with one `transport.write` -- no task, no future.

Supports keep-alive, pipelined requests (answered in order), chunked request bodies,
`Expect: 100-continue`, streamed responses (chunked transfer encoding, each chunk written as it
arrives), per-request timeouts, cancelling the replica's work when the client disconnects, and
handing a WebSocket upgrade to the proxy's bridge. Routing and forwarding policy live in
`proxy.py`.

The proxy is a public edge, so nothing a client sends is held without a bound (`Limits`):
  - the request line and headers: at most `max_header_size_bytes` are ever fed to the parser
    (431; 414 while still in the URL) and at most `max_header_count` headers (431);
  - the body: `Content-Length` over the route's limit is refused before a byte of it is read
    (413, and no `100 Continue`); a chunked body is counted as it arrives (413);
  - the bodies of all connections together: every byte of a request body the proxy holds (while
    it arrives, and until the request is answered, since a request is resent when its replica
    dies) counts against `max_buffered_request_body_bytes`; a request whose body would take the
    total past it is refused with 503 and `Retry-After` (a declared one before its body is read),
    so N silent connections cannot hold N times the body limit;
  - time: headers must arrive within `header_read_timeout_s` of the request's first byte, and a
    body must make progress every `body_read_timeout_s` (408); an idle keep-alive connection
    closes after `keep_alive_timeout_s`;
  - connections: at most `max_connections` open; past it the connection that has waited longest
    without a request in flight (a slowloris, or an idle keep-alive one) is closed to make room,
    with a log line.
Timeouts are checked by one periodic sweep over the connections that have no request in flight,
so the per-request path sets two attributes instead of arming a timer.
"""

from __future__ import annotations

import asyncio
import resource
import sys
import time
from collections import deque
from http import HTTPStatus
from typing import Any

from raylite.serve._internal.http_limits import Limits, normalize_path

try:
    import httptools
except ImportError as e:  # raylite installed without the serve extra
    raise ImportError("raylite Serve's HTTP proxy needs the 'httptools' package on every node: "
                      "pip install 'raylite[serve]'") from e

_REASONS = {s.value: s.phrase.encode() for s in HTTPStatus}
_STATUS_LINES: dict[int, bytes] = {}

# where a connection is in reading its current request
IDLE = 0      # between requests (or before the first byte)
HEAD = 1      # request line and headers
BODY = 2      # headers done, body (if any) arriving
UPGRADED = 3  # handed to a WebSocket bridge
_MiB = 1024 * 1024

def status_line(status: int) -> bytes:
    line = _STATUS_LINES.get(status)
    if line is None:
        line = b"HTTP/1.1 %d %s\r\n" % (status, _REASONS.get(status, b"Unknown"))
        _STATUS_LINES[status] = line
    return line


class _Reject(Exception):
    """Raised inside a parser callback: answer `status` and close the connection."""

    def __init__(self, status: int, message: str, headers: tuple = ()) -> None:
        super().__init__(message)
        self.status = status
        self.message = message
        self.headers = headers


_RETRY_SOON = ((b"retry-after", b"1"),)


class Request:
    """One parsed request, and where its response is in being written."""

    __slots__ = ("conn", "method", "path", "query", "headers", "body", "keep_alive", "http_version",
                 "request_id", "model_id", "streaming", "done", "cancel_cb", "timer", "chunked", "head",
                 "content_length", "route", "error", "websocket", "body_bytes")

    def __init__(self, conn: HttpConnection) -> None:
        self.conn = conn
        self.method = "GET"
        self.path = "/"
        self.query = b""
        self.headers: list[tuple[bytes, bytes]] = []
        self.body = b""
        self.keep_alive = True
        self.http_version = "1.1"
        self.request_id = ""
        self.model_id = ""
        self.streaming = False
        self.done = False
        self.cancel_cb: Any = None
        self.timer: Any = None
        self.chunked = False
        self.head = False
        self.content_length: bytes | None = None
        self.route: Any = None
        self.error: tuple[int, str, tuple] | None = None
        self.websocket = False
        self.body_bytes = 0  # what its body counts in the server's buffered-body total

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
        if self.request_id:
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
    """One client connection: parses requests within `Limits` and hands complete ones to the
    server's dispatch, in order."""

    def __init__(self, server: HttpServer) -> None:
        self.server = server
        self.limits = server.limits
        self.transport: asyncio.Transport | None = None
        self.parser = httptools.HttpRequestParser(self)
        self.queue: deque[Request] = deque()
        self.cur: Request | None = None
        self.url = b""
        self.body_parts: list[bytes] = []
        self.body_size = 0
        self.body_limit = 0
        self.body_counted = 0         # bytes of the body arriving now, counted in the server's total
        self.closing = False
        self.paused = False
        self.client: tuple | None = None
        self.phase = IDLE
        self.since = server.now       # when the current phase began (or the body last progressed)
        self.head_bytes = 0           # bytes received since the current request began, while in its head
        self.completed = 0            # requests parsed on this connection
        self.rejected = False         # answered an error: the rest of the input is discarded
        self.upgraded: Any = None     # the WebSocket bridge, after an upgrade
        self.linger: Any = None
        self.discarded = 0
        self.write_paused = False     # the client reads slower than we write

    # ------------------------------------------------------------ asyncio.Protocol
    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport  # type: ignore[assignment]
        peer = transport.get_extra_info("peername")
        self.client = tuple(peer[:2]) if isinstance(peer, tuple) else None
        self.server.opened(self)

    def data_received(self, data: bytes) -> None:
        if self.upgraded is not None:
            self.upgraded.data_received(data)
            return
        if self.rejected:
            self._discard(len(data))
            return
        if self.phase == BODY:
            self.since = self.server.now
        else:
            self.head_bytes += len(data)
            if self.head_bytes > self.limits.max_header_size_bytes:
                self._feed_capped(data)
                return
        self._feed(data)

    def _feed(self, data: bytes) -> None:
        try:
            self.parser.feed_data(data)
        except httptools.HttpParserCallbackError as e:
            cause = e.__context__
            if isinstance(cause, _Reject):
                self._reject(cause.status, cause.message, cause.headers)
            else:
                self._reject(500, f"the proxy failed to read this request: {cause!r}")
        except httptools.HttpParserUpgrade as e:
            self._upgrade(data[e.args[0]:] if e.args else b"")
        except httptools.HttpParserError as e:
            self._reject(400, f"Invalid HTTP request: {e}")

    def _feed_capped(self, data: bytes) -> None:
        """The head grew past max_header_size_bytes with this chunk: feed only what fits; if the
        head is still not complete, refuse the request without buffering the rest."""
        limit = self.limits.max_header_size_bytes
        room = limit - (self.head_bytes - len(data))
        if room > 0:
            completed = self.completed
            self._feed(data[:room])
            if self.rejected or self.upgraded is not None or self.closing:
                return
            if self.phase == BODY or self.completed != completed:
                # a request's head completed inside the room: the rest is its body or the next request
                self.data_received(data[room:])
                return
        cur = self.cur
        if cur is not None and not cur.headers and self.phase == HEAD:
            self._reject(414, f"The request URL is longer than the proxy's max_header_size_bytes={limit}")
        else:
            self._reject(431, f"The request headers are larger than the proxy's max_header_size_bytes={limit}; "
                              "send fewer or smaller headers, or raise http_options max_header_size_bytes")

    def pause_writing(self) -> None:
        self.write_paused = True

    def resume_writing(self) -> None:
        self.write_paused = False
        if self.upgraded is not None:
            self.upgraded.writable()

    def connection_lost(self, exc: BaseException | None) -> None:
        self.closing = True
        self.server.closed(self)
        if self.linger is not None:
            self.linger.cancel()
        if self.upgraded is not None:
            self.upgraded.connection_lost(exc)
        self._release_body()
        for req in self.queue:
            self.server.release_body(req)
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
        self._release_body()
        self.body_parts = []
        self.body_size = 0
        self.phase = HEAD
        self.since = self.server.now

    def on_url(self, url: bytes) -> None:
        self.url += url

    def on_header(self, name: bytes, value: bytes) -> None:
        req = self.cur
        if len(req.headers) >= self.limits.max_header_count:
            raise _Reject(431, f"The request has more than the proxy's max_header_count="
                               f"{self.limits.max_header_count} headers")
        name = name.lower()
        req.headers.append((name, value))
        if name == b"x-request-id":
            req.request_id = value.decode("latin-1")
        elif name == b"content-length":
            if req.content_length is not None and req.content_length != value:
                raise _Reject(400, "The request has conflicting Content-Length headers")
            req.content_length = value
        elif name == b"upgrade":
            req.websocket = value.lower() == b"websocket"
        elif name == b"serve_multiplexed_model_id" or name == b"serve-multiplexed-model-id":
            req.model_id = value.decode("latin-1")

    def on_headers_complete(self) -> None:
        req = self.cur
        self.phase = BODY
        self.since = self.server.now
        url = self.url
        q = url.find(b"?")
        raw, req.query = (url[:q], url[q + 1:]) if q >= 0 else (url, b"")
        path = normalize_path(raw)
        if path is None:
            raise _Reject(400, "The request target must be a path starting with '/'")
        req.path = path
        req.method = self.parser.get_method().decode()
        limit = self.server.route(req)
        self.body_limit = limit
        if req.content_length is not None:
            try:
                n = int(req.content_length)
            except ValueError:
                raise _Reject(400, "The request's Content-Length is not a number") from None
            if n > limit:
                raise _Reject(413, f"The request body ({n} bytes) is larger than the {limit} bytes this "
                                   "route accepts (max_request_body_size_bytes)")
            self.server.check_body_room(n, declared=True)
        for k, v in req.headers:
            if k == b"expect" and v.lower() == b"100-continue" and self.transport is not None:
                self.transport.write(b"HTTP/1.1 100 Continue\r\n\r\n")

    def on_body(self, body: bytes) -> None:
        n = len(body)
        self.body_size += n
        if self.body_size > self.body_limit:
            raise _Reject(413, f"The request body is larger than the {self.body_limit} bytes this route "
                               "accepts (max_request_body_size_bytes)")
        self.server.check_body_room(n, declared=False)
        self.server.body_bytes += n
        self.body_counted += n
        self.body_parts.append(body)

    def on_message_complete(self) -> None:
        req = self.cur
        self.cur = None
        self.phase = IDLE
        self.head_bytes = 0
        self.completed += 1
        self.since = self.server.now
        parser = self.parser
        req.head = req.method == "HEAD"
        req.http_version = parser.get_http_version()
        req.keep_alive = parser.should_keep_alive()
        if len(self.body_parts) == 1:
            req.body = self.body_parts[0]
        elif self.body_parts:
            req.body = b"".join(self.body_parts)
        self.body_parts = []
        req.body_bytes, self.body_counted = self.body_counted, 0  # held until the request is answered
        if req.websocket and req.method == "GET" and parser.should_upgrade():
            self.cur = req  # _upgrade (right after the parser returns) takes it
            return
        self._enqueue(req)

    def _enqueue(self, req: Request) -> None:
        self.queue.append(req)
        if len(self.queue) == 1:
            self.server.busy(self)
            self._dispatch(req)
        elif len(self.queue) > 32 and not self.paused and self.transport is not None:
            self.paused = True
            self.transport.pause_reading()

    def _dispatch(self, req: Request) -> None:
        if req.error is not None:
            status, message, headers = req.error
            req.respond(status, [(b"content-type", b"text/plain; charset=utf-8"), *headers], message.encode())
        else:
            self.server.dispatch(req)

    # ------------------------------------------------------------ helpers
    def finished(self, req: Request) -> None:
        self.server.release_body(req)
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
            self._dispatch(self.queue[0])
        else:
            if self.phase == IDLE:
                self.since = self.server.now
            self.server.idle(self)

    def _reject(self, status: int, message: str, headers: tuple = ()) -> None:
        """Answer `status` (after any requests in flight on this connection, in order), then close;
        the rest of the input is read and dropped for a moment, so the client sees the answer."""
        if self.rejected or self.closing:
            return
        self.rejected = True
        if self.transport is not None:
            self.transport.pause_reading()  # nothing more is parsed; resumed (to drain) at close
        req = self.cur or Request(self)
        self.cur = None
        self.body_parts = []
        self._release_body()
        req.keep_alive = False
        req.error = (status, message, headers)
        req.route = None
        self._enqueue(req)

    def timed_out(self, what: str, timeout_s: float) -> None:
        self._reject(408, f"The proxy closed this connection: the request {what} did not arrive within "
                          f"{timeout_s}s")

    def _upgrade(self, rest: bytes) -> None:
        req = self.cur
        self.cur = None
        if req is None or not req.websocket:
            # not a WebSocket upgrade (h2c, ...): answer it as plain HTTP/1.1 on a fresh parser
            if req is not None:
                self._enqueue(req)
            self.parser = httptools.HttpRequestParser(self)
            if rest:
                self.data_received(rest)
            return
        if self.queue:
            req.keep_alive = False
            req.error = (400, "A WebSocket upgrade must not be pipelined behind other requests", ())
            self.rejected = True
            self._enqueue(req)
            return
        self.phase = UPGRADED
        self.server.busy(self)
        bridge = self.server.upgrade(req)
        if bridge is None:
            return  # the server answered the request itself
        self.upgraded = bridge
        if rest:
            bridge.data_received(rest)

    def _release_body(self) -> None:
        """The body arriving now is dropped (or was handed to its request): uncount it."""
        if self.body_counted:
            self.server.body_bytes -= self.body_counted
            self.body_counted = 0

    def _discard(self, n: int) -> None:
        self.discarded += n
        if self.discarded > _MiB:
            self._abort()

    def close(self) -> None:
        if self.closing:
            return
        self.closing = True
        self.server.closed(self)
        transport = self.transport
        if transport is None:
            return
        if self.rejected and transport.can_write_eof():
            # half-close and drop what the client still sends for a moment: closing with unread
            # input would reset the connection and the client could lose our error answer
            try:
                transport.write_eof()
                transport.resume_reading()
            except (OSError, RuntimeError):
                transport.close()
                return
            self.linger = self.server.loop.call_later(1.0, self._abort)
            return
        transport.close()

    def _abort(self) -> None:
        if self.transport is not None:
            self.transport.close()


class HttpServer:
    """Owns the listening socket, the connection set and the timeout sweep; `impl` is the
    proxy's routing side: `route(request) -> body limit`, `dispatch(request)`, `upgrade(request)`."""

    def __init__(self, loop: asyncio.AbstractEventLoop, impl: Any, limits: Limits | None = None) -> None:
        self.loop = loop
        self.impl = impl
        self.dispatch = impl.dispatch
        self.limits = limits or Limits()
        self.max_connections = _connection_cap(self.limits.max_connections)
        self.connections: set[HttpConnection] = set()
        # connections with no request in flight, the one waiting longest first: these are the ones
        # whose read can time out, and the ones closed first when the connection cap is reached
        self.waiting: dict[HttpConnection, None] = {}
        self.server: asyncio.AbstractServer | None = None
        self.now = loop.time()
        lim = self.limits
        self.tick_s = max(0.05, min(1.0, min(lim.header_read_timeout_s, lim.body_read_timeout_s,
                                             lim.keep_alive_timeout_s) / 4))
        self._sweeper: Any = None
        self._shed = 0
        self._shed_logged = 0.0
        self.body_bytes = 0  # request body bytes held now, over every connection
        self.body_budget = self.limits.max_buffered_request_body_bytes
        self._refused_logged = 0.0

    async def start(self, sock: Any) -> None:
        self.server = await self.loop.create_server(lambda: HttpConnection(self), sock=sock, backlog=2048)
        self._sweeper = self.loop.call_later(self.tick_s, self._sweep)

    # ------------------------------------------------------------ bookkeeping (called by connections)
    def route(self, req: Request) -> int:
        return self.impl.route(req)

    def upgrade(self, req: Request) -> Any:
        return self.impl.upgrade(req)

    def opened(self, conn: HttpConnection) -> None:
        if len(self.connections) >= self.max_connections:
            victim = next(iter(self.waiting), None)
            self._shed += 1
            self._log_cap()
            if victim is None:
                transport = conn.transport
                conn.closing = True
                transport.write(status_line(503) + b"content-type: text/plain; charset=utf-8\r\n"
                                b"content-length: 47\r\nconnection: close\r\n\r\n"
                                b"the proxy has too many open connections; retry")
                transport.close()
                return
            victim.close()
            victim._abort()
        self.connections.add(conn)
        self.waiting[conn] = None

    def check_body_room(self, n: int, declared: bool) -> None:
        """Refuse a body (declared: its Content-Length; else the bytes just arrived) that would
        take the bytes of request bodies held over every connection past the budget."""
        budget = self.body_budget
        if self.body_bytes + n <= budget:
            return
        if declared and n > budget:
            raise _Reject(413, f"The request body ({n} bytes) is larger than the {budget} bytes of request "
                               "bodies the proxy holds at once (http_options max_buffered_request_body_bytes)")
        now = time.monotonic()
        if now - self._refused_logged >= 10.0:
            self._refused_logged = now
            print(f"serve proxy: request bodies held now take {self.body_bytes} of the "
                  f"{budget} bytes of max_buffered_request_body_bytes; refusing new body bytes with 503 "
                  "until they are answered", file=sys.stderr, flush=True)
        raise _Reject(503, "The proxy is holding as many request body bytes as it may "
                           f"(max_buffered_request_body_bytes={budget}); retry shortly", _RETRY_SOON)

    def release_body(self, req: Request) -> None:
        if req.body_bytes:
            self.body_bytes -= req.body_bytes
            req.body_bytes = 0

    def busy(self, conn: HttpConnection) -> None:
        self.waiting.pop(conn, None)

    def idle(self, conn: HttpConnection) -> None:
        if not conn.closing:
            self.waiting[conn] = None

    def closed(self, conn: HttpConnection) -> None:
        self.connections.discard(conn)
        self.waiting.pop(conn, None)

    def _log_cap(self) -> None:
        now = time.monotonic()
        if now - self._shed_logged >= 10.0:
            self._shed_logged = now
            print(f"serve proxy: {len(self.connections)} connections are open, the cap (http_options "
                  f"max_connections={self.max_connections}); closed the longest-waiting idle connection to "
                  f"accept a new one ({self._shed} times in the last 10 s)", file=sys.stderr, flush=True)
            self._shed = 0

    def _sweep(self) -> None:
        """Close connections whose header read, body read or keep-alive idle time ran out."""
        now = self.now = self.loop.time()
        lim = self.limits
        slack = self.tick_s  # `since` is stamped from the coarse clock: never close early
        expired = []
        for conn in self.waiting:
            age = now - conn.since - slack
            phase = conn.phase
            if phase == IDLE:
                if age > lim.keep_alive_timeout_s and not conn.queue:
                    expired.append((conn, None, 0.0))
            elif phase == HEAD:
                if age > lim.header_read_timeout_s:
                    expired.append((conn, "headers", lim.header_read_timeout_s))
            elif phase == BODY and age > lim.body_read_timeout_s:
                expired.append((conn, "body", lim.body_read_timeout_s))
        for conn, what, timeout_s in expired:
            if what is None:
                conn.close()
            else:
                conn.timed_out(what, timeout_s)
        self._sweeper = self.loop.call_later(self.tick_s, self._sweep)

    def close(self) -> None:
        if self._sweeper is not None:
            self._sweeper.cancel()
        if self.server is not None:
            self.server.close()
        for conn in list(self.connections):
            conn.close()


def _connection_cap(wanted: int) -> int:
    """max_connections, kept below the process's open-file limit (raised to its hard limit first):
    running out of descriptors would make accept() fail for everyone."""
    try:
        soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
        if soft != resource.RLIM_INFINITY and (hard == resource.RLIM_INFINITY or soft < hard):
            resource.setrlimit(resource.RLIMIT_NOFILE, (hard if hard != resource.RLIM_INFINITY else
                                                        max(soft, 65536), hard))
            soft = resource.getrlimit(resource.RLIMIT_NOFILE)[0]
    except (OSError, ValueError):
        return wanted
    if soft == resource.RLIM_INFINITY:
        return wanted
    room = max(64, soft - 256)  # leave descriptors for replica connections, logs, Core
    if room < wanted:
        print(f"serve proxy: max_connections={wanted} is above what the open-file limit ({soft}) allows; "
              f"capping at {room}", file=sys.stderr, flush=True)
    return min(wanted, room)
