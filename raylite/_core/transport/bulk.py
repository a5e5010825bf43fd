"""Bulk object transfer between nodes: one raw TCP stream per pull, off the event loop.

Control messages and object bytes never share a connection, so a 1 GB transfer cannot
delay a lease request or a heartbeat. The sender streams the object's file with
sendfile (no copy in user space); the receiver reads straight into the mapped
destination file (one copy, kernel to page cache). Authenticated connections are served
on plain threads, one per connection (each is a peer node's BulkClient).

Request (fixed layout, checked before anything else is read or parsed):
  u16 token length | token bytes | 20-byte object id | u64 offset | u64 length
Reply: i64 total size of the object (-1: not here; -2: bad token), then the bytes of
[offset, offset + length) (length 0: to the end).

Strangers cost no thread: ONE handshake thread accepts every connection and runs its TLS
handshake and token read non-blocking under a selector, with the handshake deadline
(Config.handshake_timeout_s) and at most Config.max_pending_handshakes connections in
that state (gate.py); only a connection that presented the token gets a serving thread.
"""

from __future__ import annotations

import contextlib
import hmac
import logging
import mmap
import os
import selectors
import socket
import ssl
import struct
import threading
import time
from collections.abc import Callable

from raylite._core.config import get_config
from raylite._core.transport.gate import HandshakeGate
from raylite._core.transport.rpc import tls_contexts

log = logging.getLogger("raylite.bulk")

_HEAD = struct.Struct(">H")
_TAIL = struct.Struct(">20sQQ")
_REPLY = struct.Struct(">q")
NOT_FOUND = -1
BAD_TOKEN = -2
MAX_TOKEN_BYTES = 1024


class BulkRefused(ConnectionError):
    """The peer refused the pull (wrong token)."""


class _Handshake:
    """A connection that has not presented the token yet (owned by the handshake thread)."""

    __slots__ = ("conn", "fd", "deadline", "buf", "tls_done", "events")

    def __init__(self, conn: socket.socket, deadline: float, tls_done: bool) -> None:
        self.conn = conn
        self.fd = conn.fileno()
        self.deadline = deadline
        self.buf = bytearray()
        self.tls_done = tls_done
        self.events = selectors.EVENT_READ


class BulkServer:
    """Serves object files to other nodes; `locate(object_id)` returns a path or None."""

    def __init__(self, ip: str, token: str, locate: Callable[[bytes], str | None]) -> None:
        cfg = get_config()
        self._token = token.encode()
        self._locate = locate
        self._tls = tls_contexts()[0]
        self._timeout_s = cfg.handshake_timeout_s
        self._sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        self._sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self._sock.bind((ip, 0))
        self._sock.listen(1024)
        self._sock.setblocking(False)
        self.address = f"{ip}:{self._sock.getsockname()[1]}"
        self.gate = HandshakeGate(f"object transfer {self.address}", cfg.max_pending_handshakes)
        self._pending: dict[int, _Handshake] = {}  # fd -> state
        self._sel = selectors.DefaultSelector()
        self._wake_r, self._wake_w = socket.socketpair()
        self._wake_r.setblocking(False)
        self._sel.register(self._sock, selectors.EVENT_READ, "accept")
        self._sel.register(self._wake_r, selectors.EVENT_READ, "wake")
        self._closed = False
        threading.Thread(target=self._handshake_loop, name="raylite-bulk", daemon=True).start()

    def close(self) -> None:
        self._closed = True
        with contextlib.suppress(OSError):
            self._wake_w.send(b"x")

    # ------------------------------------------------------------ the handshake thread
    def _handshake_loop(self) -> None:
        try:
            while not self._closed:
                wait = None
                if self._pending:  # in accept order, so the first one expires first
                    wait = max(0.0, next(iter(self._pending.values())).deadline - time.monotonic())
                for key, _ in self._sel.select(wait):
                    if key.data == "accept":
                        self._accept()
                    elif key.data != "wake":
                        self._advance(key.data)
                self._expire()
        finally:
            self._shutdown()

    def _shutdown(self) -> None:
        for h in list(self._pending.values()):
            self._drop(h)
        for s in (self._sock, self._wake_r, self._wake_w):
            with contextlib.suppress(OSError):
                s.close()
        self._sel.close()

    def _accept(self) -> None:
        while True:
            try:
                conn, _ = self._sock.accept()
            except (BlockingIOError, InterruptedError):
                return
            except OSError:
                return
            conn.setblocking(False)
            tls_done = self._tls is None
            if not tls_done:
                try:
                    conn = self._tls.wrap_socket(conn, server_side=True, do_handshake_on_connect=False)
                except (OSError, ValueError):
                    conn.close()
                    continue
            h = _Handshake(conn, time.monotonic() + self._timeout_s, tls_done)
            oldest = self.gate.admit(h)
            if oldest is not None:  # full: the oldest stranger goes
                self._drop(oldest)  # type: ignore[arg-type]
            self._pending[h.fd] = h
            self._sel.register(conn, selectors.EVENT_READ, h)
            self._advance(h)

    def _advance(self, h: _Handshake) -> None:
        """Move one handshake on as far as the bytes that arrived allow."""
        try:
            if not h.tls_done:
                h.conn.do_handshake()  # type: ignore[attr-defined]
                h.tls_done = True
            while True:
                need = _HEAD.size if len(h.buf) < _HEAD.size else _HEAD.size + _HEAD.unpack_from(h.buf)[0]
                if len(h.buf) >= _HEAD.size and need - _HEAD.size > MAX_TOKEN_BYTES:
                    return self._refuse(h)
                if len(h.buf) >= need:
                    break
                chunk = h.conn.recv(need - len(h.buf))
                if not chunk:
                    return self._drop(h)
                h.buf += chunk
        except ssl.SSLWantReadError:
            return self._wait_for(h, selectors.EVENT_READ)
        except ssl.SSLWantWriteError:
            return self._wait_for(h, selectors.EVENT_WRITE)
        except (BlockingIOError, InterruptedError):
            return self._wait_for(h, selectors.EVENT_READ)
        except (OSError, ValueError):
            return self._drop(h)
        if not hmac.compare_digest(bytes(h.buf[_HEAD.size:]), self._token):
            return self._refuse(h)
        self._forget(h)
        conn = h.conn
        try:
            conn.setblocking(True)
        except OSError:
            conn.close()
            return
        threading.Thread(target=self._serve, args=(conn,), name="raylite-bulk-serve", daemon=True).start()

    def _wait_for(self, h: _Handshake, events: int) -> None:
        if events != h.events:
            h.events = events
            self._sel.modify(h.conn, events, h)

    def _refuse(self, h: _Handshake) -> None:
        with contextlib.suppress(OSError, ValueError):
            h.conn.send(_REPLY.pack(BAD_TOKEN))  # 8 bytes: fits any empty send buffer
        self._drop(h)

    def _expire(self) -> None:
        now = time.monotonic()
        late = []
        for h in self._pending.values():
            if h.deadline > now:
                break
            late.append(h)
        for h in late:
            log.info("object transfer: closing a connection that did not present the token within %ss",
                     self._timeout_s)
            self._drop(h)

    def _forget(self, h: _Handshake) -> None:
        """Out of the handshake: unregister and free the gate slot (the socket stays open)."""
        with contextlib.suppress(KeyError, ValueError, OSError):
            self._sel.unregister(h.conn)
        if self._pending.get(h.fd) is h:
            del self._pending[h.fd]
        self.gate.release(h)

    def _drop(self, h: _Handshake) -> None:
        self._forget(h)
        with contextlib.suppress(OSError):
            h.conn.close()

    # ------------------------------------------------------------ serving threads (authenticated)
    def _serve(self, conn: socket.socket) -> None:
        with conn:
            try:
                conn.settimeout(None)
                while not self._closed:  # one connection serves many pulls, one after another
                    object_id, offset, length = _TAIL.unpack(_recv_exact(conn, _TAIL.size))
                    self._send_object(conn, object_id, offset, length)
            except (OSError, ConnectionError):
                return

    def _send_object(self, conn: socket.socket, object_id: bytes, offset: int, length: int) -> None:
        path = self._locate(object_id)
        try:
            f = open(path, "rb") if path else None
        except OSError:
            f = None
        if f is None:
            conn.sendall(_REPLY.pack(NOT_FOUND))
            return
        with f:
            total = os.fstat(f.fileno()).st_size
            conn.sendall(_REPLY.pack(total))
            count = (total - offset) if not length else min(length, total - offset)
            if count > 0:
                conn.sendfile(f, offset, count)


