"""The one token check of Core's listeners, and the one handshake thread of the raw ones.

Why one module: the check was written seven times (RPC, object transfer, compiled-graph
channels, the health server's metrics, Serve, the channel-security view, the API server), and
each copy was one place for an empty token to match, a length to go unchecked or a stranger to
cost a thread. Here:
- `token_matches`: constant-time, and an empty token matches nothing.
- `check_hello`: the first frame of a Core RPC connection (msgpack `Hello`), read as data.
- `TokenListener`: ONE thread that accepts on raw sockets, runs each stranger's TLS handshake
  and reads its handshake bytes non-blocking under a selector, within the handshake deadline
  and the listener's and the process's budgets (gate.py); a connection that passed is handed
  to `on_ready` (object transfer gives it a serving thread, a compiled graph an Endpoint).
  The protocol is a `check(buf)` function: how many bytes it needs next, or True/False.

Serve's direct channel keeps its own challenge-response (docs/security.md says why) and
compares with the same `hmac.compare_digest`, through `ChannelSecurity.check_token`.
"""

from __future__ import annotations

import contextlib
import errno
import hmac
import logging
import selectors
import socket
import ssl
import threading
import time
from collections.abc import Callable

import msgpack

from raylite._core import protocol as P
from raylite._core.transport.gate import STRANGERS, HandshakeGate

log = logging.getLogger("raylite.security")


def token_matches(presented: bytes | str | None, token: bytes | str | None) -> bool:
    """Whether `presented` is the cluster `token` (constant time; an empty token matches nothing)."""
    if not token or presented is None:
        return False
    a = presented.encode() if isinstance(presented, str) else bytes(presented)
    b = token.encode() if isinstance(token, str) else bytes(token)
    return hmac.compare_digest(a, b)


def check_hello(frame: bytes, token: str) -> tuple[str, str]:
    """Check a connection's first frame: ("", peer role) when it is a Hello with `token`
    and this protocol version, else (why it was refused, "").
    The frame is plain msgpack read as data: nothing in it is unpickled or run."""
    try:
        items = msgpack.unpackb(frame, raw=False)
        presented = items[2]
        ok = items[0] == P.Hello.TAG and isinstance(presented, str) and token_matches(presented, token)
        version_ok = ok and items[3] == P.PROTOCOL_VERSION
    except Exception:  # noqa: BLE001
        ok = version_ok = False
    if not ok:
        return "wrong or missing cluster token", ""
    if not version_ok:
        return (f"protocol version mismatch: this node speaks {P.PROTOCOL_VERSION}, you sent {items[3]}; "
                "install the same raylite version on every node"), ""
    return "", str(items[4])


# check(buf) -> the total number of bytes it needs before it can decide, or True (accepted) / False
Check = Callable[[bytearray], "int | bool"]


class _Pending:
    """A connection that has not passed the check yet (owned by the handshake thread)."""

    __slots__ = ("sock", "fd", "deadline", "buf", "tls_done", "events", "need")

    def __init__(self, sock: socket.socket, deadline: float, tls_done: bool) -> None:
        self.sock = sock
        self.fd = sock.fileno()
        self.deadline = deadline
        self.buf = bytearray()
        self.tls_done = tls_done
        self.events = selectors.EVENT_READ
        self.need = 0

    def evict(self) -> None:
        """From any thread: the handshake thread then sees EOF and drops it."""
        with contextlib.suppress(OSError):
            self.sock.shutdown(socket.SHUT_RDWR)


