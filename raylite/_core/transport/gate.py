"""Bounded accept: a listener holds at most `limit` connections that have not authenticated.

Why: before the token check a peer is a stranger, and each stranger costs a socket, a small
buffer and a timer. When a new connection would exceed the limit, the OLDEST unauthenticated
one is closed to make room (with a log line, at most one per `log_every_s`, counting the
closures in between). Evicting the oldest rather than refusing the newest keeps the port
usable under a flood: a stranger who holds the slots with silent connections is pushed out by
each new arrival, while a real client, whose Hello follows its connect within milliseconds,
authenticates long before `limit` newer connections arrive. Authenticated connections are
not counted: they are the cluster's own. Used from one thread at a time (an event loop, or the
bulk server's handshake thread).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Hashable

log = logging.getLogger("raylite.security")

# the first frame of a connection (a Hello: token, version, role) is never larger than this
HELLO_MAX_BYTES = 4096


class HandshakeGate:
    """The pending (unauthenticated) connections of one listener, oldest first."""

    def __init__(self, name: str, limit: int, *, log_every_s: float = 10.0,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.name = name
        self.limit = max(1, int(limit))
        self.evicted = 0  # total, for tests and the log
        self._pending: dict[Hashable, None] = {}  # insertion order = age
        self._log_every_s = log_every_s
        self._clock = clock
        self._last_log = float("-inf")
        self._unlogged = 0

    @property
    def pending(self) -> int:
        return len(self._pending)

    def admit(self, conn: Hashable) -> Hashable | None:
        """Count `conn`; returns the oldest pending connection, which the caller must close,
        when the listener was full (else None)."""
        self._pending[conn] = None
        if len(self._pending) <= self.limit:
            return None
        oldest = next(iter(self._pending))
        del self._pending[oldest]
        self.evicted += 1
        self._unlogged += 1
        now = self._clock()
        if now - self._last_log >= self._log_every_s:
            log.warning("%s: %d connections have not completed the handshake (max_pending_handshakes="
                        "%d, RAYLITE_MAX_PENDING_HANDSHAKES); closed the oldest %d to make room. Clients "
                        "without the cluster token, or a flood of connections?",
                        self.name, len(self._pending), self.limit, self._unlogged)
            self._last_log = now
            self._unlogged = 0
        return oldest

    def release(self, conn: Hashable) -> None:
        """`conn` authenticated or went away."""
        self._pending.pop(conn, None)
