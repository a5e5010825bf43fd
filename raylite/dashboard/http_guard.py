"""The API server's HTTP/1.1 protocol: uvicorn's h11 protocol with what a stranger may cost bounded.

The token travels in the request head (TokenAuth checks it before any route runs and before the
body is read), so the head itself is what a stranger can send unauthenticated. Bounded here:
- size: h11 refuses a request head over HEAD_MAX_BYTES (400, connection closed); uvicorn's
  httptools parser has no such limit, hence h11;
- time: a connection must deliver each complete request head within
  Config.handshake_timeout_s of connecting (or of its previous response); uvicorn has no such
  timer, so a half-sent head would hold the connection forever;
- count: at most Config.max_pending_handshakes connections of the process wait for their first
  request head; past that the oldest of them is closed (gate semantics as in Core's listeners,
  raylite/_core/transport/gate.py), with a log line.
A body is read only by a route, after the token check; uvicorn pauses reading past 64 KiB
until the route consumes it.
"""

from __future__ import annotations

import asyncio
import logging
import time
from typing import Any

from uvicorn.protocols.http.h11_impl import H11Protocol

log = logging.getLogger("raylite.dashboard")

HEAD_MAX_BYTES = 16 * 1024


class _Pending:
    """The process's connections still waiting for their first request head, oldest first."""

    def __init__(self) -> None:
        self.limit = 1024
        self.conns: dict[Any, None] = {}
        self.evicted = 0
        self._last_log = float("-inf")

    def admit(self, conn: Any) -> Any:
        self.conns[conn] = None
        if len(self.conns) <= self.limit:
            return None
        oldest = next(iter(self.conns))
        del self.conns[oldest]
        self.evicted += 1
        now = time.monotonic()
        if now - self._last_log >= 10.0:
            self._last_log = now
            log.warning("API server: %d connections have not sent a request (max_pending_handshakes); closed "
                        "the oldest to make room (%d so far)", len(self.conns), self.evicted)
        return oldest


PENDING = _Pending()


class GuardedH11Protocol(H11Protocol):
    """Pass as uvicorn.Config(http=GuardedH11Protocol, h11_max_incomplete_event_size=HEAD_MAX_BYTES)."""

    head_timeout_s = 5.0  # set from Config by the server at start

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._head_timer: asyncio.TimerHandle | None = None
        self._seen_scope: Any = None
        self._first = True

    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
        super().connection_made(transport)
        oldest = PENDING.admit(self)
        if oldest is not None:
            oldest._end_first()
            oldest.transport.close()
        self._arm()

    def handle_events(self) -> None:
        super().handle_events()
        if self.scope is not None and self.scope is not self._seen_scope:  # a request head arrived
            self._seen_scope = self.scope
            self._disarm()
            self._end_first()

    def on_response_complete(self) -> None:
        # the next request head has the same deadline (armed first: a pipelined request parsed
        # inside super() disarms it again in handle_events)
        if not self.transport.is_closing():
            self._arm()
        super().on_response_complete()

    def connection_lost(self, exc: Exception | None) -> None:
        self._disarm()
        self._end_first()
        super().connection_lost(exc)

    def _arm(self) -> None:
        self._disarm()
        self._head_timer = self.loop.call_later(self.head_timeout_s, self._head_expired)

    def _disarm(self) -> None:
        if self._head_timer is not None:
            self._head_timer.cancel()
            self._head_timer = None

    def _end_first(self) -> None:
        if self._first:
            self._first = False
            PENDING.conns.pop(self, None)

    def _head_expired(self) -> None:
        self._head_timer = None
        if not self.transport.is_closing():
            log.info("API server: closing a connection that sent no complete request head within %ss",
                     self.head_timeout_s)
            self.transport.close()


def configure(head_timeout_s: float, max_pending: int) -> None:
    GuardedH11Protocol.head_timeout_s = head_timeout_s
    PENDING.limit = max(1, int(max_pending))