class TokenListener:
    """Accepts on `servers` ((listening socket, use TLS) pairs) and runs every handshake on one
    thread. `on_ready(sock, buf)` gets a connection that passed `check` (blocking again);
    `on_refused(sock)` may send a refusal before the close."""

    def __init__(self, name: str, servers: list[tuple[socket.socket, bool]], check: Check, *,
                 on_ready: Callable[[socket.socket, bytes], None], timeout_s: float, limit: int,
                 tls: ssl.SSLContext | None = None,
                 on_refused: Callable[[socket.socket], None] | None = None) -> None:
        self.name = name
        self.gate = HandshakeGate(name, limit)
        self._check = check
        self._on_ready = on_ready
        self._on_refused = on_refused
        self._timeout_s = timeout_s
        self._tls = tls
        self._pending: dict[int, _Pending] = {}  # fd -> state, in accept order
        self._sel = selectors.DefaultSelector()
        self._servers = servers
        for server, use_tls in servers:
            server.setblocking(False)
            self._sel.register(server, selectors.EVENT_READ, (server, use_tls))
        self._wake_r, self._wake_w = socket.socketpair()
        self._wake_r.setblocking(False)
        self._sel.register(self._wake_r, selectors.EVENT_READ, "wake")
        self._closed = False
        self._thread = threading.Thread(target=self._loop, name="raylite-handshakes", daemon=True)
        self._thread.start()

    def close(self, join_s: float = 0.0) -> None:
        """Stop accepting, drop every pending handshake and close the listening sockets (on the
        handshake thread, so none is closed while its selector still watches it)."""
        self._closed = True
        with contextlib.suppress(OSError):
            self._wake_w.send(b"x")
        if join_s:
            self._thread.join(join_s)

    def _loop(self) -> None:
        try:
            while not self._closed:
                wait = None
                if self._pending:  # in accept order: the first one expires first
                    wait = max(0.0, next(iter(self._pending.values())).deadline - time.monotonic())
                for key, _ in self._sel.select(wait):
                    if key.data == "wake":
                        continue
                    if isinstance(key.data, _Pending):
                        self._advance(key.data)
                    else:
                        self._accept(*key.data)
                self._expire()
        finally:
            for h in list(self._pending.values()):
                self._drop(h)
            self._sel.close()
            for s in (*(server for server, _ in self._servers), self._wake_r, self._wake_w):
                with contextlib.suppress(OSError):
                    s.close()

    def _accept(self, server: socket.socket, use_tls: bool) -> None:
        while True:
            try:
                sock, _ = server.accept()
            except OSError as e:  # nothing more now (BlockingIOError), or the listener is closing
                if e.errno in (errno.EMFILE, errno.ENFILE):  # out of descriptors: strangers go first
                    STRANGERS.shed(max(16, STRANGERS.limit // 8))
                return
            sock.setblocking(False)
            tls_done = not (use_tls and self._tls is not None)
            if not tls_done:
                try:
                    sock = self._tls.wrap_socket(sock, server_side=True,  # type: ignore[union-attr]
                                                 do_handshake_on_connect=False)
                except (OSError, ValueError):
                    sock.close()
                    continue
            h = _Pending(sock, time.monotonic() + self._timeout_s, tls_done)
            oldest = self.gate.admit(h, h.evict)
            if oldest is not None:  # full: the oldest stranger goes
                self._drop(oldest)  # type: ignore[arg-type]
            self._pending[h.fd] = h
            self._sel.register(sock, selectors.EVENT_READ, h)
            self._advance(h)

    def _advance(self, h: _Pending) -> None:
        """Move one handshake on as far as the bytes that arrived allow."""
        try:
            if not h.tls_done:
                h.sock.do_handshake()  # type: ignore[attr-defined]
                h.tls_done = True
            while True:
                verdict = self._check(h.buf)
                if verdict is True or verdict is False:
                    break
                chunk = h.sock.recv(int(verdict) - len(h.buf))
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
        if verdict is False:
            if self._on_refused is not None:
                with contextlib.suppress(OSError, ValueError):
                    self._on_refused(h.sock)
            return self._drop(h)
        self._forget(h)
        try:
            h.sock.setblocking(True)
        except OSError:
            h.sock.close()
            return
        self._on_ready(h.sock, bytes(h.buf))

    def _wait_for(self, h: _Pending, events: int) -> None:
        if events != h.events:
            h.events = events
            self._sel.modify(h.sock, events, h)

    def _expire(self) -> None:
        now = time.monotonic()
        late = []
        for h in self._pending.values():
            if h.deadline > now:
                break
            late.append(h)
        for h in late:
            log.info("%s: closing a connection that did not present the token within %ss",
                     self.name, self._timeout_s)
            self._drop(h)

    def _forget(self, h: _Pending) -> None:
        """Out of the handshake: unregister and free the budget's slots (the socket stays open)."""
        with contextlib.suppress(KeyError, ValueError, OSError):
            self._sel.unregister(h.sock)
        if self._pending.get(h.fd) is h:
            del self._pending[h.fd]
        self.gate.release(h)

    def _drop(self, h: _Pending) -> None:
        self._forget(h)
        with contextlib.suppress(OSError):
            h.sock.close()
