"""A worker's link to the head opens on first use and closes when idle; a driver's stays."""

from __future__ import annotations

import asyncio

from raylite._core import protocol as P
from raylite._core.client.head_link import HeadLink


class _Conn:
    def __init__(self) -> None:
        self.context: dict = {}
        self.on_close: list = []
        self.closed = False
        self.sent: list = []

    def is_closed(self) -> bool:
        return self.closed

    def close(self) -> None:
        self.closed = True
        for cb in self.on_close:
            cb(self)

    def send(self, msg) -> None:
        self.sent.append(msg)

    async def request(self, msg, timeout_s=None):
        return P.Ack()


async def _until(predicate, timeout_s: float = 5.0) -> None:
    deadline = asyncio.get_running_loop().time() + timeout_s
    while not predicate():
        assert asyncio.get_running_loop().time() < deadline, "condition not met"
        await asyncio.sleep(0.01)


def test_idle_worker_link_closes_and_reopens():
    async def scenario() -> None:
        opened: list[_Conn] = []

        async def connect():
            opened.append(_Conn())
            return opened[-1]

        lost = []
        link = HeadLink("unix:///head", connect, idle_s=0.05)
        link.on_close.append(lost.append)
        assert not opened  # nothing until it is needed
        assert isinstance(await link.request(P.KvKeys("ns", b"")), P.Ack)
        assert len(opened) == 1
        await _until(lambda: opened[0].closed)  # idle: let go
        assert not lost  # closed on purpose: not reported as a lost link
        link.send(P.KvKeys("ns", b""))  # the next use opens it again
        await _until(lambda: len(opened) == 2 and opened[1].sent)
        link.close()
        assert link.is_closed()

    asyncio.run(scenario())


def test_link_stays_while_the_worker_holds_leases_or_actors():
    async def scenario() -> None:
        conn = _Conn()

        async def connect():
            return conn

        busy = [True]
        link = HeadLink("unix:///head", connect, idle_s=0.02, may_close=lambda: not busy[0])
        await link.request(P.KvKeys("ns", b""))
        await asyncio.sleep(0.1)
        assert not conn.closed
        busy[0] = False
        await _until(lambda: conn.closed)

    asyncio.run(scenario())


def test_driver_link_never_idles_and_reports_a_lost_link():
    async def scenario() -> None:
        conn = _Conn()

        async def connect():
            return conn

        lost = []
        link = HeadLink("unix:///head", connect, idle_s=None)
        link.on_close.append(lost.append)
        await link.connected()
        await asyncio.sleep(0.05)
        assert not conn.closed
        conn.close()  # the peer went away
        assert lost == [link]

    asyncio.run(scenario())
