"""Channels: pre-connected, authenticated byte pipes between two processes, for compiled graphs.

A compiled graph (`dag.experimental_compile()`) sends every value of every execution over
channels set up once, instead of submitting a task per call. One process listens
(`ChannelListener`), the other connects (`connect`); the resulting `Endpoint` carries frames
both ways. A frame is a small header `(payload length, channel id, status)` followed by the
payload, so several logical channels share one connection and a reader can ask for one
channel while frames of others are set aside (`Endpoint.recv`).

Security: a listener binds a Unix socket (a file of mode 0600 in the session's private
sockets directory: same node) and a TCP socket on the node's address (other nodes; TLS when
the cluster uses TLS). Before it decodes or buffers anything from a peer, the peer must send
the cluster token, compared in constant time, then its id (at most `MAX_PEER_ID_BYTES`); one
thread runs every pending handshake, a peer that does not finish within the cluster's
`handshake_timeout_s` is dropped, and at most `max_pending_handshakes` are held at once.
Frames of an authenticated peer are bounded by `MAX_FRAME_BYTES`.

Blocking, thread-based I/O on purpose: the sender and receiver of a compiled graph each have a
thread that does nothing else, and a blocking `recv` wakes with one system call, which is
what makes a compiled execution cheaper than a task submission through the event loop.
"""

from __future__ import annotations

import collections
import contextlib
import logging
import os
import socket
import ssl
import struct
import tempfile
import threading
import time
from typing import Any

from raylite._core.config import get_config
from raylite._core.transport.handshake import TokenListener, token_matches
from raylite._core.transport.rpc import tls_contexts

log = logging.getLogger("raylite.channels")

HEADER = struct.Struct("!IIB")  # payload length, channel id, status
HELLO = struct.Struct("!H")  # length of the peer id that follows the token
MAX_PEER_ID_BYTES = 4096
MAX_FRAME_BYTES = 1 << 31  # an authenticated peer's frame (a compiled graph's value)
LISTEN_BACKLOG = 1024

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
        except (BlockingIOError, ssl.SSLWantWriteError, ssl.SSLWantReadError):
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
        except (BlockingIOError, ssl.SSLWantReadError, ssl.SSLWantWriteError):
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


class ChannelListener:
    """Accepts authenticated connections from the peers of one compiled graph.

    Each peer sends the cluster token, then its id; `wait_peer(id)` gives its Endpoint.

    One thread accepts and runs every handshake non-blocking under a selector (TLS included on
    TCP), so a stranger costs no thread; at most `max_pending_handshakes` strangers are held
    (the oldest goes first, see transport/gate.py), each for at most `handshake_timeout_s`
    (the cluster's settings). The Unix socket is a file of mode 0600 in `socket_dir` (the
    session's private sockets directory; a fresh private temporary directory without one).
    """

    def __init__(self, token: str, host: str, *, socket_dir: str | None = None,
                 ssl_context: ssl.SSLContext | None | bool = True) -> None:
        cfg = get_config()
        self._token = token.encode()
        self._timeout_s = cfg.handshake_timeout_s
        self._tls = tls_contexts()[0] if ssl_context is True else (ssl_context or None)
        self._peers: dict[str, Endpoint] = {}
        self._cond = threading.Condition()
        self._closed = False
        self._own_dir = socket_dir is None
        directory = tempfile.mkdtemp(prefix="raylite-ch-") if socket_dir is None else socket_dir
        self._unix_path = os.path.join(directory, f"ch-{os.urandom(6).hex()}")
        self._unix = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self._unix.bind(self._unix_path)
        os.chmod(self._unix_path, 0o600)
        self._unix.listen(LISTEN_BACKLOG)
        self._tcp = socket.create_server((host, 0), backlog=LISTEN_BACKLOG)
        self._host = host
        name = f"compiled-graph channel listener {host}:{self._tcp.getsockname()[1]}"
        self._handshakes = TokenListener(name, [(self._unix, False), (self._tcp, True)], self._check,
                                         on_ready=self._peer_ready, timeout_s=self._timeout_s,
                                         limit=cfg.max_pending_handshakes, tls=self._tls)
        self.gate = self._handshakes.gate

    def address(self) -> dict[str, Any]:
        return {"unix": self._unix_path, "host": self._host, "port": self._tcp.getsockname()[1],
                "hostname": socket.gethostname()}

    def _check(self, buf: bytearray) -> int | bool:
        """The token (exactly its length), then a u16 peer-id length (1..MAX_PEER_ID_BYTES), then the id."""
        n = len(self._token)
        if not n:  # a listener without a token admits no one
            return False
        if len(buf) < n:
            return n
        if not token_matches(bytes(buf[:n]), self._token):
            return False
        if len(buf) < n + HELLO.size:
            return n + HELLO.size
        (size,) = HELLO.unpack_from(buf, n)
        if not 0 < size <= MAX_PEER_ID_BYTES:
            return False
        return True if len(buf) >= n + HELLO.size + size else n + HELLO.size + size

    def _peer_ready(self, sock: socket.socket, hello: bytes) -> None:
        peer = hello[len(self._token) + HELLO.size:].decode(errors="replace")
        with self._cond:
            if self._closed:
                sock.close()
                return
            self._peers[peer] = Endpoint(sock, peer)
            self._cond.notify_all()

    # ------------------------------------------------------------------ the graph's side
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
            if self._closed:
                return
            self._closed = True
            peers = list(self._peers.values())
            self._cond.notify_all()
        self._handshakes.close(join_s=5)
        with contextlib.suppress(OSError):
            os.unlink(self._unix_path)
        if self._own_dir:
            with contextlib.suppress(OSError):
                os.rmdir(os.path.dirname(self._unix_path))
        for ep in peers:
            ep.close()


def connect(address: dict[str, Any], token: str, me: str, timeout_s: float = 30.0, *,
            ssl_context: ssl.SSLContext | None | bool = True) -> Endpoint:
    """Connect to a listener: its Unix socket when it is on this machine (and the socket file is
    reachable here), else its TCP port, over TLS when the cluster uses TLS (`ssl_context` True:
    the cluster's client context; None: plain)."""
    tls = tls_contexts()[1] if ssl_context is True else (ssl_context or None)
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
            if tls is not None and family != socket.AF_UNIX:
                sock = tls.wrap_socket(sock, server_hostname=None)
            ident = me.encode()
            sock.sendall(token.encode() + HELLO.pack(len(ident)) + ident)
        except OSError as e:
            sock.close()
            error = e
            continue
        sock.settimeout(None)
        return Endpoint(sock, str(address.get("name", target)))
    raise ChannelClosedError(f"cannot connect a channel to {address.get('name', address['host'])}: {error}")
