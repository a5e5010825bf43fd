"""The HTTP proxy: one actor per node; a lean httptools server (`proxy_http.py`) on uvloop whose
dispatch callback routes by longest `route_prefix` and forwards each request to a replica of
the app's ingress deployment as ONE frame, answering from ONE frame (or a start frame and
chunks for a stream).

The proxy keeps no per-request Core state: routes and replica sets arrive by long poll from the
controller; queue lengths come back on every reply.
"""

from __future__ import annotations

import asyncio
import json
import os
import random
from typing import Any

from raylite.serve._internal import client as _client
from raylite.serve._internal.event_loops import start_loop_thread
from raylite.serve._internal.http_limits import Limits
from raylite.serve._internal.proxy_socket import SocketShare, bind_socket, fetch_socket, share_paths
from raylite.serve._internal.proxy_ws import WebSocketBridge
from raylite.serve._internal.router import ReplicaDiedError, cancel
from raylite.serve._internal.wire import (
    ACK_FIRST,
    KIND_HTTP,
    R_CHUNK,
    R_END,
    R_ERR,
    R_LOST,
    R_OK,
    R_REJECT,
    R_START,
)
from raylite.serve.exceptions import BackPressureError, DeploymentUnavailableError

_TEXT = [(b"content-type", b"text/plain; charset=utf-8")]
_JSON = [(b"content-type", b"application/json")]


def backpressure_reply(error: BackPressureError) -> tuple[int, list, bytes]:
    """(status, headers, body) for a request shed by max_queued_requests: 503, or what the
    deployment's BackpressureConfig says (429 and/or a Retry-After header, whole seconds)."""
    return error.status_code, [*_TEXT, *error.http_headers()], str(error).encode()


class ProxyImpl:
    """Routing and forwarding; runs on the proxy's own loop."""

    def __init__(self, options: dict) -> None:
        self.options = options
        self.routes: list[tuple[str, str, str]] = []  # (prefix, app, ingress deployment), longest first
        self.body_limits: dict[str, int] = {}  # prefix -> the ingress deployment's max_request_body_size_bytes
        self.timeout_s = options.get("request_timeout_s")
        self.default_body_limit = Limits.from_options(options).max_request_body_size_bytes
        self.routes_known = asyncio.Event()
        self.state = _client.state()
        self.state.subscribe("routes", self._set_routes)
        # request ids need to be unique, not secret: a generator seeded once per proxy (after
        # the fork, so no two processes share a sequence) instead of a getrandom() syscall per
        # request, which cost a tenth of the proxy's CPU under load
        self._ids = random.Random(os.urandom(16))

    def new_request_id(self) -> str:
        return f"{self._ids.getrandbits(128):032x}"

    def _set_routes(self, value: dict | None) -> None:
        items = [(p, v[0], v[1]) for p, v in (value or {}).items()]
        self.body_limits = {p: v[2] for p, v in (value or {}).items() if len(v) > 2 and v[2] is not None}
        items.sort(key=lambda t: len(t[0]), reverse=True)
        self.routes = items
        self.routes_known.set()

    def match(self, path: str) -> tuple[str, str, str] | None:
        for prefix, app, dep in self.routes:
            if prefix == "/" or path == prefix or path.startswith(prefix + "/") or (
                    prefix.endswith("/") and path.startswith(prefix)):
                return prefix, app, dep
        return None

    def route(self, req: Any) -> int:
        """Called when a request's headers are in: remember its route, return its body limit
        (the ingress deployment's max_request_body_size_bytes, else the proxy's)."""
        found = req.route = self.match(req.path)
        if found is not None:
            return self.body_limits.get(found[0], self.default_body_limit)
        return self.default_body_limit

    def dispatch(self, req: Any) -> None:
        """Route one parsed request (called by the HTTP server, in order per connection)."""
        if not req.request_id:
            req.request_id = self.new_request_id()
        path = req.path
        found = req.route
        # the proxy's own paths win over an app at "/" (as in Ray: KubeRay's RayService worker
        # probe reads :8000/-/healthz whatever the apps' route prefixes are)
        if path == "/-/healthz":
            return req.respond(200, _TEXT, b"success")
        if path == "/-/routes":
            return req.respond(200, _JSON, json.dumps({p: a for p, a, _ in self.routes}).encode())
        if found is None:
            return req.respond(404, _TEXT, (f"Path '{path}' not found. Ping http://.../-/routes for available "
                                            "routes.").encode())
        prefix, app_name, dep = found
        conn = req.conn
        payload = (req.method, "http", path, req.query, req.headers, conn.client, self.server_addr,
                   req.http_version, req.body)
        meta = (req.request_id, prefix, app_name, req.model_id, False, "__call__")
        if self.timeout_s:
            req.timer = self.loop.call_later(self.timeout_s, self._expire, req)
        self._send(req, self.state.router(app_name, dep), meta, payload, 0)

    def upgrade(self, req: Any) -> Any:
        """A WebSocket upgrade request: bridge it to a replica of its route (or answer it here)."""
        if not req.request_id:
            req.request_id = self.new_request_id()
        req.keep_alive = False
        found = req.route
        if found is None:
            req.respond(404, _TEXT, f"Path '{req.path}' not found.".encode())
            return None
        prefix, app_name, dep = found
        payload = (req.method, "http", req.path, req.query, req.headers, req.conn.client, self.server_addr,
                   req.http_version, b"")
        meta = (req.request_id, prefix, app_name, req.model_id, False, "__call__")
        bridge = WebSocketBridge(self, req, self.state.router(app_name, dep), meta, payload, req.conn.body_limit)
        return bridge if bridge.start() else None

    def _send(self, req: Any, router: Any, meta: tuple, payload: tuple, attempt: int, kind: int = KIND_HTTP) -> None:
        """Send `req` to a replica of `router`; resend it on R_REJECT/R_LOST (after R_LOST with
        ACK_FIRST: a request that may have run gets one acknowledged run more, not four)."""
        def on_reply(code: int, data: Any, last: bool) -> None:
            if code == R_OK:
                req.respond(*data)
            elif code == R_CHUNK:
                req.write_chunk(data)
            elif code == R_START:
                req.start_stream(*data)
            elif code == R_END:
                req.end_stream()
            elif code == R_REJECT or code == R_LOST:
                if attempt >= 4:
                    req.respond(503, _TEXT, (f"no replica of deployment {router.deployment_name!r} could take this "
                                             "request (they were shutting down or died before starting it); "
                                             "retry").encode())
                elif not req.done:
                    self._send(req, router, meta, payload, attempt + 1,
                               kind | ACK_FIRST if code == R_LOST else kind)
            elif req.streaming:
                req.end_stream(ok=False)
            elif code == R_ERR:
                req.respond(500, _TEXT, b"Internal Server Error")
            else:
                req.respond(500, _TEXT, (f"The replica of deployment {router.deployment_name!r} died while running "
                                         "this request (it had reached the deployment's code, so it was not sent "
                                         "to another replica); retry (Serve is starting a replacement)").encode())

        sent = router.send_nowait(kind, meta, payload, on_reply, req.model_id)
        if sent is not None:
            conn, rid = sent
            req.cancel_cb = lambda: cancel(conn, rid)
            return

        def on_sent(sent: tuple) -> None:
            conn, rid = sent
            req.cancel_cb = lambda: cancel(conn, rid)

        try:
            entry = router.queue_send(kind, meta, payload, on_reply, req.model_id, on_sent)
        except BackPressureError as e:
            return req.respond(*backpressure_reply(e))
        if entry is not None:
            req.cancel_cb = lambda: entry.__setitem__(6, True)
            return
        task = self.loop.create_task(self._send_slow(req, router, kind, meta, payload, on_reply))
        req.cancel_cb = task.cancel

    async def _send_slow(self, req: Any, router: Any, kind: int, meta: tuple, payload: tuple,
                         on_reply: Any) -> None:
        try:
            conn, rid = await router.send(kind, meta, payload, on_reply, req.model_id)
        except BackPressureError as e:
            return req.respond(*backpressure_reply(e))
        except (DeploymentUnavailableError, ReplicaDiedError) as e:
            return req.respond(503, _TEXT, str(e).encode())
        if req.done:
            cancel(conn, rid)
        else:
            req.cancel_cb = lambda: cancel(conn, rid)

    def _expire(self, req: Any) -> None:
        if req.done:
            return
        if req.cancel_cb is not None:
            req.cancel_cb()
        if req.streaming:
            req.end_stream(ok=False)
        else:
            req.respond(408, _TEXT, (f"Request {req.request_id} timed out after request_timeout_s="
                                     f"{self.timeout_s}s").encode())


