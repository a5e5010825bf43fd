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

Every listener of a process lives in one process (the head daemon holds head RPC, node RPC,
object transfer, the Ray Client server, the health and metrics ports), and descriptors are a
process-wide resource: 1,100 strangers spread over six listeners, each under its own cap, still
exhaust `ulimit -n 1024`, and then `accept` fails for everyone. So every gate also counts its
strangers in one process-wide budget, `STRANGERS` (thread-safe: gates run on event loops and
handshake threads), kept at half the open-file limit less a reserve (`raise_open_file_limit`
lifts the soft limit to the hard one first, as Ray's `init` does); the oldest stranger of the
whole process is evicted past it, by its own listener's thread (its `close` callback).
"""

from __future__ import annotations

import contextlib
import errno
import logging
import threading
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

    def admit(self, conn: Hashable, close: Callable[[], None] | None = None) -> Hashable | None:
        """Count `conn`; returns the oldest pending connection, which the caller must close,
        when the listener was full (else None). `close`: how another thread closes `conn` when
        the process-wide budget evicts it (it must be safe to call from any thread)."""
        self._pending[conn] = None
        if close is not None:
            STRANGERS.admit(conn, close)
        if len(self._pending) <= self.limit:
            return None
        oldest = next(iter(self._pending))
        del self._pending[oldest]
        STRANGERS.release(oldest)
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
        STRANGERS.release(conn)


# descriptors kept out of the strangers' budget: authenticated peers, workers' pipes, logs, files
RESERVED_FDS = 64


def open_file_limit() -> int:
    """This process's soft RLIMIT_NOFILE (a large number when unlimited)."""
    try:
        import resource

        soft = resource.getrlimit(resource.RLIMIT_NOFILE)[0]
        return 1 << 20 if soft == resource.RLIM_INFINITY or soft < 0 else int(soft)
    except (ImportError, OSError, ValueError):
        return 1 << 20


def raise_open_file_limit() -> int:
    """Lift the soft open-file limit to the hard one (every daemon does at start, as Ray's
    `init` does), so a burst of connections does not run a listener out of descriptors;
    returns the soft limit now in force."""
    with contextlib.suppress(ImportError, OSError, ValueError):
        import resource

        soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
        if hard == resource.RLIM_INFINITY:
            hard = max(soft, 1 << 20) if soft != resource.RLIM_INFINITY else soft
        if soft != resource.RLIM_INFINITY and soft < hard:
            with contextlib.suppress(OSError, ValueError):
                resource.setrlimit(resource.RLIMIT_NOFILE, (hard, resource.getrlimit(resource.RLIMIT_NOFILE)[1]))
    STRANGERS.reset()
    return open_file_limit()


class StrangerBudget:
    """The unauthenticated connections of the whole process, oldest first, across listeners."""

    def __init__(self, limit: int | None = None) -> None:
        self._lock = threading.Lock()
        self._held: dict[Hashable, Callable[[], None]] = {}
        self._fixed = limit
        self._per_listener: int | None = None
        self._last_log = float("-inf")
        self.evicted = 0

    @property
    def limit(self) -> int:
        """Half the open-file limit less RESERVED_FDS (read each time: a prlimit may change it),
        at most 4 x max_pending_handshakes, at least 16."""
        if self._fixed is not None:
            return self._fixed
        if self._per_listener is None:
            from raylite._core.config import get_config

            self._per_listener = get_config().max_pending_handshakes
        return max(16, min(4 * self._per_listener, open_file_limit() // 2 - RESERVED_FDS))

    @property
    def pending(self) -> int:
        return len(self._held)

    def reset(self, limit: int | None = None) -> None:
        """Recompute the limit (after the open-file limit changed); tests pass their own."""
        self._fixed = limit
        self._per_listener = None

    def admit(self, conn: Hashable, close: Callable[[], None]) -> None:
        limit = self.limit
        victims = []
        with self._lock:
            self._held[conn] = close
            while len(self._held) > limit:
                oldest = next(iter(self._held))
                victims.append(self._held.pop(oldest))
            self.evicted += len(victims)
        now = time.monotonic()
        if victims and now - self._last_log >= 10.0:
            self._last_log = now
            log.warning("this process held more than %d connections that have not completed the "
                        "handshake (half its open-file limit, less a reserve); closing the oldest "
                        "(%d so far). A flood of connections without the cluster token?", limit, self.evicted)
        for close in victims:
            with contextlib.suppress(Exception):
                close()

    def release(self, conn: Hashable) -> None:
        with self._lock:
            self._held.pop(conn, None)

    def shed(self, n: int) -> int:
        """Close the `n` oldest strangers now (accept found no descriptor left: EMFILE)."""
        with self._lock:
            victims = [self._held.pop(k) for k in list(self._held)[:n]]
            self.evicted += len(victims)
        for close in victims:
            with contextlib.suppress(Exception):
                close()
        return len(victims)


STRANGERS = StrangerBudget()


def on_accept_failure(loop: object, context: dict) -> None:
    """An asyncio exception handler: when `accept` ran out of descriptors (EMFILE/ENFILE),
    close the oldest strangers so the listener (paused a moment by asyncio) accepts again."""
    exc = context.get("exception")
    if isinstance(exc, OSError) and exc.errno in (errno.EMFILE, errno.ENFILE):
        STRANGERS.shed(max(16, STRANGERS.limit // 8))
        log.warning("accept() ran out of file descriptors (%s); closed the oldest unauthenticated "
                    "connections to make room", exc)
        return
    loop.default_exception_handler(context)  # type: ignore[attr-defined]
