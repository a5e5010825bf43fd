"""The replica's end of a WebSocket: an ASGI `websocket` scope whose receive/send run over the
direct channel (the proxy speaks the WebSocket protocol to the client, see `proxy_ws.py`).

Messages of one WebSocket request (`KIND_WS`, request id `rid`):
  proxy -> replica   (MSG, rid, ("text", str) | ("bytes", bytes))   a client message
                     (MSG, rid, ("close", code, reason))             the client left
                     (MSG, rid, ("credit", n))                       n of our messages reached the client
  replica -> proxy   (rid, R_START, (subprotocol, headers))          websocket.accept
                     (rid, R_CHUNK, str | bytes)                     websocket.send
                     (rid, R_CREDIT, n)                              the app took n client messages
                     (rid, R_END, (code, reason))                    websocket.close (last frame)
                     (rid, R_OK, (status, headers, body))            an HTTP answer instead of accepting (last)
Both directions are flow controlled by credits: at most `WINDOW` messages are in flight one way
before the sender waits (the proxy stops reading from the client; the app's send() waits), so a
fast client or a slow one cannot make either process buffer without bound.
"""

from __future__ import annotations

import asyncio
import traceback
from collections import deque
from typing import Any

from raylite.serve._internal.wire import R_CHUNK, R_CREDIT, R_END, R_OK, R_START

WINDOW = 32  # messages in flight per direction (uvicorn's default ws_max_queue)

_TEXT = [(b"content-type", b"text/plain; charset=utf-8")]


def websocket_scope(payload: tuple, route: str) -> dict:
    method, scheme, path, query, headers, client, server, http_version, _body = payload
    subprotocols = [p.strip() for k, v in headers if k == b"sec-websocket-protocol"
                    for p in v.decode("latin-1").split(",") if p.strip()]
    return {"type": "websocket", "asgi": {"version": "3.0", "spec_version": "2.4"}, "http_version": http_version,
            "scheme": "wss" if scheme == "https" else "ws", "path": path, "raw_path": path.encode(),
            "query_string": query, "headers": headers, "client": client, "server": server,
            "root_path": "" if route == "/" else route.rstrip("/"), "subprotocols": subprotocols,
            "state": {}, "extensions": {"websocket.http.response": {}}}


