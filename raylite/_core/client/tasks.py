"""Task submission of a CoreClient: task records from submission to their last reply, the
argument dependencies a task waits for, retries, failures reported clearly, and cancellation.

Normal tasks go through the leases (leases.py), actor calls through the actor caller
(actors.py); generator tasks' streams are the generators' (generators.py).
"""

from __future__ import annotations

import contextlib
import time
from typing import TYPE_CHECKING, Any

from raylite import exceptions as E
from raylite._core import protocol as P
from raylite._core import serialization as ser
from raylite._core.client.functions import NONE as _NONE
from raylite._core.client.records import Lease, TaskRecord
from raylite._core.client.refs import ObjectRef, ObjectRefGenerator
from raylite._core.ids import ObjectID
from raylite._core.task_spec import DYNAMIC, KIND_ACTOR_CALL, STREAMING, TaskSpec
from raylite._core.transport.base import RemoteError

if TYPE_CHECKING:
    from raylite._core.client.actors import ActorCaller
    from raylite._core.client.generators import Generators
    from raylite._core.client.leases import Leases
    from raylite._core.client.lineage import LineageRebuilder
    from raylite._core.client.links import ClientLinks
    from raylite._core.client.objects import ObjectPlane
    from raylite._core.client.ownership import Ownership


class TaskSubmitter:
    """Owns the record of every task this process submitted and has not seen finish."""

    def __init__(self, links: ClientLinks, objects: ObjectPlane, ownership: Ownership,
                 generators: Generators, leases: Leases, api: Any) -> None:
        """`api`: the CoreClient, which the refs handed out here report to (ObjectRef.__del__)."""
        self._links = links
        self._objects = objects
        self._ownership = ownership
        self._generators = generators
        self._leases = leases
        self._api = api
        self._lock = links.lock
        self._refs = links.refs
        self._address = links.address
        self._task_events = links.task_events
        self._call_soon = links.call_soon
        self.records: dict[bytes, TaskRecord] = {}  # task id -> record, until the task finished
        self._oom_kills: dict[bytes, str] = {}  # worker id -> why the memory monitor killed it
        self._gc = links.gc_pacer  # full collections paced to these tables
        self._gc.sizes.append(self.records.__len__)
        # set by the CoreClient once built (each calls back into this submitter)
        self.actors: ActorCaller
        self.lineage: LineageRebuilder

    def submit_task(self, spec: TaskSpec, pinned: list, retry_exceptions: Any) -> Any:
        return_ids = [bytes(oid) for oid in spec.return_ids()]  # plain bytes: shared by every table
        self._objects.expect(return_ids)
        rec = TaskRecord(spec, spec.max_retries, retry_exceptions, pinned)
        api = self._api
        if spec.num_returns in (STREAMING, DYNAMIC):
            self._generators.started(spec.task_id, spec.num_returns == DYNAMIC)
            refs = [ObjectRef.counted(oid, self._address, api) for oid in return_ids]
            gen = ObjectRefGenerator(spec.task_id, api, refs[0]) if spec.num_returns == STREAMING else None
            self.records[spec.task_id] = rec
            self._call_soon(self.enqueue, rec)
            return gen if gen is not None else refs[0]
        refs = [ObjectRef.counted(oid, self._address, api) for oid in return_ids]
        self.records[spec.task_id] = rec
        self._call_soon(self.enqueue, rec)
        self._gc.tick()
        if spec.num_returns == 1:
            return refs[0]
        return refs if spec.num_returns > 1 else None

    def enqueue(self, rec: TaskRecord) -> None:
        if rec.cancelled:
            return
        spec = rec.spec
        events = self._task_events
        if spec.kind == KIND_ACTOR_CALL:
            if events is not None:
                events.record(spec.task_id, spec.attempt, spec.job_id, "SUBMITTED_TO_WORKER", time.time(), spec)
            self.actors.send_actor_task(rec)
            return
        if self._links.dead_nodes and spec.arg_refs:  # arguments lost with a node are rebuilt first
            self.lineage.rebuild_lost_args(rec)
            spec = rec.spec
        deps = [self._objects.entry(r[1]) for r in spec.arg_refs]
        pending = [e for e in deps if e is not None and e.kind is None]
        if pending:
            latch_left = [len(pending)]

            def one_ready(_entry) -> None:
                latch_left[0] -= 1
                if latch_left[0] == 0:
                    self._links.loop.call_soon_threadsafe(self.enqueue, rec)

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
        self._leases.enqueue(rec, spec)

    def _inline_ready_args(self, rec: TaskRecord) -> None:
        """Ship ready values of top-level ref args with the task (saves the worker a round trip)."""
        if not rec.spec.arg_refs:
            return
        out = []
        for r in rec.spec.arg_refs:
            entry = self._objects.entry(r[1])
            if entry is not None and entry.kind is not None and len(r) == 3:
                out.append([r[0], r[1], r[2], entry.kind, entry.payload])
            else:
                out.append(r)
        rec.spec = rec.spec.replace(arg_refs=out)

    def requeue(self, rec: TaskRecord) -> None:
        self._links.loop.call_soon(self.enqueue, rec)

    def task_done(self, rec: TaskRecord, reply: P.PushTaskReply) -> None:
        spec = rec.spec
        if reply.error_kind == "app" and rec.retries_left != 0 and self._retryable(rec, reply):
            rec.retries_left -= 1 if rec.retries_left > 0 else 0
            rec.spec = spec.replace(attempt=spec.attempt + 1)
            self._generators.retried(spec)
            self.requeue(rec)
            return
        if self._task_events is not None:
            # the owner knows how the task ended: its record must not depend on the worker's
            # own events, which die with the worker when a short-lived driver exits
            self._task_events.record(spec.task_id, spec.attempt, spec.job_id,
                                    "FAILED" if reply.error_kind not in ("", "interrupted") else "FINISHED", time.time(),
                                    _OWNER_SAW_ERROR.get(reply.error_kind))
        if spec.num_returns in (STREAMING, DYNAMIC):
            stored = self._generators.finished(rec, reply)
            if stored:  # a dynamic generator's items in a node's store can be rebuilt by re-running it
                self.lineage.record_lineage(spec, stored, cancelled=rec.cancelled)
        else:
            for item in reply.returns:
                if len(item) > 3:
                    self._ownership.adopt_contained(item[0], item[3])
            self._objects.set_entries([(item[0], item[1], _compact(item[1], item[2])) for item in reply.returns])
            stored = [item[0] for item in reply.returns if item[1] == "s"]
            if stored:  # before its arguments are let go: their lineage is pinned with it
                self.lineage.record_lineage(spec, stored, cancelled=rec.cancelled)
        self._task_finished(rec, reply.borrowed)

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
        self.records.pop(rec.spec.task_id, None)
        self._gc.tick()
        with self._lock:
            for oid, addr in borrowed or []:
                self._refs.add_borrower(oid, addr)
            free, unborrow = self._refs.remove_submitted(rec.dep_ids)
        if free or unborrow:
            self._objects.release(free, unborrow)

    def _record_failed(self, spec: Any, error_type: str, message: str) -> None:
        if self._task_events is not None:
            self._task_events.record(spec.task_id, spec.attempt, spec.job_id, "FAILED", time.time(),
                                    {"error_type": error_type, "error_message": message[:2000]})

    def finish_with_error(self, rec: TaskRecord, err: BaseException) -> None:
        self._record_failed(rec.spec, _ERROR_TYPES.get(type(err).__name__, "TASK_EXECUTION_EXCEPTION"), str(err))
        payload = ser.serialize(err, kind=ser.KIND_ERROR).to_inline()
        spec = rec.spec
        if spec.num_returns in (STREAMING, DYNAMIC):
            self._generators.failed(rec, ("e", payload))
        else:
            for oid in spec.return_ids():
                self._objects.set_entry(oid, "e", payload)
        self._task_finished(rec, [])

    def worker_died(self, rec: TaskRecord, exc: BaseException) -> None:
        if rec.cancelled:
            self.finish_with_error(rec, E.TaskCancelledError(rec.spec.task_id.hex()))
            return
        if rec.retries_left != 0:
            self._record_failed(rec.spec, "WORKER_DIED", f"the worker died ({exc}); the task is retried")
            rec.retries_left -= 1 if rec.retries_left > 0 else 0
            rec.spec = rec.spec.replace(attempt=rec.spec.attempt + 1)
            self.requeue(rec)
            return
        if rec.lease is not None:  # ask its node how it ended, for an error that says so
            self._links.loop.create_task(self._report_worker_crash(rec, rec.lease, exc))
        else:
            self._fail_crashed(rec, exc, "")

    async def _report_worker_crash(self, rec: TaskRecord, lease: Lease, exc: BaseException) -> None:
        how = ""
        with contextlib.suppress(Exception):
            reply = await (lease.node_conn or self._links.node).request(P.GetWorkerExit(lease.worker_id), 3.0)
            how = describe_worker_exit(reply)
        self._fail_crashed(rec, exc, how)

    def _fail_crashed(self, rec: TaskRecord, exc: BaseException, how: str) -> None:
        oom = self._oom_kills.get(rec.lease.worker_id) if rec.lease is not None else None
        if oom is not None:
            self.finish_with_error(rec, E.OutOfMemoryError(
                f"Task {rec.spec.display_name()} failed: its worker was {oom} It was tried "
                f"{rec.spec.attempt + 1} time(s) (max_retries)."))
            return
        detail = f" ({exc})" if isinstance(exc, (RemoteError,)) else ""
        how = how or "died unexpectedly (the process exited, crashed, or was killed, e.g. by the OOM killer)"
        self.finish_with_error(rec, E.WorkerCrashedError(
            f"The worker running {rec.spec.display_name()} {how}{detail}. "
            f"It was tried {rec.spec.attempt + 1} time(s); set max_retries to retry it more."))

    def on_worker_out_of_memory(self, conn, msg: P.WorkerOutOfMemory, rid):
        """The node's memory monitor is killing a worker running one of our tasks: remember why."""
        self._oom_kills[msg.worker_id] = msg.error
        while len(self._oom_kills) > 64:
            self._oom_kills.pop(next(iter(self._oom_kills)))

    def cancel(self, ref: ObjectRef, force: bool, recursive: bool) -> None:
        task_id = ObjectID(ref._id).task_id()
        rec = self.records.get(bytes(task_id))
        if force and rec is not None and rec.spec.kind == KIND_ACTOR_CALL:
            raise ValueError("force=True is not supported for actor tasks: an actor's process runs "
                             "its other calls too. Use raylite.kill(actor) to stop the actor.")
        if rec is None and ref._owner and ref._owner != self._address:
            # a borrowed ref (a nested task made it): its owner holds the task, as in Ray ask it
            self._links.loop.call_soon_threadsafe(self._cancel_at_owner, ref._owner, bytes(task_id), force, recursive)
            return
        self._links.loop.call_soon_threadsafe(self.cancel_now, bytes(task_id), force, recursive)

    def _cancel_at_owner(self, owner: str, task_id: bytes, force: bool, recursive: bool) -> None:
        async def send() -> None:
            with contextlib.suppress(Exception):  # the owner is gone: so is its task
                conn = await self._links.connection(owner)
                conn.send(P.CancelTask(task_id, force, recursive))

        self._links.loop.create_task(send())

    def on_cancel_owned(self, conn: Any, msg: P.CancelTask, rid: int) -> None:
        """Another process cancels a task this process owns (it holds a ref we gave it)."""
        self.cancel_now(msg.task_id, msg.force, msg.recursive)

    def resubmit(self, rec: TaskRecord) -> None:
        """Any thread: a task runs again under a new record (lineage reconstruction)."""
        self.records[rec.spec.task_id] = rec
        self._links.loop.call_soon_threadsafe(self.enqueue, rec)

    def cancel_now(self, task_id: bytes, force: bool, recursive: bool) -> None:
        rec = self.records.get(task_id)
        if rec is None:  # finished (or never ours): a later loss of its results is not rebuilt
            self.lineage.task_cancelled(task_id)
            return
        rec.cancelled = True
        if rec.worker_conn is None:
            # still queued here: drop it
            self._leases.drop_queued(rec)
            self.actors.drop_queued(rec)
            self.finish_with_error(rec, E.TaskCancelledError(task_id.hex()))
            return
        if force and rec.lease is not None:
            (rec.lease.node_conn or self._links.node).send(P.KillWorker(rec.lease.worker_id, "cancelled with force=True"))
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
