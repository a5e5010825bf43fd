"""Bounded accept: a listener counts its connections that have not authenticated yet.

Why: before the token check a peer is a stranger, and each stranger costs a socket, a
buffer and (for object transfer) a slot in the handshake thread. A listener admits at most
`limit` of them at a time; one more is refused at once, with a log line (at most one per
`log_every_s`, counting the refusals in between), so a flood shows in the log without
filling it. Authenticated connections are not counted: they are the cluster's own.
Used from one thread at a time (an event loop, or the bulk server's handshake thread).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable

log = logging.getLogger("raylite.security")

# the first frame of a connection (a Hello: token, version, role) is never larger than this
HELLO_MAX_BYTES = 4096


class HandshakeGate:
    """Counts pending handshakes of one listener (`name` appears in the log line)."""

    def __init__(self, name: str, limit: int, *, log_every_s: float = 10.0,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.name = name
        self.limit = max(1, int(limit))
        self.pending = 0
        self.refused = 0  # total, for tests and the log
        self._log_every_s = log_every_s
        self._clock = clock
        self._last_log = float("-inf")
        self._unlogged = 0

    def admit(self) -> bool:
        """Take a slot for a new connection; False (and a log line) when the listener is full."""
        if self.pending < self.limit:
            self.pending += 1
            return True
        self.refused += 1
        self._unlogged += 1
        now = self._clock()
        if now - self._last_log >= self._log_every_s:
            log.warning("%s: refused %d connection(s): %d connections have not completed the "
                        "handshake (the limit, max_pending_handshakes / RAYLITE_MAX_PENDING_HANDSHAKES). "
                        "A client that does not send the cluster token, or a flood of connections?",
                        self.name, self._unlogged, self.pending)
            self._last_log = now
            self._unlogged = 0
        return False

    def release(self) -> None:
        """The connection authenticated or went away: free its slot."""
        if self.pending > 0:
            self.pending -= 1