class WebSocketSession:
    """One WebSocket in a replica: the ASGI receive/send pair plus the channel bookkeeping."""

    def __init__(self, proto: Any, rid: int, replica: Any) -> None:
        self.proto = proto
        self.rid = rid
        self.replica = replica
        self.inbox: deque[tuple] = deque()
        self.inbox_ready: asyncio.Future | None = None
        self.room: asyncio.Future | None = None
        self.unacked = 0           # our messages not yet confirmed written to the client
        self.connected = False     # websocket.connect was delivered
        self.accepted = False
        self.finished = False      # a last frame (R_END / R_OK) was sent
        self.left: tuple[int, str] | None = None  # the client's close (code, reason)
        self.http_start: tuple | None = None
        self.http_body: list[bytes] = []

    # ------------------------------------------------------------ from the channel
    def feed(self, item: tuple) -> None:
        if item[0] == "credit":
            self.unacked -= item[1]
            _wake(self.room)
            return
        if item[0] == "close":
            self.left = (item[1], item[2])
            _wake(self.room)
        self.inbox.append(item)
        _wake(self.inbox_ready)

    def _send(self, code: int, payload: Any) -> None:
        last = code in (R_END, R_OK)
        self.proto.send((self.rid, code, payload, self.replica.ongoing - (1 if last else 0)))

    # ------------------------------------------------------------ ASGI
    async def receive(self) -> dict:
        if not self.connected:
            self.connected = True
            return {"type": "websocket.connect"}
        while not self.inbox:
            self.inbox_ready = asyncio.get_running_loop().create_future()
            await self.inbox_ready
        item = self.inbox[0]
        if item[0] == "close":  # stays in the inbox: every later receive() sees the disconnect too
            return {"type": "websocket.disconnect", "code": item[1], "reason": item[2]}
        self.inbox.popleft()
        self._send(R_CREDIT, 1)
        if item[0] == "text":
            return {"type": "websocket.receive", "text": item[1]}
        return {"type": "websocket.receive", "bytes": item[1]}

    async def send(self, message: dict) -> None:
        kind = message["type"]
        if self.finished:
            raise RuntimeError(f"ASGI app sent {kind!r} after the WebSocket was closed")
        if kind == "websocket.accept":
            if self.accepted:
                raise RuntimeError("ASGI app sent 'websocket.accept' twice")
            self.accepted = True
            headers = [(bytes(k), bytes(v)) for k, v in message.get("headers") or ()]
            self._send(R_START, (message.get("subprotocol"), headers))
        elif kind == "websocket.send":
            if not self.accepted:
                raise RuntimeError("ASGI app sent 'websocket.send' before 'websocket.accept'")
            if self.left is not None:
                raise OSError(f"the WebSocket client disconnected (code {self.left[0]})")
            while self.unacked >= WINDOW and self.left is None:
                self.room = asyncio.get_running_loop().create_future()
                await self.room
            if self.left is not None:
                raise OSError(f"the WebSocket client disconnected (code {self.left[0]})")
            data = message.get("text")
            if data is None:
                data = bytes(message.get("bytes") or b"")
            self.unacked += 1
            self._send(R_CHUNK, data)
        elif kind == "websocket.close":
            self.finished = True
            if self.accepted:
                self._send(R_END, (int(message.get("code") or 1000), str(message.get("reason") or "")))
            else:  # closing before accepting is a refusal of the handshake (as uvicorn answers it)
                self._send(R_OK, (403, _TEXT, b"WebSocket connection refused by the application"))
        elif kind == "websocket.http.response.start":
            if self.accepted:
                raise RuntimeError("ASGI app sent an HTTP response after accepting the WebSocket")
            self.http_start = (message["status"], list(message.get("headers") or []))
        elif kind == "websocket.http.response.body":
            if self.http_start is None:
                raise RuntimeError("ASGI app sent a response body before 'websocket.http.response.start'")
            self.http_body.append(bytes(message.get("body") or b""))
            if not message.get("more_body"):
                self.finished = True
                self._send(R_OK, (self.http_start[0], self.http_start[1], b"".join(self.http_body)))
        else:
            raise RuntimeError(f"unexpected ASGI message {kind!r} on a WebSocket")

    # ------------------------------------------------------------ running the app
    async def run(self, app: Any, payload: tuple, route: str, deployment: str, logger: Any) -> int:
        """Run the ASGI app on this WebSocket; returns the status for the access log (101 once
        accepted, else the HTTP status answered)."""
        if app is None:
            self.finished = True
            self._send(R_OK, (404, _TEXT, (
                f"deployment {deployment!r} does not serve WebSockets: put a FastAPI app with @app.websocket "
                "routes on it with @serve.ingress(app)").encode()))
            return 404
        scope = websocket_scope(payload, route)
        try:
            await app(scope, self.receive, self.send)
        except asyncio.CancelledError:
            raise
        except BaseException:  # noqa: BLE001
            logger.error("WebSocket %s failed:\n%s", scope["path"], traceback.format_exc())
            if not self.finished:
                self.finished = True
                if self.accepted:
                    self._send(R_END, (1011, "internal error"))
                else:
                    self._send(R_OK, (500, _TEXT, b"Internal Server Error"))
            return 101 if self.accepted else 500
        if not self.finished:
            self.finished = True
            if self.accepted:
                self._send(R_END, (1000, ""))
            else:
                self._send(R_OK, (500, _TEXT, b"the application returned without accepting the WebSocket"))
                return 500
        return 101 if self.accepted else (self.http_start or (403,))[0]


def _wake(fut: asyncio.Future | None) -> None:
    if fut is not None and not fut.done():
        fut.set_result(None)
