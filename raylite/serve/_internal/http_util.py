"""HTTP on the replica side: the ASGI scope rebuilt from a proxy frame, return values turned into
responses, the ASGI `send` that writes response frames, and FastAPI class-based ingress.

A non-streaming response goes back as ONE frame `(status, headers, body)`; a streaming one as a
start frame plus one frame per body chunk, written as soon as the app sends it (SSE works).
"""

from __future__ import annotations

import asyncio
import inspect
from typing import Any

from raylite.serve._internal import json_encoding
from raylite.serve._internal.wire import R_CHUNK, R_END, R_ERR, R_OK, R_START

_TEXT = [(b"content-type", b"text/plain; charset=utf-8")]


def build_scope(payload: tuple, route: str) -> tuple[dict, bytes]:
    method, scheme, path, query, headers, client, server, http_version, body = payload
    scope = {"type": "http", "asgi": {"version": "3.0", "spec_version": "2.3"}, "http_version": http_version,
             "method": method, "scheme": scheme, "path": path, "raw_path": path.encode(),
             "query_string": query, "headers": list(headers), "client": client, "server": server,
             "root_path": "" if route == "/" else route.rstrip("/"), "state": {}}
    return scope, body


def make_receive(body: bytes) -> Any:
    sent = False

    async def receive() -> dict:
        nonlocal sent
        if not sent:
            sent = True
            return {"type": "http.request", "body": body, "more_body": False}
        # nothing more will come: wait until the request is cancelled (client disconnect)
        await asyncio.get_running_loop().create_future()
        return {"type": "http.disconnect"}

    return receive


class WireSender:
    """The ASGI `send` of a replica: coalesces start+body into one frame when it can."""

    __slots__ = ("proto", "rid", "replica", "start", "started", "status", "done")

    def __init__(self, proto: Any, rid: int, replica: Any) -> None:
        self.proto = proto
        self.rid = rid
        self.replica = replica
        self.start: tuple | None = None
        self.started = False
        self.status = 200
        self.done = False

    async def __call__(self, message: dict) -> None:
        kind = message["type"]
        if kind == "http.response.start":
            self.status = message["status"]
            self.start = (message["status"], list(message.get("headers") or []))
            return
        if kind != "http.response.body" or self.done:
            return
        body = message.get("body", b"")
        more = message.get("more_body", False)
        proto = self.proto
        if not self.started:
            if self.start is None:
                raise RuntimeError("ASGI app sent a body before http.response.start")
            if not more:
                self.done = True
                proto.send((self.rid, R_OK, (self.start[0], self.start[1], bytes(body)),
                            self.replica.ongoing - 1))
                return
            self.started = True
            proto.send((self.rid, R_START, self.start, self.replica.ongoing))
        if body:
            proto.send((self.rid, R_CHUNK, bytes(body), self.replica.ongoing))
        if not more:
            self.done = True
            proto.send((self.rid, R_END, None, self.replica.ongoing - 1))
        else:
            # let the transport flush so chunks leave one by one (no buffering of a stream)
            await asyncio.sleep(0)

    def abort(self) -> None:
        if not self.done:
            self.done = True
            self.proto.send((self.rid, R_ERR, None, self.replica.ongoing - 1))


def is_plain(result: Any) -> bool:
    """True for a value encode_result turns into a body (not a Response, generator or awaitable)."""
    if isinstance(result, str | bytes | dict | list | int | float | bool) or result is None:
        return True
    return not (inspect.isawaitable(result) or inspect.isgenerator(result) or inspect.isasyncgen(result)
                or (callable(result) and hasattr(result, "status_code")))


def encode_result(result: Any, deployment: str) -> tuple[int, list, bytes]:
    """A return value as (status, headers, body), encoded as Ray Serve encodes it (see
    json_encoding): None -> empty, bytes/str -> text, anything else -> JSON."""
    try:
        headers, body = json_encoding.encode_body(result)
    except (TypeError, ValueError) as e:
        msg = (f"deployment {deployment!r} returned a value of type {type(result).__name__} that cannot be "
               f"sent as an HTTP response ({e}); return a dict, list, str, bytes or a starlette Response")
        return 500, _TEXT, msg.encode()
    return 200, headers, body


def error_reply(error: BaseException) -> tuple[int, list, bytes]:
    """The HTTP answer to a deployment that raised: as Ray, a handle call it made that was shed
    (BackPressureError) answers that deployment's status (503 or 429, Retry-After), an unavailable
    deployment 503; anything else 500 with the error's type and message."""
    from raylite.serve.exceptions import BackPressureError, DeploymentUnavailableError

    if isinstance(error, BackPressureError):
        return error.status_code, [*_TEXT, *error.http_headers()], str(error).encode()
    if isinstance(error, DeploymentUnavailableError):
        return 503, _TEXT, str(error).encode()
    return 500, _TEXT, f"{type(error).__name__}: {error}".encode()


def takes_request(target: Any) -> bool:
    """Whether an HTTP request should be passed to `target` (a function, or an instance whose
    `__call__` is used). Like Ray, a callable with no parameters is called with none."""
    fn = target if inspect.isfunction(target) or inspect.ismethod(target) else getattr(target, "__call__", None)  # noqa: B004
    if fn is None:
        return True
    try:
        return len(inspect.signature(fn).parameters) > 0
    except (TypeError, ValueError):  # builtins without a signature: assume the usual shape
        return True


async def send_result(result: Any, scope: dict, receive: Any, send: WireSender, deployment: str) -> None:
    from starlette.responses import Response, StreamingResponse

    if isinstance(result, Response):
        await result(scope, receive, send)
        return
    if inspect.isasyncgen(result) or inspect.isgenerator(result):
        await StreamingResponse(result, media_type="text/plain")(scope, receive, send)
        return
    status, headers, body = encode_result(result, deployment)
    send.status = status
    send.done = True
    send.proto.send((send.rid, R_OK, (status, headers, body), send.replica.ongoing - 1))
