"""The direct proxy/handle <-> replica channel: authenticated, pipelined, length-prefixed frames.

Why: a Core actor call costs several messages and a scheduler hop; Serve's hot path must be ONE
message each way. Every replica listens on a Unix socket (same node; mode 0600 in the session's
private `sockets` directory) and a TCP port (other nodes; TLS where the cluster uses TLS) and
advertises both to the controller; routers keep one persistent connection per replica and
pipeline requests over it, matching replies by request id.

Security: a replica's port is reachable from the network, so nothing a stranger sends is decoded
beyond a bounded first frame, and no frame can run code when decoded.
- Handshake, once per connection, mutual and challenge-response (the token never crosses the
  wire; a process squatting on a dead replica's port cannot pass as the replica either):
      replica -> client   ("challenge", WIRE_VERSION, nonce_r)                      on connect
      client  -> replica  ("hello", nonce_c, HMAC(token, "client" + nonce_r + nonce_c))
      replica -> client   ("welcome", HMAC(token, "replica" + nonce_c + nonce_r))   or ("refused", why)
  The replica accepts the hello only as the first frame, at most HELLO_MAX_BYTES long, within
  `handshake_timeout_s`, and compares in constant time; a listener holds at most
  `max_pending_handshakes` connections that have not authenticated (`HandshakeGate`).
- Every length prefix is checked before its frame is buffered (`max_frame_bytes` once
  authenticated).
- Envelopes are msgpack: plain data only. User payloads (handle-call arguments, results,
  exceptions, streamed items) are cloudpickled bytes INSIDE an envelope, unpickled only by an
  authenticated end that needs them. HTTP requests and responses are plain data throughout.
The settings come from `raylite.experimental.get_channel_security()` (the cluster's token, TLS
contexts, socket directory and limits).

Frames after the handshake (msgpack arrays, decoded as tuples):
  client -> replica   (REQ, rid, kind, meta, payload)   kind: KIND_HTTP | KIND_CALL | KIND_WS
                      (CANCEL, rid)
                      (MSG, rid, item)   a later message of a running request (KIND_WS: see ws_session.py)
  replica -> client   (rid, code, payload, queue_len)    code: R_* below (R_STARTED: payload None)
`queue_len` piggybacks the replica's ongoing-request count on every reply, so routers keep a
fresh cached queue length without probing.
"""

from __future__ import annotations

import asyncio
import hashlib
import hmac
import logging
import os
import socket
import struct
import time
from collections.abc import Callable
from typing import Any

import msgpack

log = logging.getLogger("raylite.serve")

REQ = 0
CANCEL = 1
MSG = 2

KIND_HTTP = 0
KIND_CALL = 1
KIND_WS = 2       # a WebSocket: ASGI websocket messages both ways until one side closes
ACK_FIRST = 0x10  # or'ed into a kind: acknowledge (R_STARTED) before user code, whatever the
                  # handler's speed -- set on a request resent after R_LOST (see R_LOST)

R_OK = 0          # payload: cloudpickled result (call) or (status, headers, body) (http)
R_ERR = 1         # payload: cloudpickled exception
R_START = 2       # http: (status, headers); a body stream follows
R_CHUNK = 3       # http body chunk (bytes) / pickled generator item
R_END = 4         # end of a stream
R_REJECT = 5      # replica is shutting down: retry elsewhere
R_STARTED = 6     # the request is about to enter user code (on the wire before it does): if the
                  # replica dies, requests without it are retried elsewhere (see replica._start)
R_CREDIT = 7      # ws: the app consumed this many of the client's messages (flow control)
R_LOST = 8        # never on the wire: a client's verdict on a request its replica died without
                  # acknowledging. It may have been running (fast handlers are not acknowledged),
                  # so it is resent once more with ACK_FIRST: a request that kills its replica
                  # runs at most twice and then fails, instead of killing every replica in turn

# a flood of connections fills the kernel's accept queue before the loop drains it; a full queue
# refuses a Unix-socket connect outright (EAGAIN), so real clients need room behind a flood
LISTEN_BACKLOG = 1024

