"""The replica's own admission of requests (`ReplicaImpl`: max_ongoing_requests, the backlog,
CANCEL), driven frame by frame without a cluster, so the order of frames is the test's."""

from __future__ import annotations

import asyncio

import cloudpickle

from raylite.serve._internal.replica import ReplicaImpl
from raylite.serve._internal.wire import CANCEL, KIND_CALL, R_ERR, R_OK, REQ


class _Peer:
    """A router's end of one connection: what the replica sent on it."""

    closed = False

    def __init__(self) -> None:
        self.sent: list[tuple] = []

    def send(self, msg: tuple) -> None:
        self.sent.append(msg)

    def _flush(self) -> None:
        pass

    def replies(self, rid: int) -> list[int]:
        return [m[1] for m in self.sent if m[0] == rid]


class _Deployment:
    def __init__(self) -> None:
        self.release = asyncio.Event()

    async def slow(self) -> str:
        await self.release.wait()
        return "slow"

    async def ping(self) -> str:
        return "pong"


def _request(rid: int, method: str) -> tuple:
    meta = (f"req-{rid}", "/", "app", "", False, method)
    return (REQ, rid, KIND_CALL, meta, cloudpickle.dumps(((), {})))


def test_a_request_cancelled_as_it_leaves_the_backlog_gives_its_slot_back():
    async def scenario() -> None:
        replica = ReplicaImpl("app", "d", "r1", b"", b"", {"max_ongoing_requests": 1},
                              loop=asyncio.get_running_loop())
        replica.instance = _Deployment()
        replica.callable = replica.instance
        peer = _Peer()
        replica._on_frame(peer, _request(1, "slow"))  # runs: the one slot
        replica._on_frame(peer, _request(2, "ping"))  # waits in the backlog
        await asyncio.sleep(0)
        assert len(replica.backlog) == 1 and replica.ongoing == 2
        replica.instance.release.set()
        for _ in range(20):  # request 1 finishes; its finish starts request 2's task ...
            await asyncio.sleep(0)
            if not replica.backlog:
                break
        assert peer.replies(1) == [R_OK] and not replica.backlog
        # ... and its client's cancel arrives before that task's first step (one read of the socket)
        replica._on_frame(peer, (CANCEL, 2))
        replica._on_frame(peer, _request(3, "ping"))
        for _ in range(20):
            await asyncio.sleep(0)
            if peer.replies(3):
                break
        assert peer.replies(2) == [R_ERR]  # told it was cancelled
        assert peer.replies(3) == [R_OK]   # and the slot went to the next request
        await asyncio.sleep(0)  # the finished task's done-callbacks
        assert replica.ongoing == 0 and not replica.tasks

    asyncio.run(scenario())
