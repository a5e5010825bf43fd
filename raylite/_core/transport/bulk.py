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
import logging
import mmap
import os
import socket
import struct
import threading
from collections.abc import Callable

from raylite._core.config import get_config
from raylite._core.transport.handshake import TokenListener, token_matches
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


def _refuse(conn: socket.socket) -> None:
    conn.send(_REPLY.pack(BAD_TOKEN))  # 8 bytes: fits any empty send buffer


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
        self.address = f"{ip}:{self._sock.getsockname()[1]}"
        self._closed = False
        self._handshakes = TokenListener(
            f"object transfer {self.address}", [(self._sock, True)], self._check,
            on_ready=self._start_serving, on_refused=_refuse, timeout_s=self._timeout_s,
            limit=cfg.max_pending_handshakes, tls=self._tls)
        self.gate = self._handshakes.gate

    def close(self) -> None:
        self._closed = True
        self._handshakes.close()

    def _check(self, buf: bytearray) -> int | bool:
        """u16 token length (at most MAX_TOKEN_BYTES), then the token."""
        if len(buf) < _HEAD.size:
            return _HEAD.size
        (size,) = _HEAD.unpack_from(buf)
        if size > MAX_TOKEN_BYTES:
            return False
        if len(buf) < _HEAD.size + size:
            return _HEAD.size + size
        return token_matches(bytes(buf[_HEAD.size:]), self._token)

    def _start_serving(self, conn: socket.socket, _hello: bytes) -> None:
        threading.Thread(target=self._serve, args=(conn,), name="raylite-bulk-serve", daemon=True).start()

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