WIRE_VERSION = 1
HELLO_MAX_BYTES = 1024  # the challenge, the hello and the welcome are each far smaller
_NONCE_BYTES = 32

_LEN = struct.Struct("!I")


class FrameTooLarge(ValueError):
    """A frame to send is over the cluster's max_frame_bytes; the peer would drop the link."""


class HandshakeRefused(ConnectionError):
    """The other end did not prove it knows the cluster token (or speaks another wire version)."""


def encode(obj: Any) -> bytes:
    """One frame: length prefix + msgpack (plain data only: bytes, str, numbers, tuples, lists)."""
    data = msgpack.packb(obj, use_bin_type=True)
    return _LEN.pack(len(data)) + data


def _mac(token: bytes, side: bytes, first: bytes, second: bytes) -> bytes:
    return hmac.new(token, side + first + second, hashlib.sha256).digest()


class HandshakeGate:
    """One listener's connections that have not authenticated, oldest first. Past `limit` the
    oldest is closed to make room (a real client authenticates within milliseconds of its
    connect, so it is never the oldest under a flood of silent connections), with a log line
    at most every 10 s. Used on the listener's event loop only."""

    def __init__(self, name: str, limit: int) -> None:
        self.name = name
        self.limit = max(1, int(limit))
        self.evicted = 0
        self._pending: dict[Any, None] = {}
        self._last_log = float("-inf")

    @property
    def pending(self) -> int:
        return len(self._pending)

    def admit(self, conn: Any) -> Any:
        """Count `conn`; returns the connection the caller must close (the oldest) when full."""
        self._pending[conn] = None
        if len(self._pending) <= self.limit:
            return None
        oldest = next(iter(self._pending))
        del self._pending[oldest]
        self.evicted += 1
        now = time.monotonic()
        if now - self._last_log >= 10.0:
            self._last_log = now
            log.warning("%s: %d connections have not completed the handshake (max_pending_handshakes); "
                        "closed the oldest to make room (%d so far)", self.name, len(self._pending), self.evicted)
        return oldest

    def release(self, conn: Any) -> None:
        self._pending.pop(conn, None)