class BulkClient:
    """One authenticated connection to a peer's BulkServer; pulls run one at a time."""

    def __init__(self, address: str, token: str, timeout_s: float = 30.0) -> None:
        host, port = address.rsplit(":", 1)
        self._sock = socket.create_connection((host, int(port)), timeout=min(timeout_s, 10.0))
        self._sock.settimeout(None)  # blocking recv_into: no poll() before every read
        ctx = tls_contexts()[1]
        if ctx is not None:  # sendfile degrades to plain sends under TLS
            self._sock = ctx.wrap_socket(self._sock, server_hostname=None)
        tok = token.encode()
        self._sock.sendall(_HEAD.pack(len(tok)) + tok)
        self._lock = threading.Lock()

    def close(self) -> None:
        """Also from another thread: shutdown() wakes a recv blocked on a dead link."""
        with contextlib.suppress(OSError):
            self._sock.shutdown(socket.SHUT_RDWR)
        with contextlib.suppress(OSError):
            self._sock.close()

    def pull(self, object_id: bytes, dest_path: str) -> int | None:
        """Copy the whole object into dest_path; None if the peer does not have it."""
        with self._lock:
            s = self._sock
            s.sendall(_TAIL.pack(object_id, 0, 0))
            (total,) = _REPLY.unpack(_recv_exact(s, _REPLY.size))
            if total == BAD_TOKEN:
                raise BulkRefused("the peer node refused the transfer: wrong or missing cluster token")
            if total < 0:
                return None
            fd = os.open(dest_path, os.O_CREAT | os.O_RDWR, 0o600)  # a recycled segment keeps its pages
            try:
                if total:
                    os.ftruncate(fd, total)
                    # pages fault in as recv copies into them (pre-populating measured no faster)
                    with mmap.mmap(fd, total) as m:
                        view = memoryview(m)
                        got = 0
                        while got < total:
                            n = s.recv_into(view[got:], total - got)
                            if not n:
                                raise ConnectionError("the peer node closed the transfer midway")
                            got += n
                        view.release()
            finally:
                os.close(fd)
            return total


def _recv_exact(sock: socket.socket, n: int) -> bytes:
    buf = bytearray()
    while len(buf) < n:
        chunk = sock.recv(n - len(buf))
        if not chunk:
            raise ConnectionError("connection closed")
        buf += chunk
    return bytes(buf)