class ServeProxy:
    """The Core actor hosting one node's HTTP proxy.

    The listening socket comes from the node's `ProxySocketHolder` (`proxy_socket.py`), so a
    proxy that is killed and restarted (by Core, in place) takes over a port that never stopped
    accepting; without a holder (it is down too) the proxy binds the port itself.
    """

    def __init__(self, options: dict, token: str = "") -> None:
        from raylite.experimental import get_channel_security

        self.options = options
        self.loop = start_loop_thread("serve-proxy")
        _client.set_process_loop(self.loop)
        self.error = ""
        self.server: Any = None
        self.share: SocketShare | None = None
        holder_path, proxy_path = share_paths(get_channel_security().socket_dir, token) if token else ("", "")
        self.sock = fetch_socket(holder_path)
        if self.sock is None:
            try:
                self.sock = bind_socket(options.get("host", "127.0.0.1"), int(options.get("port", 8000)))
            except OSError as e:
                self.sock = None
                self.error = str(e.strerror or e)
                return
        if token:
            self.share = SocketShare(self.sock, proxy_path)
        asyncio.run_coroutine_threadsafe(self._start(), self.loop).result()

    async def _start(self) -> None:
        from raylite.serve._internal.proxy_http import HttpServer

        impl = ProxyImpl(self.options)
        impl.loop = asyncio.get_running_loop()
        impl.server_addr = tuple(self.sock.getsockname()[:2])
        # accept only once the routes are known: a restarted proxy must not answer 404 meanwhile
        try:
            await asyncio.wait_for(impl.routes_known.wait(), 10.0)
        except asyncio.TimeoutError:
            pass
        self.server = HttpServer(impl.loop, impl, Limits.from_options(self.options))
        await self.server.start(self.sock)

    async def ready(self) -> dict:
        """{"ok": bool, "error": str, "port": int, "pid": int}: whether the proxy listens."""
        if self.error:
            return {"ok": False, "error": self.error}
        return {"ok": True, "error": "", "port": self.sock.getsockname()[1], "pid": os.getpid()}

    async def shutdown(self) -> None:
        if self.server is not None:
            self.loop.call_soon_threadsafe(self.server.close)
        if self.share is not None:
            self.share.close()
        if self.sock is not None:
            try:
                self.sock.close()
            except OSError:
                pass
