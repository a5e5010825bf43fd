"""Framed msgpack messages over asyncio streams (Unix or TCP), with request/reply matching.

Frame: 4-byte big-endian length, then the encoded message (see protocol.py).
Each connection starts with Hello(token); the accepting side checks the token
(constant-time) before it decodes anything else. Handlers are a table {message
class: callable}; a handler returns a reply message (or an awaitable of one) for
requests.

What a stranger can cost an accepting side (tests/security/): every length prefix is
checked before its frame is buffered -- at most HELLO_MAX_BYTES until the Hello passed,
Config.max_frame_bytes after; the handshake must finish within
Config.handshake_timeout_s (TLS included); and a listener holds at most
Config.max_pending_handshakes connections that have not authenticated (gate.py).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import socket
import struct
from collections.abc import Callable
from typing import Any

from raylite._core import protocol as P
from raylite._core.config import get_config
from raylite._core.transport.base import (
    ConnectionBrokenError,
    ConnectionClosedError,
    HandshakeError,
    RemoteError,
    parse_address,
)
from raylite._core.transport.gate import HELLO_MAX_BYTES, HandshakeGate, on_accept_failure
from raylite._core.transport.handshake import check_hello

log = logging.getLogger("raylite.rpc")

_LEN = struct.Struct(">I")

Handler = Callable[["Connection", P.Message, int], Any]


class Connection(asyncio.Protocol):
    """One framed connection. Use only from its event loop's thread."""

    def __init__(self, handlers: dict[type, Handler] | None = None, *, token: str = "",
                 server_side: bool = False, role: str = "", gate: HandshakeGate | None = None) -> None:
        self.handlers = handlers if handlers is not None else {}
        self.token = token
        self.server_side = server_side
        cfg = get_config()
        self.max_frame_bytes = cfg.max_frame_bytes
        self._handshake_timeout_s = cfg.handshake_timeout_s
        # until the handshake is done (either side) a frame may hold a Hello or its reply, no more
        self._frame_cap = HELLO_MAX_BYTES
        self._gate = gate
        self._holds_slot = False  # counted by the gate until authenticated or gone
        self._deadline: asyncio.TimerHandle | None = None
        self.role = role
        self.peer_role = ""
        self.transport: asyncio.Transport | None = None
        self.loop = asyncio.get_event_loop()
        self._buf = bytearray()
        self._pending: dict[int, asyncio.Future] = {}
        self._next_id = 1
        self._authenticated = not server_side
        self._closed_by_us = False
        self.closed = self.loop.create_future()
        self.on_close: list[Callable[[Connection], None]] = []
        self.context: dict[str, Any] = {}  # owner-defined per-connection state
        self._paused = False
        self._drain_waiters: list[asyncio.Future] = []
        self._out: list[bytes] = []  # frames queued in this loop iteration (see _write)

    # ------------------------------------------------------------ asyncio.Protocol
    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport  # type: ignore[assignment]
        if self.server_side:
            if self._gate is not None:
                self._holds_slot = True
                oldest = self._gate.admit(self, self._evict_from_any_thread)
                if oldest is not None:  # the listener was full: the oldest stranger goes
                    oldest._holds_slot = False  # type: ignore[attr-defined]
                    oldest.abort()  # type: ignore[attr-defined]
            self._deadline = self.loop.call_later(self._handshake_timeout_s, self._handshake_expired)
        sock = transport.get_extra_info("socket")
        if sock is not None and sock.family in (socket.AF_INET, socket.AF_INET6):
            try:
                sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            except OSError:
                pass

    def data_received(self, data: bytes) -> None:
        buf = self._buf
        buf += data
        pos = 0
        n = len(buf)
        while n - pos >= 4:
            (length,) = _LEN.unpack_from(buf, pos)
            if length > self._frame_cap:  # checked on the prefix: nothing of it is kept
                self._frame_too_large(length)
                return
            if n - pos - 4 < length:
                break
            if length < 65536:
                frame = bytes(buf[pos + 4:pos + 4 + length])
            else:  # one copy, not two (a slice, then bytes of it): large values pass here
                with memoryview(buf) as view:
                    frame = bytes(view[pos + 4:pos + 4 + length])
            pos += 4 + length
            self._on_frame(frame)
            if self.transport is None or self.transport.is_closing():
                break
        if pos:
            del buf[:pos]

    def connection_lost(self, exc: Exception | None) -> None:
        self._end_handshake()
        self._buf = bytearray()
        err: Exception
        if self._closed_by_us:
            err = ConnectionClosedError("connection closed by this side")
        else:
            err = ConnectionBrokenError(f"connection to {self.peer_role or 'peer'} lost")
            if exc is not None:
                err.__cause__ = exc
        for fut in self._pending.values():
            if not fut.done():
                fut.set_exception(err)
        self._pending.clear()
        for w in self._drain_waiters:
            if not w.done():
                w.set_result(None)
        if not self.closed.done():
            self.closed.set_result(err)
        for cb in self.on_close:
            try:
                cb(self)
            except Exception:  # noqa: BLE001
                log.exception("on_close callback failed")

    def pause_writing(self) -> None:
        self._paused = True

    def resume_writing(self) -> None:
        self._paused = False
        for w in self._drain_waiters:
            if not w.done():
                w.set_result(None)
        self._drain_waiters.clear()

    # ------------------------------------------------------------ frames
    def _on_frame(self, frame: bytes) -> None:
        if not self._authenticated:
            self._check_hello(frame)
            return
        try:
            msg, rid = P.decode(frame)
        except Exception:  # noqa: BLE001
            log.exception("undecodable frame; closing connection")
            self.close()
            return
        if rid < 0:  # a reply to one of our requests
            fut = self._pending.pop(-rid, None)
            if fut is not None and not fut.done():
                if isinstance(msg, P.ErrorReply):
                    fut.set_exception(RemoteError(msg.error_type, msg.message))
                else:
                    fut.set_result(msg)
            return
        handler = self.handlers.get(type(msg))
        if handler is None:
            if rid:
                self.send(P.ErrorReply("NotImplementedError", f"no handler for {type(msg).__name__}"), -rid)
            return
        try:
            result = handler(self, msg, rid)
        except Exception as e:  # noqa: BLE001
            self._reply_error(rid, e)
            return
        if result is None:
            return
        if asyncio.iscoroutine(result):
            task = self.loop.create_task(result)
            task.add_done_callback(lambda t, rid=rid: self._reply_from_task(t, rid))
        elif rid:
            self.send(result, -rid)

    def _reply_from_task(self, task: asyncio.Task, rid: int) -> None:
        if task.cancelled():
            if rid:
                self._reply_error(rid, asyncio.CancelledError("handler cancelled"))
            return
        exc = task.exception()
        if exc is not None:
            self._reply_error(rid, exc)
            return
        res = task.result()
        if rid and res is not None:
            self.send(res, -rid)

    def _reply_error(self, rid: int, exc: BaseException) -> None:
        if not isinstance(exc, (ConnectionBrokenError, ConnectionClosedError)):
            log.debug("handler error", exc_info=exc)
        if rid and not self.is_closed():
            self.send(P.ErrorReply(type(exc).__name__, str(exc)), -rid)

    def _check_hello(self, frame: bytes) -> None:
        """The first frame (at most HELLO_MAX_BYTES, plain msgpack: nothing in it can run code)."""
        error, role = check_hello(frame, self.token)
        if error:
            self._write(P.encode(P.HelloReply(False, error), 0))
            self.close()
            return
        self.peer_role = role
        self._authenticated = True
        self._handshake_done()
        self._write(P.encode(P.HelloReply(True), 0))

    def _handshake_done(self) -> None:
        """Authenticated (server) or accepted (client): full-size frames from now on."""
        self._frame_cap = self.max_frame_bytes
        self._end_handshake()

    def _end_handshake(self) -> None:
        if self._deadline is not None:
            self._deadline.cancel()
            self._deadline = None
        if self._holds_slot:
            self._holds_slot = False
            self._gate.release(self)  # type: ignore[union-attr]

    def _handshake_expired(self) -> None:
        self._deadline = None
        if self._authenticated or self.transport is None:
            return
        log.info("closing a connection from %s: no valid Hello within handshake_timeout_s=%ss",
                 self._peer_name(), self._handshake_timeout_s)
        self.abort()

    def _frame_too_large(self, length: int) -> None:
        if self._frame_cap == HELLO_MAX_BYTES:
            log.info("closing a connection from %s: its first frame announces %d bytes, a Hello is at most %d",
                     self._peer_name(), length, HELLO_MAX_BYTES)
        else:
            log.error("closing the connection to %s: it sent a frame of %d bytes, over max_frame_bytes=%d "
                      "(raise RAYLITE_MAX_FRAME_BYTES on every node if this is legitimate)",
                      self.peer_role or self._peer_name(), length, self._frame_cap)
        self._buf = bytearray()
        self.abort()

    def _peer_name(self) -> str:
        peer = self.transport.get_extra_info("peername") if self.transport is not None else None
        return str(peer) if peer else "a local peer"

    # ------------------------------------------------------------ sending
    def _write(self, data: bytes) -> None:
        """Queue one frame; small frames written in one loop iteration go out in one syscall.

        A burst of task pushes or replies would otherwise cost a send() each, which is
        most of the per-call CPU of a busy caller.
        """
        if len(data) < 65536:
            if not self._out:
                self.loop.call_soon(self._flush)
            self._out.append(_LEN.pack(len(data)) + data)
            return
        self._flush()
        self.transport.write(_LEN.pack(len(data)))
        self.transport.write(data)

    def _flush(self) -> None:
        if not self._out:
            return
        out, self._out = self._out, []
        if self.transport is not None and not self.transport.is_closing():
            self.transport.write(out[0] if len(out) == 1 else b"".join(out))

    def _encode(self, msg: P.Message, rid: int, size_hint: int = 0) -> bytes | memoryview:
        data = P.encode(msg, rid) if size_hint < (1 << 20) else P.encode_sized(msg, rid, size_hint)
        if len(data) > self.max_frame_bytes:
            raise ValueError(
                f"{type(msg).__name__} is {len(data)} bytes encoded, over the {self.max_frame_bytes}-byte frame "
                "limit every raylite node enforces (max_frame_bytes). Send large data through the object "
                "store (raylite.put) instead, or raise RAYLITE_MAX_FRAME_BYTES on every node.")
        return data

    def send(self, msg: P.Message, rid: int = 0, *, size_hint: int = 0) -> None:
        """`size_hint`: about how many bytes `msg` holds, when large (see P.encode_sized)."""
        if self.transport is None or self.transport.is_closing():
            raise ConnectionClosedError if self._closed_by_us else ConnectionBrokenError(
                f"connection to {self.peer_role or 'peer'} is closed")
        self._write(self._encode(msg, rid, size_hint))

    def request_future(self, msg: P.Message, *, size_hint: int = 0) -> asyncio.Future:
        rid = self._next_id
        self._next_id += 1
        fut = self.loop.create_future()
        if self.is_closed():
            fut.set_exception(ConnectionBrokenError(f"connection to {self.peer_role or 'peer'} is closed"))
            return fut
        data = self._encode(msg, rid, size_hint)
        self._pending[rid] = fut
        self._write(data)
        return fut

    async def request(self, msg: P.Message, timeout_s: float | None = None) -> P.Message:
        fut = self.request_future(msg)
        if timeout_s is None:
            return await fut
        return await asyncio.wait_for(fut, timeout_s)

    async def drain(self) -> None:
        if self._paused and not self.is_closed():
            w = self.loop.create_future()
            self._drain_waiters.append(w)
            await w

    def is_closed(self) -> bool:
        return self.transport is None or self.transport.is_closing() or self.closed.done()

    def close(self) -> None:
        self._closed_by_us = True
        if self.transport is not None:
            self._flush()
            self.transport.close()

    def _evict_from_any_thread(self) -> None:
        """The process-wide budget of strangers (gate.STRANGERS) chose this one to go."""
        def evict() -> None:  # connection_lost then frees its listener's slot
            if not self._authenticated:
                self.abort()
        with contextlib.suppress(RuntimeError):  # its loop already closed
            self.loop.call_soon_threadsafe(evict)

    def abort(self) -> None:
        """Drop the link at once without flushing (its peer is known dead or unreachable):
        pending requests fail with ConnectionBrokenError, as if the network broke it."""
        if self.transport is not None:
            self.transport.abort()


