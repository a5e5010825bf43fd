"""Task submission of a CoreClient: argument packing, scheduling queues, worker leases,
pipelined pushes, replies and retries, streamed generators and cancellation.

A mixin: CoreClient inherits it, and its methods use the client's state."""

from __future__ import annotations

import asyncio
import contextlib
import os
import pickle
import time
from typing import Any

from raylite import exceptions as E
from raylite._core import protocol as P
from raylite._core import serialization as ser
from raylite._core.client.records import (
    GeneratorState,
    Lease,
    ObjectEntry,
    SchedulingQueue,
    TaskRecord,
    _Latch,
)
from raylite._core.client.refs import DynamicObjectRefGenerator, ObjectRef, ObjectRefGenerator
from raylite._core.ids import ObjectID
from raylite._core.strategy import decode as decode_strategy
from raylite._core.task_spec import (
    DYNAMIC,
    KIND_ACTOR_CALL,
    STREAMING,
    ArgPlaceholder,
    PackedArgs,
    TaskSpec,
    env_key,
)
from raylite._core.transport.base import ConnectionBrokenError, RemoteError


class TaskSubmitter:
    """Tasks from submission to their last reply (mixed into CoreClient)."""

    def export_function(self, function_id: bytes, pickled: bytes) -> None:
        if function_id in self._exported:
            return
        self.run_sync(self.head.request(P.KvPut("fn", function_id, pickled, False)))
        self._exported.add(function_id)

    def load_function(self, function_id: bytes) -> Any:
        fn = self._fn_cache.get(function_id)
        if fn is None:
            reply = self.run_sync(self.head.request(P.KvGet("fn", function_id)))
            if reply.value is None:
                raise E.RaySystemError(f"function {function_id.hex()} was not exported to this cluster")
            import cloudpickle

            fn = cloudpickle.loads(reply.value)
            self._fn_cache[function_id] = fn
        return fn

    def pack_args(self, args: tuple, kwargs: dict, what: str) -> tuple[list, list, list]:
        """Pickle (args, kwargs); top-level refs become placeholders resolved by the executor.

        Returns (args payload, arg_refs, pinned object ids).
        """
        if not args and not kwargs:
            return _NO_ARGS, _NONE, _NONE
        if all(type(a) in _PLAIN for a in args) and all(type(v) in _PLAIN for v in kwargs.values()):
            # numbers and short strings: the standard pickler is enough and much cheaper
            meta = pickle.dumps((args, kwargs), protocol=5)
            if len(meta) <= self.config.inline_threshold_bytes:
                return ["inline", meta, []], [], []
        arg_refs: list = []
        pinned: list = []
        if any(isinstance(a, ObjectRef) for a in args) or any(isinstance(v, ObjectRef) for v in kwargs.values()):
            args = list(args)
            for i, a in enumerate(args):
                if isinstance(a, ObjectRef):
                    args[i] = ArgPlaceholder(len(arg_refs))
                    arg_refs.append([len(arg_refs), a._id, a._owner])
            kwargs = dict(kwargs)
            for k, v in kwargs.items():
                if isinstance(v, ObjectRef):
                    kwargs[k] = ArgPlaceholder(len(arg_refs))
                    arg_refs.append([len(arg_refs), v._id, v._owner])
        so = ser.serialize((tuple(args), kwargs), what=f"the arguments of {what}", arguments=True)
        pinned = [r[1] for r in arg_refs] + [r._id for r in so.contained_refs]
        if so.total_bytes() > self.config.inline_threshold_bytes:
            ref = self.put(PackedArgs(so.meta, [memoryview(b) for b in so.buffers]))
            pinned.append(ref._id)
            payload = ["ref", ref._id, self.address]
        else:
            payload = ["inline", *so.to_inline()]
        with self._lock:
            self.refs.add_submitted(pinned)
        return payload, arg_refs, pinned

    def submit_task(self, spec: TaskSpec, pinned: list, retry_exceptions: Any) -> Any:
        return_ids = [bytes(oid) for oid in spec.return_ids()]  # plain bytes: shared by every table
        with self._lock:  # owned and referenced in one go (a task may have 10,000 returns)
            for oid in return_ids:
                self.refs.own(oid)
                self.refs.add_local(oid, self.address)
                self.entries[oid] = ObjectEntry()
        rec = TaskRecord(spec, spec.max_retries, retry_exceptions, pinned)
        if spec.num_returns in (STREAMING, DYNAMIC):
            self._generators[spec.task_id] = GeneratorState(dynamic=spec.num_returns == DYNAMIC)
            refs = [ObjectRef.counted(oid, self.address, self) for oid in return_ids]
            gen = ObjectRefGenerator(spec.task_id, self, refs[0]) if spec.num_returns == STREAMING else None
            self._tasks[spec.task_id] = rec
            self.call_soon(self._enqueue_task, rec)
            return gen if gen is not None else refs[0]
        refs = [ObjectRef.counted(oid, self.address, self) for oid in return_ids]
        self._tasks[spec.task_id] = rec
        self.call_soon(self._enqueue_task, rec)
        if spec.num_returns == 1:
            return refs[0]
        return refs if spec.num_returns > 1 else None

    def _enqueue_task(self, rec: TaskRecord) -> None:
        if rec.cancelled:
            return
        spec = rec.spec
        events = self.task_events
        if spec.kind == KIND_ACTOR_CALL:
            if events is not None:
                events.record(spec.task_id, spec.attempt, spec.job_id, "SUBMITTED_TO_WORKER", time.time(), spec)
            self._send_actor_task(rec)
            return
        if self._dead_nodes and spec.arg_refs:  # arguments lost with a node are rebuilt first
            self._rebuild_lost_args(rec)
            spec = rec.spec
        deps = [self.entries.get(r[1]) for r in spec.arg_refs]
        pending = [e for e in deps if e is not None and e.kind is None]
        if pending:
            latch_left = [len(pending)]

            def one_ready(_entry) -> None:
                latch_left[0] -= 1
                if latch_left[0] == 0:
                    self.loop.call_soon_threadsafe(self._enqueue_task, rec)

            with self._lock:
                still = [e for e in pending if e.kind is None]
                latch_left[0] = len(still)
                for e in still:
                    e.add_waiter(one_ready)
            if still:
                if events is not None:
                    events.record(spec.task_id, spec.attempt, spec.job_id, "PENDING_ARGS_AVAIL", time.time(), spec)
                return
        if events is not None:
            events.record(spec.task_id, spec.attempt, spec.job_id, "PENDING_NODE_ASSIGNMENT", time.time(), spec)
        self._inline_ready_args(rec)
        key = (tuple(sorted(spec.resources.items())), env_key(spec.runtime_env), tuple(map(str, spec.strategy)))
        q = self._queues.get(key)
        if q is None:
            q = self._queues[key] = SchedulingQueue(key, spec.resources, spec.runtime_env, spec.strategy,
                                                    spec.display_name())
        if decode_strategy(q.strategy).is_spread and not q.spread_batch:
            q.spread_batch = os.urandom(8)  # a new burst: it covers every node before any gets two
            q.spread_covered = q.spread_cover_seen = False
            q.spread_open = 0
        q.tasks.append(rec)
        self._pump_soon(q)

    def _inline_ready_args(self, rec: TaskRecord) -> None:
        """Ship ready values of top-level ref args with the task (saves the worker a round trip)."""
        if not rec.spec.arg_refs:
            return
        out = []
        for r in rec.spec.arg_refs:
            entry = self.entries.get(r[1])
            if entry is not None and entry.kind is not None and len(r) == 3:
                out.append([r[0], r[1], r[2], entry.kind, entry.payload])
            else:
                out.append(r)
        rec.spec = rec.spec.replace(arg_refs=out)

    def _pipeline_depth(self, q: SchedulingQueue) -> int:
        """How many tasks one worker may hold at once for this queue.

        Short tasks (well under a millisecond) are pipelined so the worker never idles
        waiting for the next push; anything longer goes one at a time, so a queue of
        slow tasks spreads over all the workers the node grants.
        """
        if q.avg_task_s < PIPELINE_BELOW_S and len(q.tasks) > len(q.leases):
            return self.config.max_tasks_in_flight_per_worker
        return 1

    def _pump_soon(self, q: SchedulingQueue) -> None:
        """One `_pump` per loop turn however many tasks were queued in it (a burst of submissions
        would otherwise walk every lease once per task)."""
        if not q.pump_pending:
            q.pump_pending = True
            self.loop.call_soon(self._pump_now, q)

    def _pump_now(self, q: SchedulingQueue) -> None:
        q.pump_pending = False
        self._pump(q)

    def _fill(self, q: SchedulingQueue, lease: Lease, limit: int) -> None:
        """Push queued tasks onto `lease` up to `limit` in flight."""
        if lease.blocked:
            if lease.in_flight:
                return
            lease.blocked = False
        spreading = bool(q.spread_batch) and not q.spread_covered
        while q.tasks and lease.in_flight < limit and not lease.dead:
            if spreading and lease.batch == q.spread_batch:
                break  # its node ran a task of this burst: every other node gets one first
            rec = q.tasks.popleft()
            if rec.cancelled:
                continue
            lease.batch = q.spread_batch
            self._push(rec, lease)

    def _refill(self, lease: Lease) -> None:
        """After a reply on `lease`: keep it busy, or let it go once the queue is empty. O(1):
        the other leases of the queue are refilled on their own replies."""
        q = lease.queue
        self._fill(q, lease, self._pipeline_depth(q))
        if q.tasks:
            self._request_leases(q)
        elif lease.in_flight == 0 and q.spread_batch:
            self._return_lease(lease)  # the burst is over (see _pump)
            if not q.leases:
                q.spread_batch = b""
        elif lease.in_flight == 0 and lease.idle_handle is None:
            lease.idle_handle = self.loop.call_later(self.config.lease_idle_timeout_s, self._return_lease, lease)

    def _request_leases(self, q: SchedulingQueue) -> None:
        want = min(len(q.tasks), 16) - q.requesting
        for _ in range(max(0, want)):
            q.requesting += 1
            self.loop.create_task(self._request_lease(q))

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
                    lease.idle_handle = self.loop.call_later(self.config.lease_idle_timeout_s,
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
        node_conn = self.node
        try:
            if q.spread_batch:
                try:
                    reply, node_conn = await self._lease_for_spread(q, lease_id, spread)
                except ConnectionBrokenError:  # the picked node died meanwhile: ask again
                    q.requesting -= 1
                    self.loop.call_later(0.1, self._pump, q)
                    return
            else:
                q.asking[lease_id] = self.node
                try:
                    reply = await self.node.request(
                        P.RequestLease(lease_id, q.resources, q.strategy, q.runtime_env, q.description))
                finally:
                    q.asking.pop(lease_id, None)
            if reply.spillback_address:  # another node has room: lease from it directly
                try:
                    node_conn = await self.connection(reply.spillback_address)
                    reply = await node_conn.request(P.RequestLease(
                        lease_id, q.resources, q.strategy, q.runtime_env, q.description, False))
                except ConnectionBrokenError:  # it died meanwhile: ask again
                    q.requesting -= 1
                    self.loop.call_later(0.1, self._pump, q)
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
        try:
            conn = await self.connection(reply.worker_address)
        except Exception:  # noqa: BLE001
            with contextlib.suppress(Exception):
                node_conn.send(P.ReturnLease(lease_id, True))
            self._pump(q)
            return
        lease = Lease(lease_id, reply.worker_id, conn, q, node_conn=node_conn, node_id=reply.node_id,
                      gpu_ids=list(reply.gpu_ids or []))
        self._leases[lease_id] = lease
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
        pick: P.PickNodeReply = await self.head.request(
            P.PickNode(q.resources, q.strategy, self.node_id, q.description, None, batch))
        if pick.error_type:
            return P.RequestLeaseReply(lease_id, error_type=pick.error_type, error=pick.error), self.node
        if q.spread_batch == batch and not q.spread_cover_seen:
            spread["first"] = True
            q.spread_open += 1
            q.spread_cover_seen = pick.covered
        request = P.RequestLease(lease_id, q.resources, q.strategy, q.runtime_env, q.description, False)
        conn = self.node if pick.node_id == self.node_id else await self.connection(pick.address)
        return await conn.request(request), conn

    def _lease_conn_lost(self, lease: Lease) -> None:
        lease.dead = True
        if lease in lease.queue.leases:
            lease.queue.leases.remove(lease)
        self._leases.pop(lease.lease_id, None)

    def _return_lease(self, lease: Lease) -> None:
        lease.idle_handle = None
        if lease.in_flight or lease.dead:
            return
        if lease in lease.queue.leases:
            lease.queue.leases.remove(lease)
        self._leases.pop(lease.lease_id, None)
        lease.dead = True
        try:
            (lease.node_conn or self.node).send(P.ReturnLease(lease.lease_id))
        except Exception:  # noqa: BLE001
            pass

    def _on_release_idle_leases(self, conn, msg, rid):
        self.return_idle_leases()

    def return_idle_leases(self) -> None:
        """Give back every lease with nothing running and nothing queued (on the I/O loop).

        Lease requests still waiting at the node for a queue that has run dry are cancelled
        first: else the CPU a return frees goes straight to one of them, for no task.
        """
        for q in self._queues.values():
            if not q.tasks:
                for lease_id, conn in list(q.asking.items()):
                    with contextlib.suppress(Exception):
                        conn.send(P.CancelLease(lease_id))
        for lease in list(self._leases.values()):
            if lease.in_flight == 0 and not lease.queue.tasks:
                if lease.idle_handle is not None:
                    lease.idle_handle.cancel()
                self._return_lease(lease)

    def _fail_queue(self, q: SchedulingQueue, err: Exception) -> None:
        while q.tasks:
            rec = q.tasks.popleft()
            self._finish_with_error(rec, err)

    def _push(self, rec: TaskRecord, lease: Lease) -> None:
        if lease.idle_handle is not None:
            lease.idle_handle.cancel()
            lease.idle_handle = None
        lease.in_flight += 1
        rec.lease = lease
        rec.worker_conn = lease.conn
        if lease.gpu_ids or rec.spec.gpu_ids:
            rec.spec = rec.spec.replace(gpu_ids=lease.gpu_ids)
        fut = lease.conn.request_future(P.PushTask(rec.spec.to_wire()))
        pushed_at = time.monotonic()
        fut.add_done_callback(lambda f: self._on_task_reply(rec, lease, f, pushed_at))

    def _on_task_reply(self, rec: TaskRecord, lease: Lease | None, fut: asyncio.Future,
                       pushed_at: float = 0.0) -> None:
        if lease is not None:
            lease.in_flight -= 1
        exc = fut.exception() if not fut.cancelled() else asyncio.CancelledError()
        if exc is not None:
            if lease is not None:
                self._lease_conn_lost(lease)
            self._task_worker_died(rec, exc)
        elif fut.result().error_kind == "bounced":
            # the worker is blocked in get(): run this task elsewhere, and push nothing
            # more to that worker until its blocked task is done
            if lease is not None:
                lease.blocked = True
                lease.queue.tasks.appendleft(rec)
            else:
                self._requeue(rec)
        else:
            if lease is not None and pushed_at:
                q = lease.queue
                q.avg_task_s = 0.8 * q.avg_task_s + 0.2 * (time.monotonic() - pushed_at)
            self._task_done(rec, fut.result())
        if lease is not None and not lease.dead:
            if lease.blocked:  # a task bounced back to the queue: other leases may take it
                self._pump(lease.queue)
            else:
                self._refill(lease)

    def _task_worker_died(self, rec: TaskRecord, exc: BaseException) -> None:
        if rec.cancelled:
            self._finish_with_error(rec, E.TaskCancelledError(rec.spec.task_id.hex()))
            return
        if rec.retries_left != 0:
            self._record_failed(rec.spec, "WORKER_DIED", f"the worker died ({exc}); the task is retried")
            rec.retries_left -= 1 if rec.retries_left > 0 else 0
            rec.spec = rec.spec.replace(attempt=rec.spec.attempt + 1)
            self._requeue(rec)
            return
        if rec.lease is not None:  # ask its node how it ended, for an error that says so
            self.loop.create_task(self._report_worker_crash(rec, rec.lease, exc))
        else:
            self._fail_crashed(rec, exc, "")

    async def _report_worker_crash(self, rec: TaskRecord, lease: Lease, exc: BaseException) -> None:
        how = ""
        with contextlib.suppress(Exception):
            reply = await (lease.node_conn or self.node).request(P.GetWorkerExit(lease.worker_id), 3.0)
            how = describe_worker_exit(reply)
        self._fail_crashed(rec, exc, how)

    def _fail_crashed(self, rec: TaskRecord, exc: BaseException, how: str) -> None:
        oom = self._oom_kills.get(rec.lease.worker_id) if rec.lease is not None else None
        if oom is not None:
            self._finish_with_error(rec, E.OutOfMemoryError(
                f"Task {rec.spec.display_name()} failed: its worker was {oom} It was tried "
                f"{rec.spec.attempt + 1} time(s) (max_retries)."))
            return
        detail = f" ({exc})" if isinstance(exc, (RemoteError,)) else ""
        how = how or "died unexpectedly (the process exited, crashed, or was killed, e.g. by the OOM killer)"
        self._finish_with_error(rec, E.WorkerCrashedError(
            f"The worker running {rec.spec.display_name()} {how}{detail}. "
            f"It was tried {rec.spec.attempt + 1} time(s); set max_retries to retry it more."))

    def owned_objects(self) -> list:
        """Every object this process owns or references, with its counts (for raylite.util.state)."""
        out = []
        with self._lock:
            for oid, rc in self.refs.refs.items():
                entry = self.entries.get(oid)
                kind = (entry.kind or "") if entry is not None else ""
                out.append([oid, rc.owned, rc.owner_address, kind, _payload_size(kind, entry),
                            rc.local, rc.submitted, sorted(rc.borrowers), rc.contained])
        return out

    def _on_list_owned_objects(self, conn, msg: P.ListOwnedObjects, rid):
        return P.ListOwnedObjectsReply(os.getpid(), self.kind, self.owned_objects())

    def _on_worker_out_of_memory(self, conn, msg: P.WorkerOutOfMemory, rid):
        """The node's memory monitor is killing a worker running one of our tasks: remember why."""
        self._oom_kills[msg.worker_id] = msg.error
        while len(self._oom_kills) > 64:
            self._oom_kills.pop(next(iter(self._oom_kills)))

    def _requeue(self, rec: TaskRecord) -> None:
        self.loop.call_soon(self._enqueue_task, rec)

    def _task_done(self, rec: TaskRecord, reply: P.PushTaskReply) -> None:
        spec = rec.spec
        if reply.error_kind == "app" and rec.retries_left != 0 and self._retryable(rec, reply):
            rec.retries_left -= 1 if rec.retries_left > 0 else 0
            rec.spec = spec.replace(attempt=spec.attempt + 1)
            self._generator_retried(spec)
            self._requeue(rec)
            return
        if self.task_events is not None:
            # the owner knows how the task ended: its record must not depend on the worker's
            # own events, which die with the worker when a short-lived driver exits
            self.task_events.record(spec.task_id, spec.attempt, spec.job_id,
                                    "FAILED" if reply.error_kind else "FINISHED", time.time(),
                                    _OWNER_SAW_ERROR.get(reply.error_kind))
        if spec.num_returns in (STREAMING, DYNAMIC):
            self._generator_finished(rec, reply)
        else:
            for item in reply.returns:
                if len(item) > 3:
                    self._adopt_contained(item[0], item[3])
            self._set_entries([(item[0], item[1], _compact(item[1], item[2])) for item in reply.returns])
            stored = [item[0] for item in reply.returns if item[1] == "s"]
            if stored:  # before its arguments are let go: their lineage is pinned with it
                self.record_lineage(spec, stored)
        self._task_finished(rec, reply.borrowed)

    def _adopt_contained(self, outer: bytes, inner: list) -> None:
        """A returned object holds refs: keep them alive (counted, borrowed) until it is freed.

        The worker registered us as their borrower before replying; if we no longer
        track the outer object, give those borrows back at once."""
        pairs = [(i[0], i[1]) for i in inner]
        with self._lock:
            if self.refs.count(outer) is not None:
                self.refs.add_contained(outer, pairs)
                return
        unborrow = [(owner, oid) for oid, owner in pairs if owner != self.address]
        if unborrow:
            self._release([], unborrow)

    def _retryable(self, rec: TaskRecord, reply: P.PushTaskReply) -> bool:
        rex = rec.retry_exceptions
        if rex is True:
            return True
        if not rex:
            return False
        try:
            err = ser.from_inline(reply.returns[0][2]) if reply.returns and reply.returns[0][1] == "e" else None
        except Exception:  # noqa: BLE001
            return False
        cause = getattr(err, "cause", None)
        return isinstance(cause, tuple(rex))

    def _task_finished(self, rec: TaskRecord, borrowed: list) -> None:
        self._tasks.pop(rec.spec.task_id, None)
        with self._lock:
            for oid, addr in borrowed or []:
                self.refs.add_borrower(oid, addr)
            free, unborrow = self.refs.remove_submitted(rec.dep_ids)
        if free or unborrow:
            self._release(free, unborrow)

    def _record_failed(self, spec: Any, error_type: str, message: str) -> None:
        if self.task_events is not None:
            self.task_events.record(spec.task_id, spec.attempt, spec.job_id, "FAILED", time.time(),
                                    {"error_type": error_type, "error_message": message[:2000]})

    def _finish_with_error(self, rec: TaskRecord, err: BaseException) -> None:
        self._record_failed(rec.spec, _ERROR_TYPES.get(type(err).__name__, "TASK_EXECUTION_EXCEPTION"), str(err))
        payload = ser.serialize(err, kind=ser.KIND_ERROR).to_inline()
        spec = rec.spec
        if spec.num_returns in (STREAMING, DYNAMIC):
            gen = self._generators.get(spec.task_id)
            if gen is not None:
                gen.error = ("e", payload)
                self._generator_finished(rec, None)
        else:
            for oid in spec.return_ids():
                self._set_entry(oid, "e", payload)
        self._task_finished(rec, [])

    # ================================================================ generators
    def _generator_retried(self, spec: Any) -> None:
        """A generator task runs again: a dynamic generator's refs are the retry's values only
        (nobody has seen the first attempt's), so its list starts over; a streaming one keeps
        the refs already handed out and the retry's values replace theirs index by index."""
        gen = self._generators.get(spec.task_id)
        if gen is None:
            return
        gen.error = None
        if gen.dynamic:
            with self._lock:
                gen.items = []

    def _on_generator_item(self, conn, msg: P.GeneratorItem, rid):
        gen = self._generators.get(msg.task_id)
        oid, kind, payload = msg.item[:3]
        with self._lock:
            self.refs.own(oid)
            self.entries[oid] = ObjectEntry(kind, payload)
        if len(msg.item) > 3:
            self._adopt_contained(oid, msg.item[3])
        if gen is None or msg.index < len(gen.items):  # a retry's value for a ref already out
            return
        ref = ObjectRef(oid, self.address)
        with self._lock:
            gen.items.append(ref)
            waiters, gen.waiters = gen.waiters, []
        for w in waiters:
            w.count_down()

    def _generator_finished(self, rec: TaskRecord, reply: P.PushTaskReply | None) -> None:
        gen = self._generators.get(rec.spec.task_id)
        if gen is None:
            return
        if reply is not None and reply.error_kind:
            gen.error = (reply.returns[0][1], reply.returns[0][2]) if reply.returns else None
        first = rec.spec.return_ids()[0]
        if gen.dynamic:
            if gen.error and (reply is None or reply.error_kind != "app"):
                self._set_entry(first, *gen.error)
            else:
                if gen.error:  # the user's generator raised: its error is the final item, as in Ray
                    self._append_error_item(rec.spec.task_id, gen)
                value = DynamicObjectRefGenerator(list(gen.items))
                so = ser.serialize(value)
                self._set_entry(first, "v", so.to_inline())
                with self._lock:
                    self.refs.add_contained(first, [(r._id, r._owner) for r in gen.items])
        elif gen.error and (reply is None or reply.error_kind != "app"):
            self._set_entry(first, *gen.error)  # the task itself failed: completed() raises it
        else:  # it returned, or the user's generator raised (the stream carries that error): None
            self._set_entry(first, "v", ser.serialize(None).to_inline())
        with self._lock:
            gen.done = True
            waiters, gen.waiters = gen.waiters, []
        for w in waiters:
            w.count_down()
        if gen.dynamic:
            self._generators.pop(rec.spec.task_id, None)

    def _append_error_item(self, task_id: bytes, gen: GeneratorState) -> None:
        oid = ObjectID.for_return(task_id, len(gen.items) + 2)
        kind, payload = gen.error
        with self._lock:
            self.refs.own(oid)
            self.entries[oid] = ObjectEntry(kind, payload)
        ref = ObjectRef(oid, self.address)
        with self._lock:
            gen.items.append(ref)
        gen.error = None

    def next_generator_item(self, task_id: bytes, index: int, timeout: float | None) -> ObjectRef | None:
        gen = self._generators.get(task_id)
        if gen is None:
            return None
        while True:
            with self._lock:
                if index < len(gen.items):
                    return gen.items[index]
                if gen.done:
                    if gen.error:  # as in Ray, the error is the next item: get() of it raises
                        error_item = True
                    else:
                        return None
                else:
                    error_item = False
                    latch = _Latch(1)
                    gen.waiters.append(latch)
            if error_item:
                self._append_error_item(task_id, gen)  # then the stream ends
                continue
            hook = self.blocked_hook
            if hook is not None:
                hook(True)
            try:
                if not latch.wait(timeout):
                    raise E.GetTimeoutError("timed out waiting for the next generator item")
            finally:
                if hook is not None:
                    hook(False)

    def wait_with_generators(self, items: list, num_returns: int,
                             timeout: float | None) -> tuple[list, list]:
        """`wait()` over ObjectRefs and streaming generators: a generator is ready when its
        next item has been produced, or when it has ended (next() then stops at once)."""
        deadline = None if timeout is None else time.monotonic() + timeout
        while True:
            gens, flags = [], []
            with self._lock:
                for item in items:
                    if isinstance(item, ObjectRefGenerator):
                        gen = self._generators.get(item._task_id)
                        ready = gen is None or item._index < len(gen.items) or gen.done
                        gens.append(gen)
                    else:
                        entry = self.entries.get(item._id)
                        ready = entry is not None and entry.kind is not None
                    flags.append(ready)
            left = None if deadline is None else deadline - time.monotonic()
            if sum(flags) >= num_returns or (left is not None and left <= 0):
                break
            self._wait_any([i for i in items if not isinstance(i, ObjectRefGenerator)],
                           [g for g in gens if g is not None], left)
        ready_items, rest = [], []
        for item, flag in zip(items, flags):
            (ready_items if flag and len(ready_items) < num_returns else rest).append(item)
        return ready_items, rest

    def _wait_any(self, refs: list, gens: list, timeout: float | None) -> None:
        """Block until any of these refs is ready or any generator moves (or the timeout)."""
        for r in refs:
            self._entry_for(r)  # make sure every ref has an entry that will be filled
        latch = _Latch(1)
        with self._lock:
            entries = [self.entries[r._id] for r in refs]
            if any(e.kind is not None for e in entries):
                return
            for e in entries:
                e.add_waiter(latch)
            for g in gens:
                g.waiters.append(latch)
        try:
            latch.wait(timeout)
        finally:
            with self._lock:
                for e in entries:
                    e.remove_waiter(latch)
                for g in gens:
                    if latch in g.waiters:
                        g.waiters.remove(latch)

    def generator_length(self, task_id: bytes) -> int:
        gen = self._generators.get(task_id)
        return len(gen.items) if gen else 0

    def generator_dropped(self, task_id: bytes) -> None:
        gen = self._generators.get(task_id)
        if gen is not None and gen.done and not self._closed:
            self._generators.pop(task_id, None)

    # ================================================================ cancel
    def cancel(self, ref: ObjectRef, force: bool, recursive: bool) -> None:
        task_id = ObjectID(ref._id).task_id()
        rec = self._tasks.get(bytes(task_id))
        if force and rec is not None and rec.spec.kind == KIND_ACTOR_CALL:
            raise ValueError("force=True is not supported for actor tasks: an actor's process runs "
                             "its other calls too. Use raylite.kill(actor) to stop the actor.")
        if rec is None and ref._owner and ref._owner != self.address:
            # a borrowed ref (a nested task made it): its owner holds the task, as in Ray ask it
            self.loop.call_soon_threadsafe(self._cancel_at_owner, ref._owner, bytes(task_id), force, recursive)
            return
        self.loop.call_soon_threadsafe(self._cancel, bytes(task_id), force, recursive)

    def _cancel_at_owner(self, owner: str, task_id: bytes, force: bool, recursive: bool) -> None:
        async def send() -> None:
            with contextlib.suppress(Exception):  # the owner is gone: so is its task
                conn = await self.connection(owner)
                conn.send(P.CancelTask(task_id, force, recursive))

        self.loop.create_task(send())

    def _on_cancel_owned(self, conn: Any, msg: P.CancelTask, rid: int) -> None:
        """Another process cancels a task this process owns (it holds a ref we gave it)."""
        self._cancel(msg.task_id, msg.force, msg.recursive)

    def _cancel(self, task_id: bytes, force: bool, recursive: bool) -> None:
        rec = self._tasks.get(task_id)
        if rec is None:
            return
        rec.cancelled = True
        if rec.worker_conn is None:
            # still queued here: drop it
            for q in self._queues.values():
                if rec in q.tasks:
                    q.tasks.remove(rec)
            for st in self._actors.values():
                if rec in st.queue:
                    st.queue.remove(rec)
            self._finish_with_error(rec, E.TaskCancelledError(task_id.hex()))
            return
        if force and rec.lease is not None:
            (rec.lease.node_conn or self.node).send(P.KillWorker(rec.lease.worker_id, "cancelled with force=True"))
            return
        try:
            rec.worker_conn.send(P.CancelTask(task_id, force, recursive))
        except Exception:  # noqa: BLE001
            pass

_SIGNAL_HINTS = {
    "SIGSEGV": "a crash in native code, e.g. a C extension or a library bug",
    "SIGBUS": "a crash in native code, or shared memory (/dev/shm) ran out",
    "SIGABRT": "native code aborted, e.g. a failed assertion in a C++ library",
    "SIGKILL": "killed from outside: often the kernel's OOM killer when memory ran out",
    "SIGTERM": "asked to stop by another process",
}


# Ray's TaskState.error_type for the errors an owner reports itself
# PushTaskReply.error_kind -> what the owner records (the worker adds the message and traceback)
_OWNER_SAW_ERROR = {"app": {"error_type": "TASK_EXECUTION_EXCEPTION"}, "cancelled": {"error_type": "TASK_CANCELLED"},
                    "crashed": {"error_type": "WORKER_DIED"}, "system": {"error_type": "TASK_EXECUTION_EXCEPTION"}}
_ERROR_TYPES = {"TaskCancelledError": "TASK_CANCELLED", "WorkerCrashedError": "WORKER_DIED",
                "OutOfMemoryError": "OUT_OF_MEMORY", "ActorDiedError": "ACTOR_DIED",
                "ActorUnavailableError": "ACTOR_UNAVAILABLE", "TaskUnschedulableError": "TASK_UNSCHEDULABLE_ERROR",
                "ObjectLostError": "OBJECT_LOST"}


def describe_worker_exit(reply: P.WorkerExitReply) -> str:
    """'died unexpectedly: killed by signal SIGSEGV (a crash in native code ...)'."""
    pid = f" (pid {reply.pid})" if reply.pid else ""
    if reply.kill_reason:
        return f"was stopped by raylite{pid}: {reply.kill_reason}"
    if not reply.exit_info:
        return ""
    hint = next((h for sig, h in _SIGNAL_HINTS.items() if reply.exit_info.endswith(sig)), "")
    if reply.exit_info.startswith("exited with code"):
        hint = "the task's code or a library called os._exit() / sys.exit(), or the interpreter failed"
    return f"died unexpectedly{pid}: {reply.exit_info}" + (f" ({hint})" if hint else "")


# tasks whose push-to-reply time averages below this are pipelined (see _pipeline_depth)
PIPELINE_BELOW_S = 0.002


def _compact(kind: str, payload: Any) -> Any:
    """An inline value without out-of-band buffers kept as (meta, ()) rather than the two
    lists it arrives as, and tiny ones (None, True, small numbers...) shared: a million small
    results are a million of these."""
    if kind == "s" or type(payload) is not list or len(payload) != 2 or payload[1]:
        return payload
    meta = payload[0]
    if len(meta) > 48:
        return (meta, _NONE)
    shared = _TINY.get(meta)
    if shared is None:
        if len(_TINY) >= 4096:
            _TINY.clear()
        shared = _TINY[meta] = (meta, _NONE)
    return shared


_TINY: dict[bytes, tuple] = {}  # pickled tiny values -> one shared (meta, ()) payload each


def _payload_size(kind: str, entry: ObjectEntry | None) -> int:
    """Bytes of a ready object: inline payloads are [meta, [buffers]]; stored ones carry their size."""
    if entry is None or not kind:
        return 0
    try:
        if kind == "s":
            return int(entry.payload[2])
        meta, buffers = entry.payload[0], entry.payload[1]
        return len(meta) + sum(len(b) for b in buffers)
    except (TypeError, IndexError, ValueError):
        return 0


_NO_ARGS = ["inline", pickle.dumps(((), {}), protocol=5), []]  # shared: never mutated
_NONE: tuple = ()  # no argument refs, nothing pinned: shared by every task without arguments
_PLAIN = frozenset({int, float, bool, str, bytes, type(None)})
