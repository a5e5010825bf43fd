"""Bulk object transfer between nodes: one raw TCP stream per pull, off the event loop.

Control messages and object bytes never share a connection, so a 1 GB transfer cannot
delay a lease request or a heartbeat. The sender streams the object's file with
sendfile (no copy in user space); the receiver reads straight into the mapped
destination file (one copy, kernel to page cache). Both sides run on plain threads.

Request (fixed layout, checked before anything else is read or parsed):
  u16 token length | token bytes | 20-byte object id | u64 offset | u64 length
Reply: i64 total size of the object (-1: not here; -2: bad token), then the bytes of
[offset, offset + length) (length 0: to the end).
"""

from __future__ import annotations

import contextlib
import hmac
import logging
import mmap
import os
import socket
import struct
import threading
from collections.abc import Callable

log = logging.getLogger("raylite.bulk")

_HEAD = struct.Struct(">H")
_TAIL = struct.Struct(">20sQQ")
_REPLY = struct.Struct(">q")
NOT_FOUND = -1
BAD_TOKEN = -2


class BulkRefused(ConnectionError):
    """The peer refused the pull (wrong token)."""


class BulkServer:
    """Serves object files to other nodes; `locate(object_id)` returns a path or None."""

    def __init__(self, ip: str, token: str, locate: Callable[[bytes], str | None]) -> None:
        self._token = token.encode()
        self._locate = locate
        self._sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        self._sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self._sock.bind((ip, 0))
        self._sock.listen(64)
        self.address = f"{ip}:{self._sock.getsockname()[1]}"
        self._closed = False
        threading.Thread(target=self._accept_loop, name="raylite-bulk", daemon=True).start()

    def close(self) -> None:
        self._closed = True
        with contextlib.suppress(OSError):
            self._sock.shutdown(socket.SHUT_RDWR)
        with contextlib.suppress(OSError):
            self._sock.close()

    def _accept_loop(self) -> None:
        while not self._closed:
            try:
                conn, _ = self._sock.accept()
            except OSError:
                return
            threading.Thread(target=self._serve, args=(conn,), daemon=True).start()

    def _wrap(self, conn: socket.socket) -> socket.socket:
        from raylite._core.transport.rpc import tls_contexts

        ctx = tls_contexts()[0]
        return ctx.wrap_socket(conn, server_side=True) if ctx is not None else conn

    def _serve(self, conn: socket.socket) -> None:
        with conn:
            try:
                conn.settimeout(30)
                conn = self._wrap(conn)
                (n,) = _HEAD.unpack(_recv_exact(conn, _HEAD.size))
                token = _recv_exact(conn, n) if n <= 1024 else b""
                if n > 1024 or not hmac.compare_digest(token, self._token):
                    conn.sendall(_REPLY.pack(BAD_TOKEN))
                    return
                conn.settimeout(None)
                while True:  # one connection serves many pulls, one after another
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
        from raylite._core.transport.rpc import tls_contexts

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