async def connect(address: str, handlers: dict[type, Handler] | None = None, *, token: str,
                  role: str, timeout_s: float = 10.0) -> Connection:
    """Open a connection and complete the handshake; raises HandshakeError if refused."""
    loop = asyncio.get_running_loop()
    kind, target = parse_address(address)
    factory = lambda: Connection(handlers, token=token, role=role)  # noqa: E731
    try:
        if kind == "unix":
            _, conn = await asyncio.wait_for(loop.create_unix_connection(factory, target), timeout_s)
        else:
            host, port = target  # type: ignore[misc]
            ctx = tls_contexts()[1]
            _, conn = await asyncio.wait_for(loop.create_connection(
                factory, host, port, ssl=ctx, server_hostname="" if ctx else None), timeout_s)
    except (OSError, asyncio.TimeoutError) as e:
        raise ConnectionBrokenError(f"cannot connect to {address}: {e}") from e
    conn.peer_role = "server"
    fut = loop.create_future()
    conn._pending[0] = fut  # the hello reply arrives with request id 0
    orig = conn._on_frame

    def first_frame(frame: bytes) -> None:
        conn._on_frame = orig  # type: ignore[method-assign]
        try:
            msg, _ = P.decode(frame)
        except Exception as e:  # noqa: BLE001
            fut.set_exception(HandshakeError(f"bad handshake reply from {address}: {e}"))
            return
        if not isinstance(msg, P.HelloReply) or not msg.ok:
            fut.set_exception(HandshakeError(
                f"{address} refused the connection: {getattr(msg, 'error', msg)}. "
                "Pass the cluster's token (--token, RAYLITE_TOKEN, or RAY_AUTH_TOKEN with RAY_AUTH_MODE=token) "
                "or check the raylite version."))
        else:
            conn._handshake_done()
            fut.set_result(msg)

    conn._on_frame = first_frame  # type: ignore[method-assign]
    conn._write(P.encode(P.Hello(token, P.PROTOCOL_VERSION, role), 0))
    try:
        await asyncio.wait_for(asyncio.shield(fut), timeout_s)
    except (ConnectionBrokenError, asyncio.TimeoutError) as e:
        conn.close()
        if isinstance(e, asyncio.TimeoutError):
            raise ConnectionBrokenError(f"no handshake reply from {address} within {timeout_s}s") from e
        if fut.done() and isinstance(fut.exception(), HandshakeError):
            raise fut.exception() from None
        raise HandshakeError(f"{address} closed the connection during the handshake (wrong cluster "
                             "token? or it requires TLS: set RAYLITE_TLS_CERT_FILE/_KEY_FILE)") from e
    finally:
        conn._pending.pop(0, None)
    return conn


