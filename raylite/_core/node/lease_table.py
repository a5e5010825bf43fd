"""The node daemon's lease decisions, with no I/O: the node's pure part (as control_store.py is the head's).

It owns the node's resource tables (total, available), the queue of pending leases, the
granted leases, the placement group bundles reserved here, which GPU devices each worker
holds, and which worker a lease or actor gets (through the worker index). `handle(event)`
changes the tables and returns what the shell (node.py) must do as small effect objects:
reply to a requester, start a worker, launch an actor on a worker, ask the head where a
lease should go (spill back), kill a worker, ask lessees to release idle leases, report the
resources to the head. Time comes from an injected clock.

Events and effects are slotted dataclasses, not frozen ones (a frozen one costs 0.4 us more
to make, three times per lease on the node's hottest path); nothing changes them once made.

Every event carries a `cause` (as dask's `stimulus_id`): the lease id that set it off
(`lease_cause`; a placement group's or client's id for theirs), and every effect it produces
carries the same one, so the node's log lines for one task's lease (requested, granted,
returned) can be followed by that id. A lease granted when another returns carries the
return's cause (that is what set it off); its log line names the lease too.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Protocol

from raylite._core import labels
from raylite._core import protocol as P
from raylite._core import resources as R
from raylite._core import scheduling as S
from raylite._core.clock import Clock
from raylite._core.node.gpu_ids import GpuIds, device_amount, gpu_amount
from raylite._core.node.worker_index import WorkerIndex, WorkerRecord
from raylite._core.strategy import decode as decode_strategy
from raylite._core.task_spec import env_key

Resources = dict[str, int]  # fixed-point amounts by resource name (resources.py)

# lessees are asked to release idle leases at most this often while leases wait for resources
RELEASE_ASK_INTERVAL_S = 0.01


def lease_cause(lease_id: bytes) -> str:
    """The cause id of everything a lease sets off (its actor id, for an actor's lease)."""
    return "lease-" + lease_id.hex()


def _only_group_resources_missing(request: Resources, total: Resources) -> bool:
    """The request lacks only placement-group bundle resources here: the group's bundle is not
    reserved on this node yet (a task can arrive first), so the lease waits for it."""
    return all("_group_" in k for k, v in request.items() if v > total.get(k, 0))


def _lent(resource: str) -> bool:
    """Resources a worker blocked in get() lends back: its CPU, plain or a bundle's."""
    return resource == "CPU" or resource.startswith("CPU_group_")


def worker_key(runtime_env: dict[str, Any], resources: Resources) -> str:
    """Which idle workers a lease may reuse: the same runtime environment, and, as in Ray, a
    task that asks for GPUs never gets a worker started for CPU-only work (nor the reverse:
    CUDA state set up in a process stays with it)."""
    key = env_key(runtime_env)
    return key + "|gpu" if resources.get("GPU") else key


class Requester(Protocol):
    """Who asked for a lease (a client's connection, to the table an opaque handle)."""

    def is_closed(self) -> bool: ...


@dataclass
class PendingLease:
    msg: P.RequestLease
    conn: Any  # the Requester
    rid: int
    key: str
    actor: tuple[Any, ...] | None = None  # (actor_id, spec, future) for actor starts

    @property
    def cause(self) -> str:
        return lease_cause(self.msg.lease_id)


# ------------------------------------------------------------------ events
@dataclass(slots=True)
class LeaseRequested:
    """A client asks for a worker (`can_spill`: the node may ask the head to place it elsewhere)."""

    lease: PendingLease
    can_spill: bool
    cause: str


@dataclass(slots=True)
class ActorRequested:
    """The head asks for a dedicated worker for an actor (`lease.actor` is set)."""

    lease: PendingLease
    cause: str


@dataclass(slots=True)
class LeaseReturned:
    lease_id: bytes
    disconnect_worker: bool
    cause: str
    retire_worker: bool = False  # max_calls reached: STOPPING, not killed (it exits by itself)


@dataclass(slots=True)
class LeaseCancelled:
    lease_id: bytes
    cause: str


@dataclass(slots=True)
class WorkerBlockedChanged:
    """A leased or actor worker blocked in get() (lends its CPU back) or resumed."""

    worker_id: bytes
    blocked: bool
    cause: str


@dataclass(slots=True)
class WorkerGone:
    """A worker exited, its connection closed, or it did not start in time."""

    worker: WorkerRecord
    why: str
    cause: str


@dataclass(slots=True)
class RequesterGone:
    """A client went away: stop the workers leased to it, drop its queued leases."""

    requester: Any
    reason: str
    cause: str


@dataclass(slots=True)
class Regrant:
    """Something outside the table may have freed a worker (one registered): try the queue."""

    cause: str


@dataclass(slots=True)
class BundlesReserved:
    pg_id: bytes
    bundles: list[Any]  # [index, resources] pairs
    cause: str


@dataclass(slots=True)
class BundlesReleased:
    pg_id: bytes
    indexes: list[int]
    cause: str


@dataclass(slots=True)
class Fenced:
    """The head declared this node dead: every worker stops, every queued lease fails."""

    cause: str


Event = (LeaseRequested | ActorRequested | LeaseReturned | LeaseCancelled | WorkerBlockedChanged | WorkerGone
         | RequesterGone | Regrant | BundlesReserved | BundlesReleased | Fenced)


# ------------------------------------------------------------------ effects
@dataclass(slots=True)
class Reply:
    """Send `msg` to `requester` as the answer to its request `rid`."""

    requester: Any
    rid: int
    msg: Any
    cause: str


@dataclass(slots=True)
class Granted:
    """`worker` is leased to `lease`'s requester: send it `reply` (and watch it as a lessee)."""

    lease: PendingLease
    worker: WorkerRecord
    reply: P.RequestLeaseReply
    cause: str


@dataclass(slots=True)
class LaunchActor:
    """`worker` now hosts `lease.actor`: create the actor on it and answer the head."""

    lease: PendingLease
    worker: WorkerRecord
    cause: str


@dataclass(slots=True)
class FailActorStart:
    lease: PendingLease
    reply: P.StartActorReply
    cause: str


@dataclass(slots=True)
class StartWorker:
    key: str
    runtime_env: dict[str, Any]
    cause: str


@dataclass(slots=True)
class SpillBack:
    """Ask the head which node should take this lease (the shell's one round trip)."""

    lease: PendingLease
    cause: str


@dataclass(slots=True)
class KillWorker:
    """Stop `worker`; `flush`: let it hand its task events to the head first."""

    worker: WorkerRecord
    reason: str
    flush: bool
    cause: str


@dataclass(slots=True)
class AskToRelease:
    """Leases wait for resources: ask these lessees to give back the leases they do not use."""

    lessees: list[Any]
    cause: str


@dataclass(slots=True)
class ActorWorkerDied:
    """Tell the head an actor's worker died (it may restart the actor)."""

    worker_id: bytes
    actor_id: bytes
    reason: str
    cause: str


@dataclass(slots=True)
class ReportResources:
    """Tell the head this node's resources soon (they changed). `room_freed`: a return left room
    nothing here claims; the shell reports it only where the head's copy may show this node full
    (its last report did, or the head sent leases here since: NodeDaemon._do_report)."""

    cause: str
    room_freed: bool = False


Effect = (Reply | Granted | LaunchActor | FailActorStart | StartWorker | SpillBack | KillWorker | AskToRelease
          | ActorWorkerDied | ReportResources)


class LeaseTable:
    def __init__(self, *, node_id: bytes, total: Resources, labels: dict[str, str], workers: WorkerIndex,
                 gpus: GpuIds, clock: Clock, start_limit: int, devices: dict[str, GpuIds] | None = None) -> None:
        self.node_id = node_id
        self.total: Resources = dict(total)
        self.available: Resources = dict(total)
        self.base_total: Resources = dict(total)  # restored when the node fences itself
        self.labels = labels
        self.workers = workers
        self.gpus = gpus
        self.devices = devices or {}  # neuron_cores, TPU, ...: their ids, as for GPUs
        self.clock = clock
        self.start_limit = start_limit
        self.pending: list[PendingLease] = []
        self.leases: dict[bytes, WorkerRecord] = {}
        self.bundles: dict[str, dict[int, Resources]] = {}  # placement group hex -> bundle index -> offered
        self.lease_events = 0  # lease requests and returns seen (a heartbeat goes out after any)
        self.stopped = False
        self._release_asked = 0.0
        self._handlers: dict[type, Callable[[Any], list[Effect]]] = {
            LeaseRequested: self._requested, ActorRequested: self._actor_requested,
            LeaseReturned: self._returned, LeaseCancelled: self._cancelled,
            WorkerBlockedChanged: self._blocked, WorkerGone: self._worker_gone,
            RequesterGone: self._requester_gone, Regrant: lambda e: self._grant(e.cause),
            BundlesReserved: self._reserve, BundlesReleased: self._release, Fenced: self._fence,
        }

    def handle(self, event: Event) -> list[Effect]:
        return self._handlers[type(event)](event)

    def free_after_queued(self) -> Resources:
        """Free resources once the leases queued here are granted."""
        tentative = dict(self.available)
        for p in self.pending:
            R.subtract(tentative, p.msg.resources)
        return tentative

    # ------------------------------------------------------------ requests
    def _requested(self, e: LeaseRequested) -> list[Effect]:
        self.lease_events += 1
        p, msg = e.lease, e.lease.msg
        if msg.allow_spillback and e.can_spill and self._should_spill(msg):
            return [SpillBack(p, e.cause)]
        error = self._unschedulable(msg)
        if error:
            return [Reply(p.conn, p.rid, P.RequestLeaseReply(msg.lease_id, error_type="TaskUnschedulableError",
                                                             error=error), e.cause)]
        self.pending.append(p)
        return self._grant(e.cause)

    def _unschedulable(self, msg: P.RequestLease) -> str:
        """Why this node can never grant `msg` (empty: it can, now or later)."""
        request = msg.resources
        if not R.fits(request, self.total) and not _only_group_resources_missing(request, self.total):
            views = [S.NodeView(self.node_id, self.total, self.available)]
            return f"{msg.description} cannot be scheduled: {S.never_fits(request, views)}. {S.FIX_HINT}"
        how = decode_strategy(msg.strategy)
        if how.is_labels and not labels.first_matching(msg.strategy, self.labels):
            wanted = " or ".join(labels.describe(sel) for sel in msg.strategy[1])
            return (f"{msg.description} asks for a node with labels {wanted}; no node "
                    f"of this cluster has them (this node's: {self.labels}).")
        if how.is_node and how.node_id_hex != self.node_id.hex() and not how.soft:
            return (f"{msg.description} is pinned to node {how.node_id_hex[:8]} "
                    "(soft=False), which is not in this cluster.")
        return ""

    def _should_spill(self, msg: P.RequestLease) -> bool:
        """Multi-node only (the caller checks): ask the head when this node should not or cannot grant now."""
        how = decode_strategy(msg.strategy)
        if how.is_spread:
            return True
        if how.is_node:
            return how.node_id_hex != self.node_id.hex()
        if how.is_labels:
            return True  # the head knows every node's labels (and the fallbacks' order)
        if not R.fits(msg.resources, self.total):
            return True
        return not R.fits(msg.resources, self.free_after_queued())

    def _actor_requested(self, e: ActorRequested) -> list[Effect]:
        self.pending.append(e.lease)
        return self._grant(e.cause)

    def _cancelled(self, e: LeaseCancelled) -> list[Effect]:
        for p in self.pending:
            if p.msg.lease_id == e.lease_id:
                self.pending.remove(p)
                return [Reply(p.conn, -p.rid, P.RequestLeaseReply(e.lease_id, error_type="Cancelled",
                                                                  error="cancelled"), e.cause)]
        return []

    def withdraw(self, lease_id: bytes) -> bool:
        """Take a request out of the queue, unanswered (the shell sends it elsewhere); False
        when it is no longer queued (granted or cancelled meanwhile)."""
        for p in self.pending:
            if p.msg.lease_id == lease_id:
                self.pending.remove(p)
                return True
        return False

    def is_pending(self, lease_id: bytes) -> bool:
        return any(p.msg.lease_id == lease_id for p in self.pending)

    def _returned(self, e: LeaseReturned) -> list[Effect]:
        self.lease_events += 1
        rec = self.leases.pop(e.lease_id, None)
        if rec is None or rec.state != "LEASED":
            return []
        self.release_held(rec)
        rec.blocked = False
        rec.lease_id = b""
        rec.lessee = None
        effects: list[Effect] = []
        if e.disconnect_worker:
            effects.append(KillWorker(rec, "returned with disconnect", False, e.cause))
        elif e.retire_worker:
            self.workers.set_state(rec, "STOPPING")
        else:
            self.workers.set_state(rec, "IDLE")
        granted = self._grant(e.cause)
        if not self.pending and not granted:  # room no request here takes: the head should know
            granted.append(ReportResources(e.cause, room_freed=True))
        return effects + granted

    def _blocked(self, e: WorkerBlockedChanged) -> list[Effect]:
        rec = self.workers.workers.get(e.worker_id)
        if rec is None or rec.state not in ("LEASED", "ACTOR") or rec.blocked == e.blocked:
            return []
        # the CPU it holds, plain or from a placement group bundle (a captured child runs there)
        lent = {k: v for k, v in rec.held.items() if _lent(k) and v}
        rec.blocked = e.blocked
        for key, amount in lent.items():
            self.available[key] = self.available.get(key, 0) + (amount if e.blocked else -amount)
        return self._grant(e.cause) if lent and e.blocked else []

    # ------------------------------------------------------------ workers
    def release_held(self, rec: WorkerRecord, give_back: bool = True) -> None:
        """Drop what a lease or actor holds: its GPU devices, and (give_back) its resources
        to `available` (a worker blocked in get() already lent its CPU back)."""
        if give_back and rec.held:
            held = rec.held if not rec.blocked else {k: v for k, v in rec.held.items() if not _lent(k)}
            R.add(self.available, held)
        self.gpus.release(rec.gpu_ids, gpu_amount(rec.held))
        rec.gpu_ids = []
        for kind, ids in rec.device_ids.items():
            self.devices[kind].release(ids, device_amount(rec.held, kind))
        rec.device_ids = {}
        rec.held = {}

    def _worker_gone(self, e: WorkerGone) -> list[Effect]:
        rec = e.worker
        if rec.state == "DEAD":
            return []
        prev = rec.state
        self.workers.set_state(rec, "DEAD")
        if prev in ("LEASED", "ACTOR"):
            self.release_held(rec)
        if rec.lease_id:
            self.leases.pop(rec.lease_id, None)
        effects: list[Effect] = []
        if prev == "ACTOR" and rec.actor_id:
            reason = rec.kill_reason or f"its worker process (pid {rec.pid}) {e.why or 'died'}"
            effects.append(ActorWorkerDied(rec.worker_id, rec.actor_id, reason, e.cause))
        return effects + self._grant(e.cause)

    def _requester_gone(self, e: RequesterGone) -> list[Effect]:
        """Stop the workers leased to the requester. Each first hands its task events to the
        head (bounded wait), so the tasks it ran do not stay unfinished. Its queued leases go."""
        effects: list[Effect] = []
        for rec in list(self.workers.workers.values()):
            if rec.lessee is e.requester and rec.state == "LEASED":
                rec.lessee = None  # nobody's lease any more; never granted again
                effects.append(KillWorker(rec, e.reason, True, e.cause))
        self.pending = [p for p in self.pending if p.conn is not e.requester]
        return effects

    # ------------------------------------------------------------ granting
    def _grant(self, cause: str) -> list[Effect]:
        """Grant pending leases (in order) to idle workers; start workers for those that fit
        but have none, at most `start_limit` starting at once.

        Run on every event that may free a worker or resources, so it stops early: once no
        worker is idle and no more may start, nothing further down can be granted (a burst
        of thousands of actors costs O(1) per registration, not a scan of them all)."""
        if not self.pending or self.stopped:
            return []
        pool = self.workers
        limit = self.start_limit
        pending = self.pending
        effects: list[Effect] = []
        still: list[PendingLease] = []
        starting: dict[str, int] = {}  # leases of this pass waiting for a starting worker
        started: dict[str, int] = {}  # workers this pass asked to start, by key (the shell starts them after)
        started_total = 0
        waiting_for_resources = False
        tentative = dict(self.available)  # leases waiting for a starting worker reserve room here
        cut = len(pending)
        for i, p in enumerate(pending):
            if pool.starting_total + started_total >= limit and not pool.has_idle():
                cut = i
                break
            if p.conn.is_closed():
                continue
            req = p.msg.resources
            if not R.fits(req, tentative):
                still.append(p)
                waiting_for_resources = True
                continue
            rec = pool.idle(p.key)
            if rec is None:
                R.subtract(tentative, req)
                starting[p.key] = starting.get(p.key, 0) + 1
                if (pool.starting(p.key) + started.get(p.key, 0) < starting[p.key]
                        and pool.starting_total + started_total < limit):
                    started[p.key] = started.get(p.key, 0) + 1
                    started_total += 1
                    effects.append(StartWorker(p.key, p.msg.runtime_env, cause))
                still.append(p)
                continue
            R.subtract(self.available, req)
            R.subtract(tentative, req)
            effects.append(self._assign(rec, p, cause))
        self.pending = still + pending[cut:] if cut < len(pending) else still
        if waiting_for_resources:
            effects += self._ask_lessees_to_release(cause)
        return effects

    def _assign(self, rec: WorkerRecord, p: PendingLease, cause: str) -> Effect:
        """`rec` takes `p`: as a lease of its requester, or as the host of its actor."""
        req = p.msg.resources
        rec.held = dict(req)
        rec.gpu_ids = self.gpus.acquire(gpu_amount(req))
        rec.device_ids = {kind: ids for kind, pool in self.devices.items()
                          if (ids := pool.acquire(device_amount(req, kind)))}
        rec.busy_since = self.clock.monotonic()
        if p.actor is not None:
            self.workers.set_state(rec, "ACTOR")
            rec.actor_id = p.actor[0]
            return LaunchActor(p, rec, cause)
        self.workers.set_state(rec, "LEASED")
        rec.lease_id = p.msg.lease_id
        rec.lessee = p.conn
        self.leases[p.msg.lease_id] = rec
        return Granted(p, rec, P.RequestLeaseReply(p.msg.lease_id, rec.worker_id, rec.address, self.node_id,
                                                   gpu_ids=rec.gpu_ids, device_ids=rec.device_ids), cause)

    def _ask_lessees_to_release(self, cause: str) -> list[Effect]:
        now = self.clock.monotonic()
        if now - self._release_asked < RELEASE_ASK_INTERVAL_S:
            return []
        self._release_asked = now
        seen: set[int] = set()
        lessees = []
        for rec in self.leases.values():
            if rec.lessee is not None and id(rec.lessee) not in seen:
                seen.add(id(rec.lessee))
                lessees.append(rec.lessee)
        return [AskToRelease(lessees, cause)] if lessees else []

    # ------------------------------------------------------------ placement group bundles
    def _reserve(self, e: BundlesReserved) -> list[Effect]:
        """Reserve the bundles (all or none); a ReportResources effect means they were reserved."""
        need: Resources = {}
        for _i, b in e.bundles:
            R.add(need, b)
        if not R.fits(need, self.available):
            return []
        hexid = e.pg_id.hex()
        offered_by = self.bundles.setdefault(hexid, {})  # index -> {base resource: amount}
        for i, b in e.bundles:
            R.subtract(self.available, b)
            offered = dict(b)
            offered["bundle"] = 1000 * 10000
            for k, v in offered.items():
                for name in (S.bundle_resource_names(hexid, i, k), S.bundle_resource_names(hexid, None, k)):
                    self.total[name] = self.total.get(name, 0) + v
                    self.available[name] = self.available.get(name, 0) + v
            offered_by[i] = offered
        return self._grant(e.cause) + [ReportResources(e.cause)]

    def _release(self, e: BundlesReleased) -> list[Effect]:
        hexid = e.pg_id.hex()
        offered_by = self.bundles.get(hexid, {})
        for i in e.indexes:
            for base, amount in (offered_by.pop(i, None) or {}).items():
                self._drop_bundle_resource(hexid, i, base, amount)
        if not offered_by:
            self.bundles.pop(hexid, None)
        # workers still running inside the removed bundles are stopped
        effects: list[Effect] = []
        for rec in list(self.workers.workers.values()):
            if rec.held and any(hexid in k for k in rec.held):
                self.release_held(rec, give_back=False)
                effects.append(KillWorker(rec, "its placement group was removed", False, e.cause))
        # the head places the next groups on fresh numbers
        return effects + self._grant(e.cause) + [ReportResources(e.cause)]

    def _drop_bundle_resource(self, hexid: str, index: int, base: str, amount: int) -> None:
        name = S.bundle_resource_names(hexid, index, base)
        self.total.pop(name, None)
        self.available.pop(name, None)
        wild = S.bundle_resource_names(hexid, None, base)
        self.total[wild] = self.total.get(wild, 0) - amount
        self.available[wild] = self.available.get(wild, 0) - amount
        if self.total[wild] <= 0:
            self.total.pop(wild, None)
            self.available.pop(wild, None)
        if base != "bundle":
            R.add(self.available, {base: amount})

    # ------------------------------------------------------------ fencing
    def _fence(self, e: Fenced) -> list[Effect]:
        effects: list[Effect] = []
        for rec in list(self.workers.workers.values()):
            self.release_held(rec, give_back=False)
            effects.append(KillWorker(rec, "its node was declared dead", False, e.cause))
        for p in self.pending:
            if p.actor is not None:
                effects.append(FailActorStart(p, P.StartActorReply(False, system_error="its node was declared dead"),
                                              e.cause))
            elif p.rid:
                effects.append(Reply(p.conn, -p.rid, P.RequestLeaseReply(
                    p.msg.lease_id, error_type="RaySystemError", error="the node was declared dead"), e.cause))
        self.pending = []
        self.leases.clear()
        self.bundles.clear()
        self.total = dict(self.base_total)
        self.available = dict(self.base_total)
        return effects
