"""Worker leases of a CoreClient: the scheduling queues of its normal tasks, the leases it
asks its node (or, after spillback, another node) for, and the pumping that keeps each leased
worker busy: pipelined pushes while tasks are short, one at a time while they are long, and
SPREAD bursts that give every node a task before any node gets a second.

What a reply means for its task (done, retried, failed) is the task submitter's (tasks.py).
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import time
from typing import TYPE_CHECKING, Any

from raylite import exceptions as E
from raylite._core import protocol as P
from raylite._core.client.records import Lease, SchedulingQueue, TaskRecord
from raylite._core.strategy import decode as decode_strategy
from raylite._core.task_spec import TaskSpec, env_key
from raylite._core.transport.base import ConnectionBrokenError, HandshakeError

if TYPE_CHECKING:
    from raylite._core.client.links import ClientLinks
    from raylite._core.client.tasks import TaskSubmitter

# tasks whose service time averages below this are pipelined (see _pipeline_depth) ...
PIPELINE_BELOW_S = 0.002
# ... with about this much work queued on each worker: enough that it never waits for the next
# push (a reply, the owner's turn, the push: a few hundred microseconds on a busy machine), little
# enough that the tail of a burst still spreads over every worker
PIPELINE_WINDOW_S = 0.002


class Leases:
    """Owns the scheduling queues (by resources, runtime env and strategy) and the leases held."""

    def __init__(self, links: ClientLinks) -> None:
        self._links = links
        self.queues: dict[tuple, SchedulingQueue] = {}
        self.leases: dict[bytes, Lease] = {}  # lease id -> lease
        self.tasks: TaskSubmitter  # set by the CoreClient once built (replies go back to it)

    def enqueue(self, rec: TaskRecord, spec: TaskSpec) -> None:
        """I/O loop: a task whose arguments are ready joins its queue, which is pumped this turn."""
        key = (tuple(sorted(spec.resources.items())), env_key(spec.runtime_env), tuple(map(str, spec.strategy)))
        q = self.queues.get(key)
        if q is None:
            q = self.queues[key] = SchedulingQueue(key, spec.resources, spec.runtime_env, spec.strategy,
                                                   spec.display_name())
        if decode_strategy(q.strategy).is_spread and not q.spread_batch:
            q.spread_batch = os.urandom(8)  # a new burst: it covers every node before any gets two
            q.spread_covered = q.spread_cover_seen = False
            q.spread_open = 0
        q.tasks.append(rec)
        self.pump_soon(q)

    def drop_queued(self, rec: TaskRecord) -> None:
        """A cancelled task still waiting for a worker leaves its queue."""
        for q in self.queues.values():
            if rec in q.tasks:
                q.tasks.remove(rec)

    def holds_none(self) -> bool:
        return not self.leases

    def node_died(self, node_id: bytes) -> None:
        """Links to a dead node's workers may hang (cut cable): drop them; their tasks retry."""
        for lease in list(self.leases.values()):
            if lease.node_id == node_id:
                lease.conn.abort()

    def return_all(self) -> None:
        """Shutting down: every lease goes back to the node that granted it."""
        node = self._links.node
        for lease in list(self.leases.values()):
            try:
                (lease.node_conn or node).send(P.ReturnLease(lease.lease_id))
            except Exception:  # noqa: BLE001
                pass

    def _pipeline_depth(self, q: SchedulingQueue) -> int:
        """How many tasks one worker may hold at once for this queue.

        Short tasks (well under a millisecond) are pipelined so the worker never idles
        waiting for the next push; anything longer goes one at a time, so a queue of
        slow tasks spreads over all the workers the node grants.
        """
        if q.avg_task_s < PIPELINE_BELOW_S and len(q.tasks) > len(q.leases):
            most = self._links.config.max_tasks_in_flight_per_worker
            return max(2, min(most, int(PIPELINE_WINDOW_S / max(q.avg_task_s, 1e-6))))
        return 1

    def pump_soon(self, q: SchedulingQueue) -> None:
        """One `_pump` per loop turn however many tasks were queued in it (a burst of submissions
        would otherwise walk every lease once per task)."""
        if not q.pump_pending:
            q.pump_pending = True
            self._links.loop.call_soon(self._pump_now, q)

    def _pump_now(self, q: SchedulingQueue) -> None:
        q.pump_pending = False
        self._pump(q)

    def _fill(self, q: SchedulingQueue, lease: Lease, limit: int) -> None:
        """Push queued tasks onto `lease` up to `limit` in flight."""
        if lease.blocked:
            if lease.in_flight:
                return
            lease.blocked = False
        if lease.retiring:
            return
        spreading = bool(q.spread_batch) and not q.spread_covered
        while q.tasks and lease.in_flight < limit and not lease.dead:
            if spreading and lease.batch == q.spread_batch:
                break  # its node ran a task of this burst: every other node gets one first
            if q.tasks[0].spec.max_calls and lease.in_flight:
                break  # a max_calls task goes alone: its worker may exit after it
            rec = q.tasks.popleft()
            if rec.cancelled:
                continue
            lease.batch = q.spread_batch
            self._push(rec, lease)
            if rec.spec.max_calls:
                break

    def _refill(self, lease: Lease) -> None:
        """After a reply on `lease`: keep it busy, or let it go once the queue is empty. O(1):
        the other leases of the queue are refilled on their own replies."""
        q = lease.queue
        limit = self._pipeline_depth(q)
        if lease.in_flight <= limit // 2:  # pushes go out in batches: a syscall per few tasks
            self._fill(q, lease, limit)
        if q.tasks:
            self._request_leases(q)
        elif lease.in_flight == 0 and q.spread_batch:
            self._return_lease(lease)  # the burst is over (see _pump)
            if not q.leases:
                q.spread_batch = b""
        elif lease.in_flight == 0 and lease.idle_handle is None:
            lease.idle_handle = self._links.loop.call_later(self._links.config.lease_idle_timeout_s, self._return_lease, lease)

    def _request_leases(self, q: SchedulingQueue) -> None:
        want = min(len(q.tasks), 16) - q.requesting
        for _ in range(max(0, want)):
            q.requesting += 1
            self._links.loop.create_task(self._request_lease(q))

    def _pump(self, q: SchedulingQueue) -> None:
        limit = self._pipeline_depth(q)
        for lease in q.leases:
            if not q.tasks:
                break
            self._fill(q, lease, limit)
        self._request_leases(q)
        if not q.tasks and q.spread_batch:
            # the burst is over: its workers go back now, and the next burst spreads anew
            for lease in list(q.leases):
                self._return_lease(lease)
            if not q.leases:
                q.spread_batch = b""
        elif not q.tasks:
            for lease in q.leases:
                if lease.in_flight == 0 and lease.idle_handle is None:
                    lease.idle_handle = self._links.loop.call_later(self._links.config.lease_idle_timeout_s,
                                                             self._return_lease, lease)

    async def _request_lease(self, q: SchedulingQueue) -> None:
        spread: dict = {}  # a SPREAD pick: its burst, and whether it belongs to the first round
        try:
            await self._request_lease_once(q, spread)
        finally:
            if spread.get("first") and spread["batch"] == q.spread_batch:
                q.spread_open -= 1  # that node has its task (or will not get one)
                if q.spread_cover_seen and q.spread_open == 0 and not q.spread_covered:
                    q.spread_covered = True
                    self._pump(q)  # leases held back for the burst take tasks again

    async def _request_lease_once(self, q: SchedulingQueue, spread: dict) -> None:
        from raylite._core.ids import WorkerID

        lease_id = WorkerID.from_random()
        node_conn = self._links.node
        try:
            if q.spread_batch:
                try:
                    reply, node_conn = await self._lease_for_spread(q, lease_id, spread)
                except (ConnectionBrokenError, HandshakeError):  # the picked node died meanwhile: ask again
                    q.requesting -= 1
                    self._links.loop.call_later(0.1, self._pump, q)
                    return
            else:
                answered = self._links.loop.create_future()  # for return_idle_leases' callers
                q.asking[lease_id] = (self._links.node, answered)
                try:
                    reply = await self._links.node.request(
                        P.RequestLease(lease_id, q.resources, q.strategy, q.runtime_env, q.description))
                finally:
                    q.asking.pop(lease_id, None)
                    answered.set_result(None)
            if reply.spillback_address:  # another node has room: lease from it directly
                try:
                    node_conn = await self._links.connection(reply.spillback_address)
                    reply = await node_conn.request(P.RequestLease(
                        lease_id, q.resources, q.strategy, q.runtime_env, q.description, False))
                except (ConnectionBrokenError, HandshakeError):
                    # it died meanwhile (a node shutting down accepts, then closes during the
                    # handshake; the head picked it, so it is one of the cluster's): ask again
                    q.requesting -= 1
                    self._links.loop.call_later(0.1, self._pump, q)
                    return
        except Exception as e:  # noqa: BLE001
            q.requesting -= 1
            self._fail_queue(q, E.RaySystemError(f"lost the local node while asking for a worker: {e}"))
            return
        q.requesting -= 1
        if reply.error_type:
            if reply.error_type == "Cancelled":
                # tasks queued after the cancel was sent counted on this request: ask anew
                if q.tasks:
                    self._pump(q)
                return
            err_cls = getattr(E, reply.error_type, E.RaySystemError)
            self._fail_queue(q, err_cls(reply.error))
            return
        if not q.tasks and not spread:  # the queue ran dry meanwhile: give it back at once
            with contextlib.suppress(Exception):
                node_conn.send(P.ReturnLease(lease_id))
            return
        try:
            conn = await self._links.connection(reply.worker_address)
        except Exception:  # noqa: BLE001
            with contextlib.suppress(Exception):
                node_conn.send(P.ReturnLease(lease_id, True))
            self._pump(q)
            return
        lease = Lease(lease_id, reply.worker_id, conn, q, node_conn=node_conn, node_id=reply.node_id,
                      gpu_ids=list(reply.gpu_ids or []), device_ids=dict(reply.device_ids or {}))
        self.leases[lease_id] = lease
        q.leases.append(lease)
        conn.on_close.append(lambda c, lease=lease: self._lease_conn_lost(lease))
        if not q.tasks or spread.get("batch", q.spread_batch) != q.spread_batch:  # none, or a past burst's
            self._return_lease(lease)
            return
        self._refill(lease)

    async def _lease_for_spread(self, q: SchedulingQueue, lease_id: bytes,
                                spread: dict) -> tuple[P.RequestLeaseReply, Any]:
        """A SPREAD burst asks the head for its next node (the head walks every node once per
        burst), then leases there without spillback. Returns (reply, the node's connection).
        `spread` notes the burst and whether the pick was of its first round (up to the one
        that went round): the burst is covered when all of those have had their tasks."""
        batch = spread["batch"] = q.spread_batch
        pick: P.PickNodeReply = await self._links.head.request(
            P.PickNode(q.resources, q.strategy, self._links.node_id, q.description, None, batch))
        if pick.error_type:
            return P.RequestLeaseReply(lease_id, error_type=pick.error_type, error=pick.error), self._links.node
        if q.spread_batch == batch and not q.spread_cover_seen:
            spread["first"] = True
            q.spread_open += 1
            q.spread_cover_seen = pick.covered
        request = P.RequestLease(lease_id, q.resources, q.strategy, q.runtime_env, q.description, False)
        conn = self._links.node if pick.node_id == self._links.node_id else await self._links.connection(pick.address)
        return await conn.request(request), conn

    def _lease_conn_lost(self, lease: Lease) -> None:
        lease.dead = True
        if lease in lease.queue.leases:
            lease.queue.leases.remove(lease)
        self.leases.pop(lease.lease_id, None)

    def _return_lease(self, lease: Lease, retire: bool = False) -> None:
        """Give the lease back to its node; `retire`: its worker reached a function's max_calls,
        so the node never leases it again (it exits once its objects are released)."""
        lease.idle_handle = None
        if lease.in_flight or lease.dead:
            return
        retire = retire or lease.retiring
        if lease in lease.queue.leases:
            lease.queue.leases.remove(lease)
        self.leases.pop(lease.lease_id, None)
        lease.dead = True
        try:
            (lease.node_conn or self._links.node).send(P.ReturnLease(lease.lease_id, retire_worker=retire))
        except Exception:  # noqa: BLE001
            pass

    def on_release_idle_leases(self, conn, msg, rid):
        self.return_idle_leases()

    def return_idle_leases(self) -> list[asyncio.Future]:
        """Give back every lease with nothing running and nothing queued (on the I/O loop).

        Lease requests still waiting at the node for a queue that has run dry are cancelled
        first: else the CPU a return frees goes straight to one of them, for no task. Returns
        a future per cancelled request, done once the node has answered it: a grant that
        crossed the cancel is given back as soon as it arrives.
        """
        answered: list[asyncio.Future] = []
        for q in self.queues.values():
            if not q.tasks:
                for lease_id, (conn, done) in list(q.asking.items()):
                    with contextlib.suppress(Exception):
                        conn.send(P.CancelLease(lease_id))
                    answered.append(done)
        for lease in list(self.leases.values()):
            if lease.in_flight == 0 and not lease.queue.tasks:
                if lease.idle_handle is not None:
                    lease.idle_handle.cancel()
                self._return_lease(lease)
        return answered

    def _fail_queue(self, q: SchedulingQueue, err: Exception) -> None:
        while q.tasks:
            rec = q.tasks.popleft()
            self.tasks.finish_with_error(rec, err)

    def _push(self, rec: TaskRecord, lease: Lease) -> None:
        if lease.idle_handle is not None:
            lease.idle_handle.cancel()
            lease.idle_handle = None
        lease.in_flight += 1
        rec.lease = lease
        rec.worker_conn = lease.conn
        if lease.gpu_ids or rec.spec.gpu_ids or lease.device_ids or rec.spec.device_ids:
            rec.spec = rec.spec.replace(gpu_ids=lease.gpu_ids, device_ids=lease.device_ids)
        fut = lease.conn.request_future(P.PushTask(rec.spec.to_wire()))
        pushed_at = time.monotonic()
        fut.add_done_callback(lambda f: self._on_reply(rec, lease, f, pushed_at))

    @staticmethod
    def _note_service_time(lease: Lease, pushed_at: float) -> None:
        """Fold this task's time on its worker into its queue's average.

        A task pushed before the lease's previous reply waited in the worker's queue: its
        service time is the gap between the two replies, not push-to-reply (which grows with
        the pipeline's depth and would make the depth it chooses swing)."""
        now = time.monotonic()
        since = lease.last_reply_at if pushed_at < lease.last_reply_at else pushed_at
        lease.last_reply_at = now
        q = lease.queue
        q.avg_task_s = 0.8 * q.avg_task_s + 0.2 * (now - since)

    def _on_reply(self, rec: TaskRecord, lease: Lease | None, fut: asyncio.Future,
                       pushed_at: float = 0.0) -> None:
        if lease is not None:
            lease.in_flight -= 1
        exc = fut.exception() if not fut.cancelled() else asyncio.CancelledError()
        if exc is not None:
            if lease is not None:
                self._lease_conn_lost(lease)
            self.tasks.worker_died(rec, exc)
        elif fut.result().error_kind == "bounced":
            # the worker is blocked in get(): run this task elsewhere, and push nothing
            # more to that worker until its blocked task is done
            if lease is not None:
                lease.blocked = True
                lease.queue.tasks.appendleft(rec)
            else:
                self.tasks.requeue(rec)
        else:
            reply = fut.result()
            if lease is not None and pushed_at:
                self._note_service_time(lease, pushed_at)
            if reply.worker_exiting and lease is not None:
                lease.retiring = True
            self.tasks.task_done(rec, reply)
        if lease is not None and not lease.dead:
            if lease.retiring:
                if lease.in_flight == 0:
                    self._return_lease(lease, retire=True)
                    self._pump(lease.queue)
            elif lease.blocked:  # a task bounced back to the queue: other leases may take it
                self._pump(lease.queue)
            else:
                self._refill(lease)