# connections the kernel queues before accept() (clamped to net.core.somaxconn): a node whose
# loop is busy while hundreds of forked workers connect at once must not refuse them (EAGAIN),
# and real clients need room behind a flood of connections that never authenticate
LISTEN_BACKLOG = 4096


async def listen(address: str, handlers: dict[type, Handler], *, token: str,
                 on_connect: Callable[[Connection], None] | None = None,
                 sock: socket.socket | None = None, backlog: int = LISTEN_BACKLOG) -> asyncio.AbstractServer:
    """Serve `handlers` at `address` ('unix:///path' or 'tcp://host:port'), or on an
    already bound TCP `sock` (its port is known before the loop runs)."""
    loop = asyncio.get_running_loop()
    if loop.get_exception_handler() is None:  # accept out of descriptors: strangers make room
        loop.set_exception_handler(on_accept_failure)
    kind, target = parse_address(address)
    cfg = get_config()
    gate = HandshakeGate(f"listener {address}", cfg.max_pending_handshakes)

    def factory() -> Connection:
        conn = Connection(handlers, token=token, server_side=True, gate=gate)
        if on_connect is not None:
            on_connect(conn)
        return conn

    ssl_ctx = tls_contexts()[0]
    # the TLS handshake comes before connection_made: it gets the same deadline as the Hello
    tls = {"ssl": ssl_ctx, "ssl_handshake_timeout": cfg.handshake_timeout_s} if ssl_ctx is not None else {}
    if sock is not None:
        return await loop.create_server(factory, sock=sock, backlog=backlog, **tls)
    if kind == "unix":
        path = str(target)
        if os.path.exists(path):
            os.unlink(path)
        server = await loop.create_unix_server(factory, path, backlog=backlog)
        os.chmod(path, 0o600)
    else:
        host, port = target  # type: ignore[misc]
        server = await loop.create_server(factory, host, port, reuse_address=True, backlog=backlog, **tls)
    return server



_TLS: tuple | None = None


def tls_contexts() -> tuple:
    """(server, client) SSL contexts for TCP links, or (None, None) when TLS is off.

    Built once from Config (tls_cert_file, tls_key_file, tls_ca_file). Both sides present
    the cluster certificate and verify the peer's against the CA, so TLS also authenticates;
    host names are not checked (nodes are addressed by IP). Unix sockets never use TLS.
    """
    global _TLS
    if _TLS is None:
        from raylite._core.config import get_config

        cfg = get_config()
        if not cfg.tls_cert_file:
            _TLS = (None, None)
        else:
            import ssl

            ca = cfg.tls_ca_file or cfg.tls_cert_file
            server = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH, cafile=ca)
            server.load_cert_chain(cfg.tls_cert_file, cfg.tls_key_file or None)
            server.verify_mode = ssl.CERT_REQUIRED
            client = ssl.create_default_context(ssl.Purpose.SERVER_AUTH, cafile=ca)
            client.check_hostname = False
            client.load_cert_chain(cfg.tls_cert_file, cfg.tls_key_file or None)
            _TLS = (server, client)
    return _TLS