class FrameProtocol(asyncio.Protocol):
    """Splits the byte stream into frames; after the handshake hands each decoded tuple to `on_frame`.

    Subclasses run the handshake (`_handshake_frame`); until it succeeds a frame may be at most
    HELLO_MAX_BYTES, after it `max_frame_bytes`, both checked on the length prefix.
    """

    def __init__(self, on_frame: Callable[[FrameProtocol, Any], None],
                 on_lost: Callable[[FrameProtocol, BaseException | None], None] | None = None, *,
                 max_frame_bytes: int = 1024**3) -> None:
        self.on_frame = on_frame
        self.on_lost = on_lost
        self.transport: asyncio.Transport | None = None
        self._buf = bytearray()
        self.closed = False
        self.authenticated = False
        self.max_frame_bytes = max_frame_bytes
        self._cap = HELLO_MAX_BYTES
        self._out: list[bytes] = []
        self._loop: asyncio.AbstractEventLoop | None = None
        self._pack = msgpack.Packer(use_bin_type=True).pack

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport  # type: ignore[assignment]
        self._loop = asyncio.get_running_loop()
        sock = transport.get_extra_info("socket")
        if sock is not None:
            try:
                if sock.family in (socket.AF_INET, socket.AF_INET6):
                    sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            except OSError:
                pass

    def data_received(self, data: bytes) -> None:
        buf = self._buf
        if not buf and len(data) >= 4:
            # fast path: whole frames in this chunk, no copying into the buffer
            view = memoryview(data)
            pos, end = 0, len(data)
            while end - pos >= 4:
                (n,) = _LEN.unpack_from(data, pos)
                if n > self._cap:
                    return self._too_large(n)
                if end - pos - 4 < n:
                    break
                self._deliver(view[pos + 4:pos + 4 + n])
                pos += 4 + n
                if self.closed:
                    return
            if pos < end:
                buf += data[pos:]
            return
        buf += data
        pos = 0
        end = len(buf)
        while end - pos >= 4:
            (n,) = _LEN.unpack_from(buf, pos)
            if n > self._cap:
                return self._too_large(n)
            if end - pos - 4 < n:
                break
            self._deliver(bytes(buf[pos + 4:pos + 4 + n]))
            pos += 4 + n
            if self.closed:
                return
        if pos:
            del buf[:pos]

    def _deliver(self, data: Any) -> None:
        if not self.authenticated:
            self._handshake_frame(bytes(data))
            return
        try:
            msg = msgpack.unpackb(data, use_list=False, raw=False)
        except Exception:  # noqa: BLE001 - an authenticated peer sent garbage: a bug, not an attack
            log.exception("undecodable frame on Serve's direct channel; closing the connection")
            self.abort()
            return
        self.on_frame(self, msg)

    def _handshake_frame(self, data: bytes) -> None:
        raise NotImplementedError

    def _authenticated(self) -> None:
        self.authenticated = True
        self._cap = self.max_frame_bytes

    def _too_large(self, n: int) -> None:
        if self.authenticated:
            log.error("Serve's direct channel: the peer sent a frame of %d bytes, over max_frame_bytes=%d "
                      "(RAYLITE_MAX_FRAME_BYTES); closing the connection", n, self._cap)
        else:
            log.info("Serve's direct channel: closing a connection whose handshake frame announces %d "
                     "bytes (at most %d)", n, self._cap)
        self._buf = bytearray()
        self.abort()

    def _send_raw(self, obj: Any) -> None:
        data = self._pack(obj)
        self.transport.write(_LEN.pack(len(data)) + data)  # type: ignore[union-attr]

    def send(self, obj: Any) -> None:
        """Queue a frame; all frames queued in one loop iteration leave in one write.

        Why: on a busy machine every socket write can wake (and yield the core to) the peer;
        one write per iteration instead of one per request cut the proxy's CPU per request.
        """
        if self.transport is None or self.closed:
            return
        data = self._pack(obj)
        if len(data) > self.max_frame_bytes:
            raise FrameTooLarge(f"a frame of {len(data)} bytes is over the cluster's max_frame_bytes="
                                f"{self.max_frame_bytes} (RAYLITE_MAX_FRAME_BYTES); send large data "
                                "through the object store (raylite.put) and pass the reference")
        out = self._out
        if not out:
            self._loop.call_soon(self._flush)  # type: ignore[union-attr]
        out.append(_LEN.pack(len(data)))
        out.append(data)

    def _flush(self) -> None:
        out, self._out = self._out, []
        if out and self.transport is not None and not self.closed:
            self.transport.write(b"".join(out))

    def connection_lost(self, exc: BaseException | None) -> None:
        self.closed = True
        self._buf = bytearray()
        if self.on_lost is not None:
            self.on_lost(self, exc)

    def close(self) -> None:
        self.closed = True
        if self.transport is not None:
            self.transport.close()

    def abort(self) -> None:
        self.closed = True
        if self.transport is not None:
            self.transport.abort()


