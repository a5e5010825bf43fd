"""Channels: pre-connected, authenticated byte pipes between two processes, for compiled graphs.

A compiled graph (`dag.experimental_compile()`) sends every value of every execution over
channels set up once, instead of submitting a task per call. One process listens
(`ChannelListener`), the other connects (`connect`); the resulting `Endpoint` carries frames
both ways. A frame is a small header `(payload length, channel id, status)` followed by the
payload, so several logical channels share one connection and a reader can ask for one
channel while frames of others are set aside (`Endpoint.recv`).

Security: a listener binds a Unix socket in the abstract namespace (same node) and a TCP
socket on the node's address (other nodes). Before it decodes or buffers anything from a
peer, the peer must send the cluster token, compared in constant time; a peer that does not
within `HANDSHAKE_TIMEOUT_S` is dropped. Frames are bounded by `MAX_FRAME_BYTES`.

Blocking, thread-based I/O on purpose: the sender and receiver of a compiled graph each have a
thread that does nothing else, and a blocking `recv` wakes with one system call, which is
what makes a compiled execution cheaper than a task submission through the event loop.
"""

from __future__ import annotations

import collections
import contextlib
import hmac
import os
import selectors
import socket
import struct
import threading
import time
from typing import Any

HEADER = struct.Struct("!IIB")  # payload length, channel id, status
HELLO = struct.Struct("!H")  # length of the peer id that follows the token
HANDSHAKE_TIMEOUT_S = 5.0
MAX_FRAME_BYTES = 1 << 31

# frame statuses
OK = 0  # a value
ERROR = 1  # the producing call raised; the payload is the error
STOP = 2  # the graph is being torn down
BROKEN = 3  # a process upstream died; the payload names it
TICK = 4  # start of an execution for a process that does not read the input


class ChannelClosedError(ConnectionError):
    """The peer closed the connection or died (EOF or a reset)."""


class Endpoint:
    """One connection to a peer: framed send, and receive with per-channel demultiplexing."""

    def __init__(self, sock: socket.socket, peer: str) -> None:
        self.sock = sock
        self.peer = peer
        self._buf = bytearray()
        self._stash: dict[int, collections.deque] = collections.defaultdict(collections.deque)
        self._send_lock = threading.Lock()
        self._pending = bytearray()  # queued by queue(), written by flush_some()
        with contextlib.suppress(OSError):
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, 4 << 20)
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4 << 20)
        if sock.family != socket.AF_UNIX:
            with contextlib.suppress(OSError):
                sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)

    def fileno(self) -> int:
        return self.sock.fileno()

    # ------------------------------------------------------------------ sending
    def send(self, channel: int, status: int, payload: bytes = b"") -> None:
        """Write one frame, blocking until the kernel took all of it."""
        header = HEADER.pack(len(payload), channel, status)
        with self._send_lock:
            try:
                if len(payload) < 65536:
                    self.sock.sendall(header + payload)
                else:
                    self.sock.sendall(header)
                    self.sock.sendall(payload)
            except OSError as e:
                raise ChannelClosedError(f"channel to {self.peer} is closed: {e}") from e

    def queue(self, channel: int, status: int, payload: bytes = b"") -> None:
        """Add a frame to write later with `flush_some` (non-blocking writers)."""
        self._pending += HEADER.pack(len(payload), channel, status)
        self._pending += payload

    def has_pending(self) -> bool:
        return bool(self._pending)

    def flush_some(self) -> None:
        """Write what the socket takes now (the socket is in non-blocking mode)."""
        try:
            sent = self.sock.send(self._pending)
        except BlockingIOError:
            return
        except OSError as e:
            raise ChannelClosedError(f"channel to {self.peer} is closed: {e}") from e
        del self._pending[:sent]

    # ------------------------------------------------------------------ receiving
    def _frame(self) -> tuple[int, int, bytes] | None:
        if len(self._buf) < HEADER.size:
            return None
        size, channel, status = HEADER.unpack_from(self._buf)
        if size > MAX_FRAME_BYTES:
            raise ChannelClosedError(f"{self.peer} sent a frame of {size} bytes (over {MAX_FRAME_BYTES})")
        end = HEADER.size + size
        if len(self._buf) < end:
            return None
        payload = bytes(self._buf[HEADER.size:end])
        del self._buf[:end]
        return channel, status, payload

    def _fill(self) -> bool:
        """Read what is there (blocking sockets wait for some). False: nothing now."""
        try:
            data = self.sock.recv(1 << 20)
        except BlockingIOError:
            return False
        except OSError as e:
            raise ChannelClosedError(f"channel from {self.peer} broke: {e}") from e
        if not data:
            raise ChannelClosedError(f"{self.peer} closed the channel")
        self._buf += data
        return True

    def next_frame(self, block: bool = True) -> tuple[int, int, bytes] | None:
        """The next frame of any channel; None when `block` is False and none is complete."""
        while True:
            frame = self._frame()
            if frame is not None:
                return frame
            if not self._fill() and not block:
                return None

    def recv(self, channel: int) -> tuple[int, bytes]:
        """Block for the next frame of `channel`; frames of other channels are kept for later."""
        stash = self._stash.get(channel)
        if stash:
            return stash.popleft()
        while True:
            got, status, payload = self.next_frame()
            if got == channel:
                return status, payload
            self._stash[got].append((status, payload))

    def close(self) -> None:
        with contextlib.suppress(OSError):
            self.sock.shutdown(socket.SHUT_RDWR)
        with contextlib.suppress(OSError):
            self.sock.close()


