"""A worker the node has killed is never handed out again, even before its exit is seen.

The node kills with SIGKILL and learns of the exit only when the worker's connection closes.
In between, the lessee may return the lease: removing a placement group kills the workers
leased in it while their owners still cache the leases. The returned worker used to go back
to the idle pool, and the next actor got the dying process ("the actor's worker died while
starting: connection to worker lost"; seen in a random-order run of the placement group
capture tests)."""

from __future__ import annotations

import asyncio
import os

from raylite._core import protocol as P
from raylite._core import resources as R
from raylite._core import scheduling as S
from tests.unit.test_worker_starts import _actor_request, _Conn, _node


class _WorkerConn(_Conn):
    """A registered worker's connection; closing it is how a pid-less worker is killed."""

    def __init__(self) -> None:
        super().__init__()
        self.closed = False

    def close(self) -> None:
        self.closed = True


class _Owner(_Conn):
    """A lessee on this node (a driver): the node watches its connection close."""

    def __init__(self) -> None:
        super().__init__()
        self.on_close: list = []


def _registered_worker(node):
    rec = node.pool.start_worker("", {}, now=0.0)
    rec.conn = _WorkerConn()
    node.pool.set_state(rec, "IDLE")
    return rec


def test_a_worker_killed_with_its_placement_group_is_not_reused_when_its_lease_returns(tmp_path):
    async def scenario() -> None:
        loop = asyncio.get_running_loop()
        node = _node(tmp_path, limit=4)
        worker = _registered_worker(node)
        pg_id = os.urandom(18)
        reply = await node._on_reserve_bundles(None, P.ReserveBundles(pg_id, [[0, R.to_fixed({"CPU": 2})]]), 1)
        assert reply.ok
        owner = _Owner()
        in_group = S.bundle_request(R.to_fixed({"CPU": 1}), pg_id.hex(), None)
        node._on_request_lease(owner, P.RequestLease(b"lease-1", in_group, [], {}, "task"), 1)
        assert worker.state == "LEASED" and node.leases[b"lease-1"] is worker

        node._on_release_bundles(None, P.ReleaseBundles(pg_id, [0]), 0)
        assert worker.conn.closed and worker.kill_reason == "its placement group was removed"
        # the owner returns its cached lease before the node has seen the worker go
        node._on_return_lease(owner, P.ReturnLease(b"lease-1"), 0)
        assert worker.state == "STOPPING" and node.pool.idle("") is None

        actor = _actor_request(node, _Conn(), loop)
        node.pending.append(actor)
        node._try_grant()
        assert worker.actor_id == b"" and worker.state == "STOPPING"
        assert node.pool.starting_total == 1  # the actor waits for a fresh worker
        node._worker_gone(worker, "exited")  # its exit is seen: it is forgotten
        assert worker.worker_id not in node.pool.workers

    asyncio.run(scenario())


def test_a_worker_being_stopped_after_a_flush_is_not_leased_meanwhile(tmp_path):
    """KillWorker (a force-cancel, an owner that died) first lets the worker flush its task
    events, for up to a second; a lease returned then must not hand the worker out again."""
    async def scenario() -> None:
        loop = asyncio.get_running_loop()
        node = _node(tmp_path, limit=4)
        worker = _registered_worker(node)
        flushing = asyncio.Event()
        release = asyncio.Event()

        async def slow_flush(msg, timeout_s=None):
            flushing.set()
            await release.wait()
            return P.Ack()

        worker.conn.request = slow_flush
        owner = _Owner()
        node._on_request_lease(owner, P.RequestLease(b"lease-2", R.to_fixed({"CPU": 1}), [], {}, "task"), 1)
        assert worker.state == "LEASED"
        node._on_kill_worker(None, P.KillWorker(worker.worker_id, "cancelled with force=True"), 0)
        await flushing.wait()
        node._on_return_lease(owner, P.ReturnLease(b"lease-2"), 0)
        actor = _actor_request(node, _Conn(), loop)
        node.pending.append(actor)
        node._try_grant()
        assert worker.state == "STOPPING" and worker.actor_id == b""
        release.set()
        await asyncio.sleep(0.05)
        assert worker.conn.closed and worker.kill_reason == "cancelled with force=True"

    asyncio.run(scenario())
