"""The HTTP proxy: one actor per node, uvicorn (httptools + uvloop when installed) in front of a
raw ASGI function that routes by longest `route_prefix` and forwards each request to a replica
of the app's ingress deployment as ONE frame, answering from ONE frame (or a start frame and
chunks for a stream).

The proxy keeps no per-request Core state: routes and replica sets arrive by long poll from the
controller; queue lengths come back on every reply.
"""

from __future__ import annotations

import asyncio
import errno
import socket
import uuid
from typing import Any

from raylite.serve._internal import client as _client
from raylite.serve._internal.replica import start_loop_thread
from raylite.serve._internal.router import ReplicaDiedError, cancel
from raylite.serve._internal.wire import KIND_HTTP, R_CHUNK, R_END, R_ERR, R_OK, R_REJECT, R_START
from raylite.serve.exceptions import BackPressureError, DeploymentUnavailableError

_TEXT = [(b"content-type", b"text/plain; charset=utf-8")]
_JSON = [(b"content-type", b"application/json")]
_END = object()


def bind_socket(host: str, port: int) -> socket.socket:
    """Bind the proxy's listening socket, or raise an error naming the port and the fix."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        sock.bind((host, port))
    except OSError as e:
        sock.close()
        if e.errno == errno.EADDRINUSE:
            raise OSError(errno.EADDRINUSE, (
                f"Serve's HTTP proxy cannot listen on {host}:{port}: the port is already in use by another "
                f"process. Stop that process, or pick another port: serve.start(http_options={{'port': "
                f"{port + 1}}}) or serve.run(app, port={port + 1}) (or `serve run --port`)")) from None
        raise OSError(e.errno, f"Serve's HTTP proxy cannot listen on {host}:{port}: {e.strerror}") from None
    sock.listen(2048)
    sock.setblocking(False)
    return sock


class ProxyImpl:
    """Routing and forwarding; runs on the proxy's own loop."""

    def __init__(self, options: dict) -> None:
        self.options = options
        self.routes: list[tuple[str, str, str]] = []  # (prefix, app, ingress deployment), longest first
        self.timeout_s = options.get("request_timeout_s")
        self.state = _client.state()
        self.state.subscribe("routes", self._set_routes)

    def _set_routes(self, value: dict | None) -> None:
        items = [(p, a, d) for p, (a, d) in (value or {}).items()]
        items.sort(key=lambda t: len(t[0]), reverse=True)
        self.routes = items

    def match(self, path: str) -> tuple[str, str, str] | None:
        for prefix, app, dep in self.routes:
            if prefix == "/" or path == prefix or path.startswith(prefix + "/") or (
                    prefix.endswith("/") and path.startswith(prefix)):
                return prefix, app, dep
        return None

    async def __call__(self, scope: dict, receive: Any, send: Any) -> None:
        kind = scope["type"]
        if kind != "http":
            if kind == "lifespan":
                while True:
                    msg = await receive()
                    if msg["type"] == "lifespan.startup":
                        await send({"type": "lifespan.startup.complete"})
                    else:
                        await send({"type": "lifespan.shutdown.complete"})
                        return
            return
        path = scope["path"]
        headers = scope["headers"]
        request_id = model_id = ""
        for k, v in headers:
            if k == b"x-request-id":
                request_id = v.decode("latin-1")
            elif k == b"serve_multiplexed_model_id" or k == b"serve-multiplexed-model-id":
                model_id = v.decode("latin-1")
        if not request_id:
            request_id = uuid.uuid4().hex
        rid_header = (b"x-request-id", request_id.encode("latin-1"))
        found = self.match(path)
        if found is None:
            if path == "/-/healthz":
                return await _reply(send, 200, _TEXT, b"success", rid_header)
            if path == "/-/routes":
                import json

                body = json.dumps({p: a for p, a, _ in self.routes}).encode()
                return await _reply(send, 200, _JSON, body, rid_header)
            msg = (f"Path '{path}' not found. Ping http://.../-/routes for available routes.").encode()
            return await _reply(send, 404, _TEXT, msg, rid_header)
        prefix, app_name, dep = found
        body = b""
        more = True
        while more:
            msg = await receive()
            if msg["type"] == "http.disconnect":
                return
            body += msg.get("body", b"")
            more = msg.get("more_body", False)
        payload = (scope["method"], scope.get("scheme", "http"), path, scope["query_string"], headers,
                   scope.get("client"), scope.get("server"), scope.get("http_version", "1.1"), body)
        meta = (request_id, prefix, app_name, model_id, False, "__call__")
        await self._forward(self.state.router(app_name, dep), meta, payload, model_id, receive, send, rid_header)

    async def _forward(self, router: Any, meta: tuple, payload: tuple, model_id: str, receive: Any, send: Any,
                       rid_header: tuple) -> None:
        loop = asyncio.get_running_loop()
        for _attempt in range(4):
            fut = loop.create_future()
            chunks: asyncio.Queue | None = None

            def on_reply(code: int, data: Any, last: bool, fut: asyncio.Future = fut) -> None:
                nonlocal chunks
                if not fut.done():
                    if code == R_START:
                        chunks = asyncio.Queue()
                    fut.set_result((code, data))
                    return
                if chunks is not None:
                    if code == R_CHUNK:
                        chunks.put_nowait(data)
                    elif code == R_END:
                        chunks.put_nowait(_END)
                    else:
                        chunks.put_nowait(None)

            try:
                conn, rid = await router.send(KIND_HTTP, meta, payload, on_reply, model_id)
            except BackPressureError as e:
                return await _reply(send, 503, _TEXT, str(e).encode(), rid_header)
            except (DeploymentUnavailableError, ReplicaDiedError) as e:
                return await _reply(send, 503, _TEXT, str(e).encode(), rid_header)
            watcher = loop.call_later(0.25, self._watch_disconnect, receive, fut, conn, rid)
            timer = None
            if self.timeout_s:
                timer = loop.call_later(self.timeout_s, _expire, fut, conn, rid)
            try:
                code, data = await fut
            finally:
                watcher.cancel()
                if timer is not None:
                    timer.cancel()
            if code == R_OK:
                status, headers, body = data
                headers.append(rid_header)
                await send({"type": "http.response.start", "status": status, "headers": headers})
                await send({"type": "http.response.body", "body": body})
                return
            if code == R_START:
                return await self._stream(data, chunks, send, rid_header, conn, rid)
            if code == R_REJECT:
                continue
            if code == _TIMEOUT:
                return await _reply(send, 408, _TEXT, (
                    f"Request {meta[0]} timed out after request_timeout_s={self.timeout_s}s").encode(), rid_header)
            if code == _DISCONNECTED:
                return
            if code == R_ERR:
                return await _reply(send, 500, _TEXT, b"Internal Server Error", rid_header)
            return await _reply(send, 500, _TEXT, (
                f"The replica of deployment {router.deployment_name!r} handling this request died; "
                "retry (Serve is starting a replacement)").encode(), rid_header)
        return await _reply(send, 503, _TEXT, b"all replicas are shutting down; retry", rid_header)

    async def _stream(self, start: tuple, chunks: asyncio.Queue, send: Any, rid_header: tuple, conn: Any,
                      rid: int) -> None:
        status, headers = start
        headers = list(headers)
        headers.append(rid_header)
        await send({"type": "http.response.start", "status": status, "headers": headers})
        try:
            while True:
                chunk = await chunks.get()
                if chunk is _END:
                    break
                if chunk is None:  # the replica failed mid-stream: end the body
                    break
                await send({"type": "http.response.body", "body": chunk, "more_body": True})
        except (OSError, asyncio.CancelledError):
            cancel(conn, rid)
            raise
        await send({"type": "http.response.body", "body": b""})

    def _watch_disconnect(self, receive: Any, fut: asyncio.Future, conn: Any, rid: int) -> None:
        """The request is slow: watch for the client going away, and cancel it on the replica."""
        async def watch() -> None:
            while not fut.done():
                msg = await receive()
                if msg["type"] == "http.disconnect":
                    if not fut.done():
                        cancel(conn, rid)
                        fut.set_result((_DISCONNECTED, None))
                    return

        task = asyncio.ensure_future(watch())
        fut.add_done_callback(lambda _f: task.cancel())