class ServerProtocol(FrameProtocol):
    """The replica's end: challenges the client and parses nothing else until it answered."""

    def __init__(self, token: bytes, gate: HandshakeGate, on_frame: Callable[[FrameProtocol, Any], None],
                 on_lost: Callable[[FrameProtocol, BaseException | None], None] | None = None, *,
                 handshake_timeout_s: float = 5.0, max_frame_bytes: int = 1024**3) -> None:
        super().__init__(on_frame, on_lost, max_frame_bytes=max_frame_bytes)
        self._token = token
        self._gate = gate
        self._holds_slot = False
        self._timeout_s = handshake_timeout_s
        self._timer: asyncio.TimerHandle | None = None
        self._nonce = b""

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        super().connection_made(transport)
        self._holds_slot = True
        oldest = self._gate.admit(self)
        if oldest is not None:
            oldest._holds_slot = False
            oldest.abort()
        self._timer = self._loop.call_later(self._timeout_s, self._expired)  # type: ignore[union-attr]
        self._nonce = os.urandom(_NONCE_BYTES)
        self._send_raw(("challenge", WIRE_VERSION, self._nonce))

    def _handshake_frame(self, data: bytes) -> None:
        try:
            tag, nonce_c, mac = msgpack.unpackb(data, use_list=False, raw=False)
            ok = (tag == "hello" and isinstance(nonce_c, bytes) and isinstance(mac, bytes)
                  and len(nonce_c) == _NONCE_BYTES and bool(self._token)
                  and hmac.compare_digest(mac, _mac(self._token, b"client", self._nonce, nonce_c)))
        except Exception:  # noqa: BLE001 - not a hello at all
            ok = False
        if not ok:
            self._send_raw(("refused", "wrong or missing cluster token (or another raylite version)"))
            self._end_handshake()
            self.close()
            return
        self._end_handshake()
        self._authenticated()
        self._send_raw(("welcome", _mac(self._token, b"replica", nonce_c, self._nonce)))

    def _end_handshake(self) -> None:
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        if self._holds_slot:
            self._holds_slot = False
            self._gate.release(self)

    def _expired(self) -> None:
        self._timer = None
        if not self.authenticated:
            log.info("Serve's direct channel: closing a connection that did not authenticate within %ss",
                     self._timeout_s)
            self.abort()

    def connection_lost(self, exc: BaseException | None) -> None:
        self._end_handshake()
        if self.authenticated:
            super().connection_lost(exc)
        else:  # nothing of it reached the replica
            self.closed = True
            self._buf = bytearray()


class ClientProtocol(FrameProtocol):
    """A proxy's or handle's end: answers the replica's challenge and checks its proof.
    `ready` resolves once both sides are authenticated; nothing is sent before."""

    def __init__(self, token: bytes, on_frame: Callable[[FrameProtocol, Any], None],
                 on_lost: Callable[[FrameProtocol, BaseException | None], None] | None = None, *,
                 max_frame_bytes: int = 1024**3) -> None:
        super().__init__(on_frame, on_lost, max_frame_bytes=max_frame_bytes)
        self._token = token
        self._nonce = b""
        self._challenge = b""
        self.ready: asyncio.Future | None = None

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        super().connection_made(transport)
        self.ready = self._loop.create_future()  # type: ignore[union-attr]
        # a caller that gave up waiting (timeout) must not leave an unretrieved exception behind
        self.ready.add_done_callback(lambda f: f.cancelled() or f.exception())

    def _handshake_frame(self, data: bytes) -> None:
        try:
            self._answer(msgpack.unpackb(data, use_list=False, raw=False))
        except Exception:  # noqa: BLE001 - not our protocol at all
            self._fail("the replica's handshake frame is not valid")

    def _answer(self, msg: tuple) -> None:
        tag = msg[0]
        if tag == "challenge" and not self._challenge:
            if msg[1] != WIRE_VERSION or not isinstance(msg[2], bytes):
                return self._fail(f"the replica speaks wire version {msg[1]}, this process {WIRE_VERSION}: "
                                  "install the same raylite version on every node")
            self._challenge = msg[2]
            self._nonce = os.urandom(_NONCE_BYTES)
            self._send_raw(("hello", self._nonce, _mac(self._token, b"client", self._challenge, self._nonce)))
        elif tag == "welcome" and self._challenge and isinstance(msg[1], bytes) and hmac.compare_digest(
                msg[1], _mac(self._token, b"replica", self._nonce, self._challenge)):
            self._authenticated()
            if not self.ready.done():  # type: ignore[union-attr]
                self.ready.set_result(None)  # type: ignore[union-attr]
        elif tag == "refused":
            self._fail(f"the replica refused this process: {msg[1] if len(msg) > 1 else ''}")
        else:
            self._fail("the peer did not prove it knows the cluster token (is it really the replica?)")

    def _fail(self, why: str) -> None:
        if self.ready is not None and not self.ready.done():
            self.ready.set_exception(HandshakeRefused(why))
        self.abort()

    def connection_lost(self, exc: BaseException | None) -> None:
        if self.ready is not None and not self.ready.done():
            self.ready.set_exception(HandshakeRefused("the replica closed the connection during the handshake"))
        super().connection_lost(exc)
