"""The proxy's end of a WebSocket: the protocol with the client at the edge (websockets'
sans-I/O implementation), ASGI websocket messages with the replica over the direct channel.

The upgrade request goes to a replica of the route's ingress deployment as one `KIND_WS`
request; the 101 answer is sent only when the app accepts (with its subprotocol and headers),
and an app that refuses gets its HTTP answer (403 by default) to the client. Then each complete
client message becomes one channel message and each app message one WebSocket message. Close
codes travel both ways; a client that vanishes is reported to the app as a disconnect (1006).
Flow control (see `ws_session.py`): the proxy stops reading from a client whose messages the
app has not taken, and holds back the app's credits while the client reads slowly. The largest
message accepted is the route's `max_request_body_size_bytes`.
"""

from __future__ import annotations

import asyncio
from collections import deque
from typing import Any

from websockets.datastructures import Headers
from websockets.frames import Opcode
from websockets.http11 import Request as HandshakeRequest
from websockets.protocol import State
from websockets.server import ServerProtocol

from raylite.serve._internal.router import cancel
from raylite.serve._internal.wire import (
    KIND_WS,
    MSG,
    R_CHUNK,
    R_CREDIT,
    R_END,
    R_LOST,
    R_OK,
    R_REJECT,
    R_START,
)
from raylite.serve.exceptions import BackPressureError, DeploymentUnavailableError

IN_WINDOW = 32                 # client messages the app has not taken yet (ws_session.WINDOW)
IN_WINDOW_BYTES = 8 * 1024**2  # ... and their bytes
EARLY_BYTES = 64 * 1024        # what a client may send before the app has accepted
CLOSE_GRACE_S = 5.0            # wait this long for the client's closing handshake, or the app's exit

_TEXT = [(b"content-type", b"text/plain; charset=utf-8")]


