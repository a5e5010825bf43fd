"""Lineage reconstruction in a CoreClient: rebuild an owned object lost with its node.

When the only copy of an object this process owns was on a node that died, `get()` re-runs
the task that returned it, if that task may be retried (`max_retries` > 0, and it has not
been re-run that many times already). A task whose arguments were lost too (or freed since:
the reference counter keeps their lineage while it is needed) has those rebuilt first,
recursively. Otherwise `ObjectLostError` says which case applies: the task ran with
`max_retries=0`, the object was made by `put()`, or re-running was already tried enough.
(When the owner itself died, borrowers get `OwnerDiedError`, an `ObjectLostError` too.)

A component: the lineage records live in the reference counter (so they go with the counts);
this re-runs tasks through the task submitter and waits on the object plane's entries.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from raylite import exceptions as E
from raylite._core import serialization as ser
from raylite._core.client.records import ObjectEntry, TaskRecord
from raylite._core.client.refs import ObjectRef
from raylite._core.ids import ObjectID
from raylite._core.task_spec import DYNAMIC, KIND_TASK, STREAMING, TaskSpec

if TYPE_CHECKING:
    from raylite._core.client.generators import Generators
    from raylite._core.client.links import ClientLinks
    from raylite._core.client.objects import ObjectPlane
    from raylite._core.client.tasks import TaskSubmitter

_PUT_INDEX = 0xFFFFFFFF
# how many return indices ray.cancel() of a finished task looks through for one with lineage
_CANCEL_SCAN_RETURNS = 256


class LineageRebuilder:
    """Keeps task lineage of returned objects and re-runs tasks to rebuild lost ones."""

    def __init__(self, links: ClientLinks, objects: ObjectPlane, tasks: TaskSubmitter) -> None:
        self._links = links
        self._objects = objects
        self._tasks = tasks
        self._lock = links.lock
        self._refs = links.refs
        self._address = links.address
        self.generators: Generators  # set by CoreClient (generators.py): dynamic generators re-run

    def record_lineage(self, spec: TaskSpec, stored_ids: list[bytes], cancelled: bool = False) -> None:
        """When a task finished: remember how its returns that live in a node's store are made
        (normal tasks only), so they can be made again if that node dies. Values returned
        inline live here and cannot be lost, and a task still queued has nothing to lose:
        neither costs a record (a million queued tasks would be a million records)."""
        generator = spec.num_returns in (DYNAMIC, STREAMING)
        if spec.kind != KIND_TASK or (spec.num_returns < 1 and not generator) or not stored_ids:
            return  # actor tasks are not rebuilt
        with self._lock:
            stored_ids = [oid for oid in stored_ids if self._refs.lineage_of(oid) is None]  # not a re-run's
            if not stored_ids:
                return
            if spec.max_retries == 0:  # a marker, so a loss can say why nothing is re-run
                self._refs.record_lineage(stored_ids, spec.display_name(), ())
                return
            args = [r[1] for r in spec.arg_refs if self._refs.is_owned(r[1])]
        # the task's packed arguments (when too big to travel inline) stay alive with it
        keep = [ObjectRef(spec.args[1], self._address)] if spec.args[0] == "ref" else None
        with self._lock:
            self._refs.record_lineage(stored_ids, (spec, keep) if keep else spec, args)
            if generator:  # how many items a re-run must make again: up to the last stored one
                items = max(ObjectID(oid).return_index() - 1 for oid in stored_ids)
                for oid in stored_ids:
                    lin = self._refs.lineage_of(oid)
                    if lin is not None:
                        lin.generator_items = items
        if cancelled:  # cancelled while it finished: its results stand, but are not made again
            self.task_cancelled(spec.task_id)

    def task_cancelled(self, task_id: bytes) -> None:
        """ray.cancel() of a task that already finished: as in Ray, its returns are not rebuilt
        if they are lost later (a rebuild raises ObjectReconstructionFailedError instead)."""
        with self._lock:
            # the first return kept in a node's store names the task (returns held inline have no
            # lineage); its spec then gives every return's id
            for index in range(1, _CANCEL_SCAN_RETURNS + 1):
                lin = self._refs.lineage_of(bytes(ObjectID.for_return(task_id, index)))
                if lin is not None:
                    break
            else:
                return
            spec = lin.spec[0] if isinstance(lin.spec, tuple) else lin.spec
            oids = [bytes(o) for o in spec.return_ids()] if isinstance(spec, TaskSpec) else []
            for oid in oids:
                other = self._refs.lineage_of(oid)
                if other is not None:
                    other.cancelled = True
            lin.cancelled = True

    def rebuild(self, object_id: bytes, location: Any, lost: E.ObjectLostError) -> ObjectEntry:
        """User thread, after reading `object_id` at `location` failed with `lost`: re-run its
        task (and what it needs first), wait for the new value, and return its entry."""
        entry = self._objects.entry(object_id)
        if entry is None:
            raise lost
        if not self._refs.is_owned(object_id):  # a borrower: ask the owner again; it rebuilds
            return self._refetch_from_owner(object_id, entry, location, lost)
        with self._lock:
            if entry.kind == "s" and entry.payload is location:  # nobody rebuilt it meanwhile
                self._start_rebuild(object_id, lost.reason)
        self._objects.wait_entries([entry], 1, None, [])
        return entry

    def rebuild_lost_args(self, rec: TaskRecord) -> None:
        """Loop thread, before a task is queued: owned arguments lost with a dead node are
        rebuilt first (the task then waits for them like for any pending argument)."""
        spec = rec.spec
        rebuilt = set()
        with self._lock:
            for r in spec.arg_refs:
                entry = self._objects.entry(r[1])
                if entry is not None and self._on_dead_node(entry) and self._refs.is_owned(r[1]):
                    try:
                        self._start_rebuild(r[1], f"node {entry.payload[0].hex()[:8]} died holding its only copy")
                    except E.ObjectLostError:
                        continue  # the task reads it and fails with the loss, as it would without lineage
                    rebuilt.add(r[1])
        if rebuilt:  # values shipped with an earlier attempt point at the dead node
            rec.spec = spec.replace(arg_refs=[r[:3] if r[1] in rebuilt else r for r in spec.arg_refs])

    def rebuild_for_borrower(self, object_id: bytes) -> Any:
        """Loop thread, answering a borrower's status request: an owned object lost with a dead
        node is rebuilt before the answer; returns the error payload if it cannot be."""
        entry = self._objects.entry(object_id)
        if entry is None or not self._on_dead_node(entry) or not self._refs.is_owned(object_id):
            return None
        with self._lock:
            try:
                self._start_rebuild(object_id, f"node {entry.payload[0].hex()[:8]} died holding its only copy")
            except E.ObjectLostError as e:
                return ser.serialize(e, kind=ser.KIND_ERROR).to_inline()
        return None

    def _start_rebuild(self, object_id: bytes, why: str) -> None:
        """With _lock held: mark `object_id` pending and resubmit its task, after rebuilding
        lost or freed arguments the same way. Raises ObjectLostError saying why it cannot."""
        lin = self._refs.lineage_of(object_id)
        hexid = object_id.hex()
        if lin is None:
            if ObjectID(object_id).return_index() == _PUT_INDEX:
                raise E.ObjectLostError(hexid, f"{why}. It was made by put(), and put() objects cannot be "
                                        "rebuilt: only objects returned by tasks can (by re-running the task). "
                                        "Return the value from a task instead, or keep a copy.")
            raise E.ObjectLostError(hexid, f"{why}. It was returned by an actor task or a generator, "
                                    "which are not re-run to rebuild lost objects.")
        if isinstance(lin.spec, str):
            raise E.ObjectLostError(hexid, f"{why}. Its task {lin.spec} ran with max_retries=0, so it is "
                                    "not re-run to rebuild it; give the task max_retries > 0 (the default "
                                    "is 3) to have lost results rebuilt.")
        spec = lin.spec[0] if isinstance(lin.spec, tuple) else lin.spec
        if lin.cancelled:
            raise E.ObjectReconstructionFailedError(
                hexid, f"{why}. Its task {spec.display_name()} was cancelled (ray.cancel), and a cancelled "
                "task is not re-run to rebuild its results; keep a copy of the value, or do not cancel a "
                "task whose results are still in use.")
        if 0 <= spec.max_retries <= lin.reruns:
            raise E.ObjectReconstructionFailedMaxAttemptsExceededError(
                hexid, f"{why}. Its task {spec.display_name()} was already re-run {lin.reruns} time(s) to "
                "rebuild lost results (max_retries); raise max_retries to allow more.")
        deps = self._rebuild_args(spec, lin.arg_ids, why)
        lin.reruns += 1
        returns = spec.return_ids()
        if spec.num_returns in (DYNAMIC, STREAMING):  # its items (the first return is held here)
            returns = [ObjectID.for_return(spec.task_id, i + 2) for i in range(lin.generator_items)]
            self.generators.rebuilding(spec.task_id, lin.generator_items)
        for oid in returns:  # every return held only by a dead node comes back too
            entry = self._objects.entry(bytes(oid))
            if entry is not None and (oid == object_id or self._on_dead_node(entry)):
                entry.kind, entry.payload = None, None
        self._refs.add_submitted(deps)
        retries = -1 if spec.max_retries < 0 else spec.max_retries - lin.reruns
        rerun = spec.replace(attempt=spec.attempt + lin.reruns)
        rec = TaskRecord(rerun, retries, spec.retry_exceptions if isinstance(spec.retry_exceptions, bool)
                         else False, deps)
        self._tasks.resubmit(rec)

    def _refetch_from_owner(self, object_id: bytes, entry: ObjectEntry, location: Any,
                            lost: E.ObjectLostError) -> ObjectEntry:
        count = self._refs.count(object_id)
        owner = count.owner_address if count is not None else ""
        if not owner:
            raise lost
        with self._lock:
            if entry.kind == "s" and entry.payload is location:
                entry.kind, entry.payload = None, None
                refetch = True
            else:
                refetch = False
        if refetch:
            self._links.loop.call_soon_threadsafe(self._objects.start_fetch, object_id, owner)
        self._objects.wait_entries([entry], 1, None, [])
        if entry.kind == "s" and entry.payload and location and entry.payload[0] == location[0]:
            raise lost  # the owner knows of no other copy (yet): the loss stands
        return entry

    def _rebuild_args(self, spec: TaskSpec, lineage_args: list, why: str) -> list[bytes]:
        """With _lock held: make sure every owned argument of `spec` will exist; returns the
        ids to keep pinned while the task re-runs."""
        deps = []
        owners = {r[1]: r[2] for r in spec.arg_refs}
        for oid in dict.fromkeys([*owners, *lineage_args]):
            if owners.get(oid, self._address) != self._address:
                continue  # another process owns it: it serves (or rebuilds) it for the re-run
            entry = self._objects.entry(oid)
            if entry is None:  # freed since: its lineage was kept for this
                if self._refs.lineage_of(oid) is None:
                    raise E.ObjectReconstructionFailedLineageEvictedError(
                        spec.return_ids()[0].hex(), f"{why}. Re-running its task {spec.display_name()} "
                        f"needs its argument {oid.hex()}, which was freed and cannot be rebuilt.")
                self._objects.add_pending(oid)
                self._start_rebuild(oid, f"argument {oid.hex()} of {spec.display_name()} was freed")
            elif entry.kind == "s" and self._on_dead_node(entry):
                self._start_rebuild(oid, f"argument {oid.hex()} of {spec.display_name()} was lost too")
            deps.append(oid)
        return deps

    def _on_dead_node(self, entry: ObjectEntry) -> bool:
        payload: Any = entry.payload
        return entry.kind == "s" and bool(payload) and payload[0] in self._links.dead_nodes
