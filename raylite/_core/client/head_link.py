"""A client's link to the head: connected when first needed, and (in workers) let go when idle.

A driver talks to the head all along; a worker mostly does not: an actor asks for its class at
start, reports its task events, and then may sit idle for hours. Ten thousand idle actors each
holding a connection to the head would cost the head ten thousand sockets (more than a
process may open here), buffers on both sides, and a broadcast each. So a worker's link opens
on its first request and closes after `idle_s` with nothing in flight, when the worker holds
nothing whose peers the head's broadcasts are about (`may_close()`); the next request opens it
again. A driver's link (`idle_s=None`) is opened at start and stays.

It offers what callers use of an rpc.Connection: `request`, `send`, `is_closed`, `close`,
`abort`, and `on_close` callbacks for a link lost (not for one closed on purpose).
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from typing import Any

from raylite._core import protocol as P
from raylite._core.transport import rpc
from raylite._core.transport.base import ConnectionClosedError

Connector = Callable[[], Awaitable[rpc.Connection]]


class HeadLink:
    def __init__(self, address: str, connect: Connector, *, idle_s: float | None,
                 may_close: Callable[[], bool] = lambda: True) -> None:
        self.address = address
        self._connect = connect
        self._idle_s = idle_s
        self._may_close = may_close
        self.conn: rpc.Connection | None = None
        self._connecting: asyncio.Future | None = None
        self._in_flight = 0
        self._last_used = 0.0
        self._idle_timer: asyncio.TimerHandle | None = None
        self._closed = False  # closed for good (shutdown)
        self.on_close: list[Callable[[Any], None]] = []

    # ------------------------------------------------------------ connection
    async def connected(self) -> rpc.Connection:
        """The open connection, opening it first if needed (one attempt shared by all callers)."""
        conn = self.conn
        if conn is not None and not conn.is_closed():
            return conn
        if self._closed:
            raise ConnectionClosedError("the link to the head was closed (shutdown)")
        if self._connecting is None:
            self._connecting = asyncio.ensure_future(self._open())
        return await asyncio.shield(self._connecting)

    async def _open(self) -> rpc.Connection:
        try:
            conn = await self._connect()
            self.conn = conn
            conn.on_close.append(self._lost)
            self._used()
            return conn
        finally:
            self._connecting = None

    def _lost(self, conn: rpc.Connection) -> None:
        if conn is not self.conn:
            return
        self.conn = None
        if conn.context.get("idle_closed") or self._closed:
            return
        for cb in list(self.on_close):
            cb(self)

    # ------------------------------------------------------------ what callers use
    async def request(self, msg: P.Message, timeout_s: float | None = None) -> P.Message:
        self._in_flight += 1
        try:
            conn = await self.connected()
            return await conn.request(msg, timeout_s)
        finally:
            self._in_flight -= 1
            self._used()

    def send(self, msg: P.Message) -> None:
        conn = self.conn
        if conn is not None and not conn.is_closed():
            conn.send(msg)
            self._used()
            return
        if self._closed:
            raise ConnectionClosedError("the link to the head was closed (shutdown)")
        self._in_flight += 1
        asyncio.get_running_loop().create_task(self._send_when_open(msg))

    async def _send_when_open(self, msg: P.Message) -> None:
        try:
            (await self.connected()).send(msg)
        except Exception:  # noqa: BLE001  like a send on a broken connection: lost
            pass
        finally:
            self._in_flight -= 1
            self._used()

    def is_closed(self) -> bool:
        return self._closed

    def close(self) -> None:
        self._closed = True
        self._cancel_idle()
        if self.conn is not None:
            self.conn.close()

    def abort(self) -> None:
        if self.conn is not None:
            self.conn.abort()

    # ------------------------------------------------------------ idle
    def _used(self) -> None:
        if self._idle_s is None or self._closed:
            return
        loop = asyncio.get_running_loop()
        self._last_used = loop.time()
        if self._idle_timer is None:
            self._idle_timer = loop.call_later(self._idle_s, self._check_idle)

    def _check_idle(self) -> None:
        self._idle_timer = None
        conn = self.conn
        if conn is None or conn.is_closed() or self._closed:
            return
        loop = asyncio.get_running_loop()
        left = self._last_used + self._idle_s - loop.time()
        if left > 0 or self._in_flight or not self._may_close():
            self._idle_timer = loop.call_later(max(left, self._idle_s / 4), self._check_idle)
            return
        conn.context["idle_closed"] = True
        self.conn = None
        conn.close()

    def _cancel_idle(self) -> None:
        if self._idle_timer is not None:
            self._idle_timer.cancel()
            self._idle_timer = None
