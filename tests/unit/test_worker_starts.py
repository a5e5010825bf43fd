"""A burst of actors on one node: worker starts are bounded and queued, the pool answers
"is a worker idle / how many are starting" from indexes, and a worker whose node's listen
queue is full retries its connection instead of dying (and being replaced, over and over)."""

from __future__ import annotations

import asyncio
import os
import socket

import pytest

from raylite._core import protocol as P
from raylite._core.client.core_client import connect_patiently
from raylite._core.config import Config
from raylite._core.node.node import NodeDaemon, PendingLease
from raylite._core.node.worker_pool import WorkerPool
from raylite._core.transport import rpc
from raylite._core.transport.base import ConnectionBrokenError


class _Conn:
    """Stands for a client's connection: open, records what the node sends it."""

    def __init__(self) -> None:
        self.context: dict = {}
        self.sent: list = []

    def is_closed(self) -> bool:
        return False

    def send(self, msg, rid=0) -> None:
        self.sent.append(msg)

    async def request(self, msg, timeout_s=None):
        return P.CreateActorReply(True)


def _node(tmp_path, limit: int) -> NodeDaemon:
    config = Config(shm_dir=str(tmp_path / "shm"), spill_dir=str(tmp_path / "spill"),
                    object_store_bytes=64 << 20, worker_start_concurrency=limit)
    (tmp_path / "shm").mkdir()
    node = NodeDaemon(config, node_id=os.urandom(28), ip="127.0.0.1", resources={"CPU": 20000},
                      labels={}, session_dir=str(tmp_path), token="t", head_address="unix:///nowhere",
                      address="unix:///nowhere")
    node.stopped = asyncio.Event()
    ours, theirs = socket.socketpair()  # stands for the zygote: fork requests pile up unread
    theirs.setblocking(False)
    node.pool._zygote_sock = ours
    node._zygote_end = theirs  # keep it open
    return node


def _actor_request(node: NodeDaemon, conn: _Conn, loop) -> PendingLease:
    actor_id = os.urandom(16)
    fut = loop.create_future()
    lease = P.RequestLease(actor_id, {}, [], {}, "actor")
    return PendingLease(lease, conn, 0, "", (actor_id, [], fut))


def test_a_burst_of_actors_starts_a_bounded_number_of_workers(tmp_path):
    async def scenario() -> None:
        loop = asyncio.get_running_loop()
        node = _node(tmp_path, limit=4)
        head = _Conn()
        requests = [_actor_request(node, head, loop) for _ in range(300)]
        node.pending.extend(requests)
        node._try_grant()
        assert node.pool.starting_total == 4 and len(node.pool.workers) == 4
        assert len(node.pending) == 300
        # each worker that registers takes the next actor, and one more worker starts
        for round_ in range(10):
            rec = next(r for r in node.pool.workers.values() if r.state == "STARTING")
            rec.conn = _Conn()
            node.pool.set_state(rec, "IDLE")
            node._try_grant()
            assert rec.state == "ACTOR"
            assert node.pool.starting_total == 4
            assert len(node.pending) == 300 - round_ - 1
        await asyncio.sleep(0)  # the launched actors' CreateActor round trips
        assert sum(1 for r in requests if r.actor[2].done()) == 10
        assert len(node.pool.workers) == 14

    asyncio.run(scenario())


def test_worker_pool_indexes_follow_every_state_change():
    pool = WorkerPool("unix:///nowhere", "t", "/tmp", lambda rec: None)
    ours, theirs = socket.socketpair()
    pool._zygote_sock = ours
    recs = [pool.start_worker("", {}, now=0.0) for _ in range(3)] + [pool.start_worker("env", {}, now=0.0)]
    assert (pool.starting(""), pool.starting("env"), pool.starting_total) == (3, 1, 4)
    assert pool.idle("") is None and not pool.has_idle()
    pool.set_state(recs[0], "IDLE")
    pool.set_state(recs[1], "IDLE")
    assert pool.idle("") is recs[0] and pool.idle("env") is None and pool.starting("") == 1
    pool.set_state(recs[0], "LEASED")
    assert pool.idle("") is recs[1]
    pool.set_state(recs[1], "DEAD")
    pool.set_state(recs[3], "DEAD")
    assert pool.idle("") is None and not pool.has_idle()
    assert (pool.starting(""), pool.starting("env"), pool.starting_total) == (1, 0, 1)
    assert set(pool.workers) == {recs[0].worker_id, recs[2].worker_id}
    ours.close()
    theirs.close()


def test_connect_retries_while_the_listen_queue_is_full(tmp_path):
    """The node's socket queue is full (EAGAIN): the client waits its turn and gets in.
    (On uvloop, as in workers: it reports EAGAIN where asyncio's loop waits for writability.)"""
    uvloop = pytest.importorskip("uvloop")

    async def scenario() -> None:
        path = str(tmp_path / "node.sock")
        busy = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        busy.bind(path)
        busy.listen(0)
        fillers = []
        for _ in range(64):  # fill its queue until the kernel refuses more
            s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            s.setblocking(False)
            try:
                s.connect(path)
            except BlockingIOError:
                s.close()
                break
            fillers.append(s)
        with pytest.raises(ConnectionBrokenError):  # a plain connect fails at once
            await rpc.connect(f"unix://{path}", {}, token="t", role="worker")

        server = await rpc.listen(f"unix://{tmp_path / 'later.sock'}", {}, token="t")
        attempt = asyncio.ensure_future(
            connect_patiently(f"unix://{path}", {}, token="t", role="worker", within_s=10))
        await asyncio.sleep(0.2)
        assert not attempt.done()
        os.rename(tmp_path / "later.sock", path)  # the node gets to it: room in the queue
        conn = await asyncio.wait_for(attempt, 10)
        assert not conn.is_closed()
        conn.close()
        server.close()
        busy.close()
        for s in fillers:
            s.close()

    loop = uvloop.new_event_loop()
    try:
        loop.run_until_complete(scenario())
    finally:
        loop.close()


def test_connect_does_not_retry_a_missing_node(tmp_path):
    async def scenario() -> None:
        with pytest.raises(ConnectionBrokenError):
            await connect_patiently(f"unix://{tmp_path / 'absent.sock'}", {}, token="t", role="worker",
                                    within_s=10)

    asyncio.run(scenario())