_TIMEOUT = -10
_DISCONNECTED = -11


def _expire(fut: asyncio.Future, conn: Any, rid: int) -> None:
    if not fut.done():
        cancel(conn, rid)
        fut.set_result((_TIMEOUT, None))


async def _reply(send: Any, status: int, headers: list, body: bytes, rid_header: tuple) -> None:
    await send({"type": "http.response.start", "status": status, "headers": [*headers, rid_header]})
    await send({"type": "http.response.body", "body": body})


class ServeProxy:
    """The Core actor hosting one node's HTTP proxy."""

    def __init__(self, options: dict) -> None:
        self.options = options
        self.loop = start_loop_thread("serve-proxy")
        _client.set_process_loop(self.loop)
        self.error = ""
        self.server: Any = None
        try:
            self.sock = bind_socket(options.get("host", "127.0.0.1"), int(options.get("port", 8000)))
        except OSError as e:
            self.sock = None
            self.error = str(e.strerror or e)
            return
        asyncio.run_coroutine_threadsafe(self._start(), self.loop).result()

    async def _start(self) -> None:
        import uvicorn

        impl = ProxyImpl(self.options)
        try:
            import httptools  # noqa: F401

            http = "httptools"
        except ImportError:  # pragma: no cover
            http = "h11"
        config = uvicorn.Config(impl, http=http, lifespan="off", access_log=False, log_level="warning",
                                timeout_keep_alive=int(self.options.get("keep_alive_timeout_s", 5)),
                                root_path=self.options.get("root_path", ""), loop="none")
        self.server = uvicorn.Server(config)
        self.task = asyncio.ensure_future(self.server.serve(sockets=[self.sock]))

    async def ready(self) -> dict:
        """{"ok": bool, "error": str, "port": int}: whether the proxy listens."""
        if self.error:
            return {"ok": False, "error": self.error}
        for _ in range(200):
            if self.server is not None and self.server.started:
                break
            await asyncio.sleep(0.01)
        return {"ok": True, "error": "", "port": self.sock.getsockname()[1]}

    async def shutdown(self) -> None:
        if self.server is not None:
            self.server.should_exit = True
        if self.sock is not None:
            try:
                self.sock.close()
            except OSError:
                pass