def _recv_exact(sock: socket.socket, n: int, deadline: float) -> bytes:
    out = bytearray()
    while len(out) < n:
        sock.settimeout(max(0.01, deadline - time.monotonic()))
        chunk = sock.recv(n - len(out))
        if not chunk:
            raise ChannelClosedError("peer closed during the handshake")
        out += chunk
    return bytes(out)


class ChannelListener:
    """Accepts authenticated connections from the peers of one compiled graph.

    Each peer sends the cluster token, then its id; `wait_peer(id)` gives its Endpoint.
    """

    def __init__(self, token: str, host: str) -> None:
        self._token = token.encode()
        self._peers: dict[str, Endpoint] = {}
        self._cond = threading.Condition()
        self._closed = False
        self._unix = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self._unix_name = f"\0raylite-channel-{os.getpid()}-{os.urandom(8).hex()}"
        self._unix.bind(self._unix_name)
        self._unix.listen(64)
        self._tcp = socket.create_server((host, 0), backlog=64)
        self._host = host
        self._sel = selectors.DefaultSelector()
        self._sel.register(self._unix, selectors.EVENT_READ)
        self._sel.register(self._tcp, selectors.EVENT_READ)
        self._wake_r, self._wake_w = socket.socketpair()
        self._sel.register(self._wake_r, selectors.EVENT_READ)
        self._thread = threading.Thread(target=self._accept_loop, name="raylite-channel-accept",
                                        daemon=True)
        self._thread.start()

    def address(self) -> dict[str, Any]:
        return {"unix": self._unix_name, "host": self._host, "port": self._tcp.getsockname()[1],
                "hostname": socket.gethostname()}

    def _accept_loop(self) -> None:
        while not self._closed:
            for key, _ in self._sel.select():
                if key.fileobj is self._wake_r:
                    return
                try:
                    sock, _addr = key.fileobj.accept()  # type: ignore[union-attr]
                except OSError:
                    continue
                threading.Thread(target=self._handshake, args=(sock,), daemon=True,
                                 name="raylite-channel-handshake").start()

    def _handshake(self, sock: socket.socket) -> None:
        deadline = time.monotonic() + HANDSHAKE_TIMEOUT_S
        try:
            token = _recv_exact(sock, len(self._token), deadline)
            if not hmac.compare_digest(token, self._token):
                raise PermissionError("bad cluster token")
            (size,) = HELLO.unpack(_recv_exact(sock, HELLO.size, deadline))
            peer = _recv_exact(sock, size, deadline).decode()
            sock.settimeout(None)
        except (OSError, ValueError, PermissionError, ChannelClosedError):
            with contextlib.suppress(OSError):
                sock.close()
            return
        with self._cond:
            if self._closed:
                sock.close()
                return
            self._peers[peer] = Endpoint(sock, peer)
            self._cond.notify_all()

    def wait_peer(self, peer: str, timeout_s: float) -> Endpoint:
        deadline = time.monotonic() + timeout_s
        with self._cond:
            while peer not in self._peers:
                left = deadline - time.monotonic()
                if self._closed or left <= 0:
                    raise ChannelClosedError(f"{peer} did not connect within {timeout_s:.0f}s")
                self._cond.wait(left)
            return self._peers[peer]

    def close(self) -> None:
        with self._cond:
            self._closed = True
            peers = list(self._peers.values())
            self._cond.notify_all()
        with contextlib.suppress(OSError):
            self._wake_w.send(b"x")
        self._thread.join(timeout=5)
        for sock in (self._unix, self._tcp, self._wake_r, self._wake_w):
            with contextlib.suppress(OSError):
                sock.close()
        for ep in peers:
            ep.close()


def connect(address: dict[str, Any], token: str, me: str, timeout_s: float = 30.0) -> Endpoint:
    """Connect to a listener: its Unix socket when it is on this machine (and in this network
    namespace), else its TCP port."""
    targets: list[tuple[int, Any]] = []
    if address.get("hostname") == socket.gethostname():
        targets.append((socket.AF_UNIX, address["unix"]))
    family = socket.AF_INET6 if ":" in address["host"] else socket.AF_INET
    targets.append((family, (address["host"], address["port"])))
    error: OSError | None = None
    for family, target in targets:
        sock = socket.socket(family, socket.SOCK_STREAM)
        sock.settimeout(timeout_s)
        try:
            sock.connect(target)
            ident = me.encode()
            sock.sendall(token.encode() + HELLO.pack(len(ident)) + ident)
        except OSError as e:
            sock.close()
            error = e
            continue
        sock.settimeout(None)
        return Endpoint(sock, str(address.get("name", target)))
    raise ChannelClosedError(f"cannot connect a channel to {address.get('name', address['host'])}: {error}")
