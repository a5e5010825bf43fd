"""A blocking link from a client's own threads to its node, for the object plane's round trips.

`put()` asks the node for room before writing each object, and `get()` asks it to restore a
spilled one. Through the client's I/O loop such a request wakes the loop thread, which sends
it, wakes again for the reply and wakes the caller: two thread handoffs and two GIL hand-overs
per object (~0.4 ms here, against ~0.05 ms over this link, where the calling thread sends the
frame and reads the reply itself).

Only requests whose order against the loop's messages does not matter travel here:
RestoreObject is a question about an object already sealed; CreateObject precedes every other
message about its object (the writer seals it over the loop's connection after the reply), and
takes this link only while no free this process queued is still unsent (a put() right after a
del must reach the node after that del's FreeObjects, or it misses the freed segment it would
have reused). Frames are the rpc layer's (length-prefixed msgpack) and the link starts with the
same token handshake as any other connection to the node.
"""

from __future__ import annotations

import socket
import struct
import threading

from raylite._core import protocol as P
from raylite._core.transport.base import ConnectionBrokenError, HandshakeError, RemoteError

_LEN = struct.Struct(">I")


class BlockingNodeLink:
    def __init__(self, path: str, token: str, role: str, timeout_s: float = 60.0) -> None:
        self._path = path
        self._token = token
        self._role = role
        self._timeout_s = timeout_s
        self._sock: socket.socket | None = None
        self._lock = threading.Lock()
        self._next_id = 1

    def request(self, msg: P.Message) -> P.Message:
        """Send `msg` and wait for its reply (one caller at a time; others queue on the lock)."""
        with self._lock:
            try:
                sock = self._sock or self._open()
                rid = self._next_id
                self._next_id += 1
                self._send(sock, P.encode(msg, rid))
                while True:
                    reply, got = P.decode(self._recv(sock))
                    if got == -rid:
                        break
            except OSError as e:
                self._drop()
                raise ConnectionBrokenError(f"lost the link to the node at {self._path}: {e}") from e
        if isinstance(reply, P.ErrorReply):
            raise RemoteError(reply.error_type, reply.message)
        return reply

    def close(self) -> None:
        with self._lock:
            self._drop()

    def _open(self) -> socket.socket:
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        sock.settimeout(self._timeout_s)
        try:
            sock.connect(self._path)
            self._send(sock, P.encode(P.Hello(self._token, P.PROTOCOL_VERSION, self._role), 0))
            hello, _ = P.decode(self._recv(sock))
        except BaseException:
            sock.close()
            raise
        if not isinstance(hello, P.HelloReply) or not hello.ok:
            sock.close()
            raise HandshakeError(f"the node at {self._path} refused the link: {getattr(hello, 'error', hello)}")
        self._sock = sock
        return sock

    def _drop(self) -> None:
        if self._sock is not None:
            self._sock.close()
            self._sock = None

    @staticmethod
    def _send(sock: socket.socket, frame: bytes) -> None:
        sock.sendall(_LEN.pack(len(frame)) + frame)

    @staticmethod
    def _recv(sock: socket.socket) -> bytes:
        (n,) = _LEN.unpack(_recv_exactly(sock, _LEN.size))
        return _recv_exactly(sock, n)


def _recv_exactly(sock: socket.socket, n: int) -> bytes:
    buf = bytearray(n)
    view = memoryview(buf)
    got = 0
    while got < n:
        k = sock.recv_into(view[got:])
        if not k:
            raise ConnectionResetError("the node closed the link")
        got += k
    return bytes(buf)