class WebSocketBridge:
    """One client WebSocket, from the upgrade request to the closed TCP connection."""

    def __init__(self, impl: Any, req: Any, router: Any, meta: tuple, payload: tuple,
                 max_message_bytes: int) -> None:
        self.impl = impl
        self.req = req
        self.conn = req.conn
        self.router = router
        self.meta = meta
        self.payload = payload
        self.max_message_bytes = max_message_bytes
        self.handshake: Any = None      # the 101 response, sent when the app accepts
        self.ws: ServerProtocol | None = None
        self.sent: tuple[Any, int] | None = None  # (replica connection, rid) once the request is out
        self.task: asyncio.Task | None = None
        self.done = False               # the replica sent its last frame (or failed)
        self.left = False               # the replica was told the client is gone
        self.early = bytearray()
        self.frags: list[bytes] = []
        self.frag_text = False
        self.in_flight = 0
        self.in_flight_bytes = 0
        self.sizes: deque[int] = deque()
        self.reading_paused = False
        self.owed_credits = 0
        self.timer: Any = None
        self.attempt = 0

    # ------------------------------------------------------------ opening
    def start(self) -> bool:
        """Check the handshake and send the request to a replica; False if already answered."""
        req = self.req
        headers = Headers([(k.decode("latin-1"), v.decode("latin-1")) for k, v in req.headers])
        target = req.path + ("?" + req.query.decode("latin-1") if req.query else "")
        try:
            response = ServerProtocol().accept(HandshakeRequest(target, headers))
        except Exception as e:  # noqa: BLE001 - a request websockets cannot represent
            self._http_answer(400, _TEXT, f"Invalid WebSocket handshake: {e}".encode())
            return False
        if response.status_code != 101:
            self._write(response.serialize())
            self.conn.close()
            return False
        self.handshake = response
        self._send()
        return True

    def _send(self) -> None:
        sent = self.router.send_nowait(KIND_WS, self.meta, self.payload, self._on_reply, self.req.model_id)
        if sent is not None:
            self.sent = sent
        else:
            self.task = self.impl.loop.create_task(self._send_slow())

    async def _send_slow(self) -> None:
        try:
            self.sent = await self.router.send(KIND_WS, self.meta, self.payload, self._on_reply, self.req.model_id)
        except (BackPressureError, DeploymentUnavailableError) as e:
            self.done = True
            self._http_answer(503, _TEXT, str(e).encode())
            return
        self.task = None
        if self.left and not self.done:  # the client left while we waited for a replica
            self._tell(("close", 1006, ""))

    # ------------------------------------------------------------ replica -> client
    def _on_reply(self, code: int, data: Any, last: bool) -> None:
        if code == R_CHUNK:
            self._to_client(data)
        elif code == R_CREDIT:
            self.in_flight -= data
            for _ in range(min(data, len(self.sizes))):
                self.in_flight_bytes -= self.sizes.popleft()
            self._maybe_resume()
        elif code == R_START:
            self._accepted(*data)
        elif code == R_END:
            self.done = True
            self._close_client(*data)
        elif code == R_OK:
            self.done = True
            if self.ws is None:
                self._http_answer(*data)
            else:
                self._close_client(1011, "")
        elif code in (R_REJECT, R_LOST) and self.ws is None and self.attempt < 4 and not self.left:
            self.attempt += 1  # the replica is shutting down (or died before taking it: WebSockets are
            # always acknowledged, so R_LOST means it never ran): another one
            self.sent = None
            self._send()
        else:  # R_ERR, R_REJECT/R_LOST after 4 attempts, or -1 (the replica died)
            self.done = True
            if self.ws is None:
                self._http_answer(503 if code in (R_REJECT, R_LOST) else 500, _TEXT,
                                  f"The replica of deployment {self.router.deployment_name!r} serving this "
                                  "WebSocket failed; retry".encode())
            else:
                self._close_client(1011, "the replica serving this WebSocket failed")

    def _accepted(self, subprotocol: str | None, headers: list) -> None:
        response = self.handshake
        if subprotocol:
            response.headers["Sec-WebSocket-Protocol"] = subprotocol
        for k, v in headers:
            response.headers[k.decode("latin-1")] = v.decode("latin-1")
        self._write(response.serialize())
        self.ws = ServerProtocol(state=State.OPEN, max_size=self.max_message_bytes)
        if self.early:
            early, self.early = bytes(self.early), bytearray()
            self.data_received(early)

    def _to_client(self, data: str | bytes) -> None:
        ws = self.ws
        if ws is None or ws.state is not State.OPEN:
            self._credit(1)
            return
        if isinstance(data, str):
            ws.send_text(data.encode())
        else:
            ws.send_binary(data)
        self._flush()
        if self.conn.write_paused:
            self.owed_credits += 1  # the client reads slowly: the app waits until it catches up
        else:
            self._credit(1)

    def writable(self) -> None:
        """The client's socket drained: let the app send again."""
        if self.owed_credits:
            n, self.owed_credits = self.owed_credits, 0
            self._credit(n)

    def _credit(self, n: int) -> None:
        if not self.done:
            self._tell(("credit", n))

    def _close_client(self, code: int, reason: str) -> None:
        ws = self.ws
        if ws is None:
            self.conn.close()
            return
        if ws.state is State.OPEN:
            ws.send_close(code, reason)
            self._flush()
        self._arm_close_timer()

    # ------------------------------------------------------------ client -> replica
    def data_received(self, data: bytes) -> None:
        ws = self.ws
        if ws is None:
            if len(self.early) + len(data) > EARLY_BYTES:
                self.conn.close()  # a client may not stream data at a WebSocket not yet accepted
            else:
                self.early += data
            return
        ws.receive_data(data)
        for frame in ws.events_received():
            op = frame.opcode
            if op is Opcode.TEXT or op is Opcode.BINARY:
                self.frag_text = op is Opcode.TEXT
                self.frags = [frame.data]
            elif op is Opcode.CONT:
                self.frags.append(frame.data)
            else:
                continue  # PING/PONG are answered by the protocol; CLOSE is seen in the state below
            if frame.fin:
                body = b"".join(self.frags)
                self.frags = []
                self._message(body)
        self._flush()
        if ws.state is not State.OPEN and not self.left:
            rcvd = ws.close_rcvd  # None: the protocol failed (too big, invalid), or no close frame came
            sent = ws.close_sent
            if rcvd is not None:
                self._client_left(rcvd.code, rcvd.reason)
            else:
                self._client_left(sent.code if sent is not None else 1006, sent.reason if sent is not None else "")

    def _message(self, body: bytes) -> None:
        if self.done or self.left:
            return
        item = ("text", body.decode("utf-8")) if self.frag_text else ("bytes", body)
        self.in_flight += 1
        self.in_flight_bytes += len(body)
        self.sizes.append(len(body))
        self._tell(item)
        if (self.in_flight >= IN_WINDOW or self.in_flight_bytes >= IN_WINDOW_BYTES) and not self.reading_paused:
            self.reading_paused = True
            if self.conn.transport is not None:
                self.conn.transport.pause_reading()

    def _maybe_resume(self) -> None:
        if self.reading_paused and self.in_flight < IN_WINDOW // 2 and self.in_flight_bytes < IN_WINDOW_BYTES // 2:
            self.reading_paused = False
            if self.conn.transport is not None:
                self.conn.transport.resume_reading()

    def _tell(self, item: tuple) -> None:
        if self.sent is not None:
            conn, rid = self.sent
            if rid in conn.pending:
                conn.send((MSG, rid, item))

    def _client_left(self, code: int, reason: str) -> None:
        self.left = True
        if self.task is not None:
            self.task.cancel()
            return
        if not self.done:
            self._tell(("close", code, reason))
            self._arm_close_timer()

    def connection_lost(self, exc: BaseException | None) -> None:
        if not self.left:
            self._client_left(1006, "")

    # ------------------------------------------------------------ helpers
    def _arm_close_timer(self) -> None:
        if self.timer is None:
            self.timer = self.impl.loop.call_later(CLOSE_GRACE_S, self._force_close)

    def _force_close(self) -> None:
        """The closing handshake did not finish in time: drop the TCP connection, and stop the
        app if it ignored the disconnect."""
        if not self.done and self.sent is not None:
            cancel(*self.sent)
        self.conn.close()

    def _flush(self) -> None:
        ws = self.ws
        if ws is None:
            return
        for chunk in ws.data_to_send():
            if chunk:
                self._write(chunk)
            else:  # the protocol is done with the connection (closing handshake over, or failed)
                if self.timer is not None:
                    self.timer.cancel()
                    self.timer = None
                self.conn.close()

    def _write(self, data: bytes) -> None:
        transport = self.conn.transport
        if transport is not None and not self.conn.closing:
            transport.write(data)

    def _http_answer(self, status: int, headers: list, body: bytes) -> None:
        req = self.req
        req.keep_alive = False
        req.respond(status, headers, body)
