"""Every wire message, in one place, so the whole protocol can be read here.

A message is a frozen dataclass whose fields are msgpack-able (bytes, str, int,
float, bool, None, lists and dicts of those). On the wire a frame carries
``[tag, request_id, *fields]``; a request_id of 0 means "no reply expected".
Replies are named ``<Request>Reply`` and carry the request's id.

Who talks to whom:
- client (driver or worker) -> node: RegisterClient, RequestLease, ReturnLease,
  CancelLease, WorkerBlocked, ObjectSealed, FreeObjects, KillWorker
- node -> client: ReleaseIdleLeases, LogLines
- client -> client (owner services, direct task push): PushTask, CancelTask,
  GetObjectStatus, AddBorrower, RemoveBorrower, GeneratorItem
- client -> head: RegisterActor, GetActorInfo, GetNamedActor, ListNamedActors,
  KillActor, KvPut, KvGet, KvDel, KvKeys, CreatePlacementGroup,
  RemovePlacementGroup, GetPlacementGroup, GetClusterInfo
- node -> head: RegisterNode, Heartbeat, ActorStarted, ActorCreationFailed, WorkerDied
- head -> node: StartActor, ReserveBundles, ReleaseBundles, KillWorker
- node <-> node: PullObject
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, ClassVar, TypeVar

import msgpack  # type: ignore[import-untyped]

PROTOCOL_VERSION = 1

# The end of an object store's "full" error whose room is held only for a moment (objects being
# written or restored): the node's store says it, a writer reads it and asks again shortly
# instead of failing, as Ray's object creation waits.
BUSY_NOT_FULL = "is being written or restored right now"

MESSAGES: dict[int, type[Message]] = {}


class FrozenInstanceError(AttributeError):
    """Messages are immutable."""


class Message:
    """Base of every wire message: immutable, slotted, fields in declaration order.

    Classes are built by `@message(tag)` without dataclasses' per-class code
    generation, which would cost ~2 ms per class at import on a small machine.
    """

    TAG: ClassVar[int] = 0
    _FIELDS: ClassVar[tuple[str, ...]] = ()
    _DEFAULTS: ClassVar[dict[str, Any]] = {}
    _TYPES: ClassVar[dict[str, str]] = {}
    __slots__ = ()

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        fields = self._FIELDS
        n = len(args)
        if n > len(fields):
            raise TypeError(f"{type(self).__name__} takes {len(fields)} fields, got {n}")
        setter = object.__setattr__
        for name, value in zip(fields, args):  # a message is built per call: the hot path
            setter(self, name, value)
        if n == len(fields) and not kwargs:
            return
        defaults = self._DEFAULTS
        for name in fields[n:]:
            if name in kwargs:
                value = kwargs.pop(name)
            elif name in defaults:
                value = defaults[name]
            else:
                raise TypeError(f"{type(self).__name__} is missing field {name!r}")
            setter(self, name, value)
        if kwargs:
            raise TypeError(f"{type(self).__name__} has no fields {sorted(kwargs)}")

    def __setattr__(self, name: str, value: Any) -> None:
        raise FrozenInstanceError(f"cannot assign to field {name!r}")

    def __eq__(self, other: object) -> bool:
        return type(other) is type(self) and all(
            getattr(self, f) == getattr(other, f) for f in self._FIELDS)

    def __hash__(self) -> int:
        return hash((type(self).__name__, *(repr(getattr(self, f)) for f in self._FIELDS)))

    def __repr__(self) -> str:
        inner = ", ".join(f"{f}={getattr(self, f)!r:.60}" for f in self._FIELDS)
        return f"{type(self).__name__}({inner})"


M = TypeVar("M", bound=Message)


def message(tag: int) -> Callable[[type[M]], type[M]]:
    """Register a message class under a wire tag (fields from its annotations)."""

    def wrap(cls: type[M]) -> type[M]:
        if tag in MESSAGES:
            raise RuntimeError(f"duplicate message tag {tag}: {cls.__name__} and {MESSAGES[tag].__name__}")
        annotations = cls.__dict__.get("__annotations__", {})
        fields = tuple(annotations)
        defaults = {f: cls.__dict__[f] for f in fields if f in cls.__dict__}
        new = type(cls.__name__, (Message,), {
            "__slots__": fields, "__doc__": cls.__doc__, "__module__": cls.__module__,
            "__qualname__": cls.__qualname__, "TAG": tag, "_FIELDS": fields,
            "_DEFAULTS": defaults, "_TYPES": dict(annotations)})
        MESSAGES[tag] = new
        return new

    return wrap


def encode(msg: Message, request_id: int = 0) -> bytes:
    data: bytes = msgpack.packb(
        (msg.TAG, request_id, *[getattr(msg, f) for f in msg._FIELDS]), use_bin_type=True
    )
    return data


def encode_sized(msg: Message, request_id: int, size_hint: int) -> memoryview:
    """encode() for a message holding about `size_hint` bytes of buffers (a Ray Client value):
    packed once into a buffer of that size, not into one that doubles as it fills (which
    copies a 100 MB value several times), and returned without a further copy."""
    packer = msgpack.Packer(use_bin_type=True, autoreset=False, buf_size=size_hint + 65536)
    packer.pack((msg.TAG, request_id, *[getattr(msg, f) for f in msg._FIELDS]))
    view: memoryview = packer.getbuffer()
    return view


def decode(data: bytes | memoryview) -> tuple[Message, int]:
    items = msgpack.unpackb(data, raw=False, use_list=True, strict_map_key=False)
    cls = MESSAGES[items[0]]
    msg = object.__new__(cls)
    values = items[2:]
    fields = cls._FIELDS
    if len(values) < len(fields):  # an older peer: fill defaults
        values = values + [cls._DEFAULTS.get(f) for f in fields[len(values):]]
    for name, value in zip(fields, values):
        object.__setattr__(msg, name, value)
    return msg, items[1]


# ---------------------------------------------------------------- handshake
@message(1)
class Hello(Message):
    """First frame of every connection: who is calling, with the cluster token."""

    token: str
    version: int
    role: str  # "driver" | "worker" | "node" | "cli"


@message(2)
class HelloReply(Message):
    ok: bool
    error: str = ""


@message(3)
class ErrorReply(Message):
    """Generic failure reply to any request: the handler raised."""

    error_type: str
    message: str


@message(4)
class Ack(Message):
    pass


# ---------------------------------------------------------------- client <-> node
@message(10)
class RegisterClient(Message):
    worker_id: bytes
    kind: str  # "driver" | "worker"
    pid: int
    job_id: bytes
    address: str  # where this client listens for owner services / pushed tasks
    namespace: str = ""
    actor_id: bytes = b""


@message(11)
class RegisterClientReply(Message):
    node_id: bytes
    node_ip: str
    session_dir: str
    store_dir: str
    head_address: str
    job_id: bytes
    token: str
    inline_threshold_bytes: int
    node_tcp_address: str = ""  # where other nodes reach this node (multi-node clusters)


@message(12)
class RequestLease(Message):
    lease_id: bytes
    resources: dict[Any, Any]  # fixed-point units, see resources.py
    strategy: list[Any]  # Strategy.to_wire() (strategy.py)
    runtime_env: dict[Any, Any]
    description: str  # function name, for error messages
    allow_spillback: bool = True


@message(13)
class RequestLeaseReply(Message):
    lease_id: bytes
    worker_id: bytes = b""
    worker_address: str = ""
    node_id: bytes = b""
    error_type: str = ""
    error: str = ""
    spillback_address: str = ""  # ask this node instead
    gpu_ids: list[Any] = []  # GPU devices the lease holds (its worker sets CUDA_VISIBLE_DEVICES)
    device_ids: dict[Any, Any] = {}  # other accelerators' devices: {"neuron_cores": [0, 1], ...}


@message(14)
class ReturnLease(Message):
    lease_id: bytes
    disconnect_worker: bool = False
    # the worker reached a function's max_calls: it is never leased again and exits on its
    # own once nothing it owns is referenced (it may still serve its objects until then)
    retire_worker: bool = False


@message(15)
class CancelLease(Message):
    lease_id: bytes


@message(16)
class ReleaseIdleLeases(Message):
    """Node -> lessee: other work is waiting; return leases you are not using."""


@message(17)
class WorkerBlocked(Message):
    """A worker waits in get(): lend its CPU back while it waits."""

    blocked: bool


@message(18)
class ObjectSealed(Message):
    object_id: bytes
    size: int
    owner_address: str
    copy: bool = False  # a copy pulled from the node holding the primary (evictable)


@message(19)
class FreeObjects(Message):
    object_ids: list[Any]


@message(20)
class KillWorker(Message):
    worker_id: bytes
    reason: str = ""


@message(21)
class LogLines(Message):
    """Worker output, forwarded by the node to the job's driver."""

    job_id: bytes
    prefix: str
    stream: str  # "stdout" | "stderr"
    lines: list[Any]


@message(22)
class ClientDisconnecting(Message):
    pass


@message(23)
class GetNodeInfo(Message):
    pass


@message(24)
class GetNodeInfoReply(Message):
    node_id: bytes
    total: dict[Any, Any]
    available: dict[Any, Any]
    store_used_bytes: int
    store_capacity_bytes: int
    num_workers: int
    objects: list[Any]  # [[object_id, size, owner_address, where], ...]
    store_stats: dict[Any, Any] = {}  # ObjectStore.stats(): spilled bytes, recycled segments, counts
    clients: list[Any] = []  # [[worker_id, kind, address, pid], ...]: processes that may own objects


@message(25)
class CreateObject(Message):
    """Client -> node: make room for a shared-memory object before writing its file."""

    object_id: bytes
    size: int
    owner_address: str


@message(26)
class CreateObjectReply(Message):
    ok: bool
    error: str = ""  # ObjectStoreFullError text when not ok


@message(27)
class RestoreObject(Message):
    """Client -> node: bring a spilled object back into shared memory."""

    object_id: bytes


@message(170)
class ObjectsMapped(Message):
    """Client -> node: objects of this node's store the client began (`mapped`) or stopped
    (`unmapped`) mapping. The node spills what no one maps first: spilling a mapped object
    frees no memory until its readers let go."""

    mapped: list[Any]
    unmapped: list[Any]


@message(28)
class RestoreObjectReply(Message):
    found: bool
    error: str = ""


@message(29)
class WorkerOutOfMemory(Message):
    """Node -> a task's owner: the memory monitor is killing `worker_id`, which runs the
    owner's task; the task fails (or retries) with OutOfMemoryError saying `error`."""

    error: str
    worker_id: bytes = b""


# ---------------------------------------------------------------- client <-> client
@message(40)
class ListOwnedObjects(Message):
    """State API -> any driver or worker: the objects it owns or references (raylite.util.state)."""


@message(44)
class GetRunningTask(Message):
    """Node -> worker (its memory monitor, under pressure only): what runs there now?"""


@message(45)
class GetRunningTaskReply(Message):
    task_name: str
    retriable: bool  # its owner retries it if the worker dies (max_retries / max_task_retries)


@message(41)
class ListOwnedObjectsReply(Message):
    pid: int
    kind: str  # "driver" | "worker"
    # [[object_id, owned, owner_address, kind, size, local, submitted, borrowers, contained], ...]
    objects: list[Any]


@message(42)
class GetWorkerExit(Message):
    """Client -> node: how did this worker process end? (for the error of its task)"""

    worker_id: bytes


@message(43)
class WorkerExitReply(Message):
    exit_info: str = ""  # "killed by signal SIGSEGV", "exited with code 1", "" when unknown
    pid: int = 0
    kill_reason: str = ""  # set when raylite itself stopped it (memory monitor, cancel, ...)


@message(30)
class PushTask(Message):
    spec: list[Any]  # TaskSpec.to_wire()


@message(31)
class PushTaskReply(Message):
    task_id: bytes
    returns: list[Any]  # [[object_id, kind, payload], ...] see serialization.py
    borrowed: list[Any]  # refs the worker still holds: [[object_id, owner_address], ...]
    error_kind: str = ""  # "" | "app" | "cancelled" | "interrupted" (cancelled while it ran) | "crashed" | "system"
    worker_exiting: bool = False


@message(32)
class CancelTask(Message):
    task_id: bytes
    force: bool
    recursive: bool


@message(33)
class GetObjectStatus(Message):
    object_id: bytes
    wait: bool = True


@message(34)
class GetObjectStatusReply(Message):
    object_id: bytes
    kind: str  # "inline" | "store" | "error" | "lost"
    payload: Any  # inline: [meta, buffers]; store: [node_id, node_address, size]


@message(35)
class AddBorrower(Message):
    object_ids: list[Any]
    borrower_address: str


@message(36)
class RemoveBorrower(Message):
    object_ids: list[Any]
    borrower_address: str


@message(37)
class GeneratorItem(Message):
    task_id: bytes
    index: int
    item: list[Any]  # [object_id, kind, payload]


@message(38)
class CreateActor(Message):
    """Node -> a dedicated worker: become this actor (run __init__)."""

    spec: list[Any]
    gpu_ids: list[Any] = []  # GPU devices the actor holds
    device_ids: dict[Any, Any] = {}  # other accelerators' devices the actor holds


@message(39)
class CreateActorReply(Message):
    ok: bool
    error: Any = None  # serialized RayTaskError for the init failure


# ---------------------------------------------------------------- client <-> head
@message(50)
class RegisterActor(Message):
    spec: list[Any]  # TaskSpec.to_wire() of the creation task
    get_if_exists: bool


@message(51)
class RegisterActorReply(Message):
    actor_id: bytes
    existed: bool
    error_type: str = ""
    error: str = ""
    spec: list[Any] | None = None


@message(52)
class GetActorInfo(Message):
    actor_id: bytes
    wait_alive: bool = True
    after_restarts: int = -1  # wait until num_restarts > this


@message(53)
class ActorInfo(Message):
    actor_id: bytes
    state: str  # PENDING | ALIVE | RESTARTING | DEAD
    address: str
    worker_id: bytes
    node_id: bytes
    num_restarts: int
    death_cause: str
    name: str = ""
    namespace: str = ""
    class_name: str = ""
    pid: int = 0
    creation_error: Any = None
    # a plain sync actor runs each caller's calls in submission order; an async or threaded one
    # (max_concurrency > 1, concurrency groups) does not, so its callers send each call as soon
    # as its own arguments are ready
    in_order: bool = True


@message(54)
class GetNamedActor(Message):
    name: str
    namespace: str


@message(55)
class GetNamedActorReply(Message):
    actor_id: bytes
    spec: list[Any] | None


@message(56)
class ListNamedActors(Message):
    all_namespaces: bool
    namespace: str


@message(57)
class ListNamedActorsReply(Message):
    actors: list[Any]  # [{name, namespace}, ...]


@message(58)
class KillActor(Message):
    actor_id: bytes
    no_restart: bool
    # reply once the actor's process is gone (kill()'s promise to its caller); False when the
    # actor ends itself (exit_actor) and exits right after the reply
    confirm: bool = True
    reason: str = ""  # why, for the actor's death cause ("" = ray.kill())


@message(59)
class KvPut(Message):
    namespace: str
    key: bytes
    value: bytes
    overwrite: bool = True


@message(60)
class KvGet(Message):
    namespace: str
    key: bytes


@message(61)
class KvReply(Message):
    value: Any


@message(62)
class KvDel(Message):
    namespace: str
    key: bytes
    by_prefix: bool = False


@message(63)
class KvKeys(Message):
    namespace: str
    prefix: bytes


@message(64)
class CreatePlacementGroup(Message):
    pg_id: bytes
    bundles: list[Any]  # [fixed resource dict, ...]
    strategy: str
    name: str
    namespace: str
    detached: bool


@message(65)
class RemovePlacementGroup(Message):
    pg_id: bytes


@message(66)
class GetPlacementGroup(Message):
    pg_id: bytes
    wait_ready: bool
    timeout_s: float = -1.0
    name: str = ""
    namespace: str = ""


@message(67)
class PlacementGroupInfo(Message):
    pg_id: bytes
    state: str  # PENDING | CREATED | REMOVED | INFEASIBLE
    bundles: list[Any]
    strategy: str
    bundle_nodes: list[Any]  # node_id per bundle
    name: str = ""
    error: str = ""


@message(68)
class ListPlacementGroups(Message):
    pass


@message(69)
class ListPlacementGroupsReply(Message):
    groups: list[Any]  # [PlacementGroupInfo fields as dicts]


@message(70)
class GetClusterInfo(Message):
    pass


@message(71)
class ClusterInfo(Message):
    nodes: list[Any]  # [{node_id, address, ip, alive, total, available, labels, idle_s, ...}]
    demands: dict[Any, Any] | None = None  # ControlStore.demands(): what waits for a node (the autoscaler's input)


@message(72)
class ListActors(Message):
    pass


@message(73)
class ListActorsReply(Message):
    actors: list[Any]  # [ActorInfo fields as dicts]


@message(74)
class RegisterJob(Message):
    job_id: bytes
    driver_address: str
    namespace: str
    entrypoint: str
    submission_id: str = ""  # set when the driver runs as a submitted job's entrypoint
    pid: int = 0


@message(75)
class RegisterJobReply(Message):
    job_id: bytes


# ---------------------------------------------------------------- node <-> head
@message(90)
class RegisterNode(Message):
    node_id: bytes
    address: str  # where clients/other nodes reach the node daemon
    ip: str
    resources: dict[Any, Any]  # fixed-point totals
    labels: dict[Any, Any]
    store_dir: str
    version: str = ""
    local_address: str = ""  # unix:// address for clients on the same machine
    data_address: str = ""  # HOST:PORT of its bulk object server (transport/bulk.py)


@message(91)
class RegisterNodeReply(Message):
    ok: bool
    error: str = ""


@message(92)
class Heartbeat(Message):
    node_id: bytes
    available: dict[Any, Any]
    pending: list[Any]  # resource demands waiting on this node
    total: dict[Any, Any] | None = None  # changes when placement-group bundles are reserved
    stats: dict[Any, Any] | None = None  # every ~2 s: machine CPU/memory, store, workers (node_stats.py)


@message(93)
class StartActor(Message):
    actor_id: bytes
    spec: list[Any]
    resources: dict[Any, Any]


@message(94)
class StartActorReply(Message):
    ok: bool
    address: str = ""
    worker_id: bytes = b""
    pid: int = 0
    error: Any = None  # serialized creation error, or a string for system errors
    system_error: str = ""


@message(95)
class WorkerDied(Message):
    node_id: bytes
    worker_id: bytes
    actor_id: bytes
    reason: str


@message(96)
class ReserveBundles(Message):
    pg_id: bytes
    bundles: list[Any]  # [[index, fixed resource dict], ...]


@message(97)
class ReserveBundlesReply(Message):
    ok: bool


@message(98)
class ReleaseBundles(Message):
    pg_id: bytes
    indexes: list[Any]


@message(99)
class NodeShutdown(Message):
    node_id: bytes


@message(100)
class HeartbeatReply(Message):
    """Head -> node: alive=False means the head declared this node dead; it must fence itself."""

    alive: bool


@message(101)
class NodeDied(Message):
    """Head -> clients (drivers, workers): drop leases, actor links and pulls on this node."""

    node_id: bytes
    address: str
    cause: str


@message(102)
class PickNode(Message):
    """Node -> head: which node should run this lease request (spillback)? Also client ->
    head for a SPREAD burst (`batch`), so the burst covers every node before any gets two."""

    resources: dict[Any, Any]
    strategy: list[Any]
    requester: bytes  # node id asking
    description: str = ""
    # what the requester has free now, its queued leases subtracted: the head's copy (from the
    # last heartbeat) can still show room there and would send the lease straight back
    requester_available: dict[Any, Any] | None = None
    batch: bytes = b""  # a client's SPREAD burst: picks walk every node once before repeating one


@message(103)
class PickNodeReply(Message):
    node_id: bytes = b""
    address: str = ""
    error_type: str = ""
    error: str = ""
    covered: bool = False  # the SPREAD batch has now been offered every node once
    # no node fits the request yet, but the cluster's autoscaler can launch one that would:
    # the requester keeps the lease pending and asks again
    wait: bool = False


# ---------------------------------------------------------------- node <-> node
@message(110)
class PullObject(Message):
    object_id: bytes
    offset: int
    length: int


@message(111)
class PullObjectReply(Message):
    object_id: bytes
    total_size: int
    data: bytes
    found: bool = True


# ---------------------------------------------------------------- observability (state API, jobs)
@message(120)
class TaskEvents(Message):
    """Client -> head, about once a second and only when there is news: task state changes.

    See task_events.TaskEventBuffer.drain for the layout. dropped: events this process
    dropped (its buffer was full) since its last flush.
    """

    events: list[Any]  # [[task_id, attempt, job_id, state, time_s, [desc indexes], start_s(, earlier)], ...]
    dropped: int = 0
    descs: list[Any] = []  # dicts shared by this batch's events (a function's description, the worker's facts)


@message(153)
class CollectGarbage(Message):
    """Ray's automatic global GC. A node whose store is past
    Config.store_usage_gc_threshold sends it to the head (at most once per global_gc_min_interval_s);
    the head sends it to every node, and each node to its workers and drivers, which run Python's
    cycle collector (at most once per local_gc_min_interval_s): refs held only by reference
    cycles otherwise pin their objects in the store until the process happens to collect."""


@message(129)
class FlushTaskEvents(Message):
    """Node -> worker, before the node stops a worker whose task owner exited: send the task
    events you hold to the head now and answer Ack once the head has them (the periodic
    flush would come too late, and the owner's rows would stay unfinished)."""


@message(121)
class GetTaskEvents(Message):
    job_id: bytes = b""  # b"": every job
    limit: int = 0  # 0: all kept


@message(122)
class GetTaskEventsReply(Message):
    tasks: list[Any]  # [dict per task attempt, see task_events.TaskEventTable.rows]
    dropped: dict[Any, Any]  # job id hex -> tasks dropped for that job


@message(123)
class ListJobs(Message):
    pass


@message(124)
class ListJobsReply(Message):
    jobs: list[Any]  # [{job_id, driver_address, namespace, entrypoint, alive, start_time, end_time, ...}]


@message(125)
class ListLogs(Message):
    """Dashboard -> node: the node's log files."""


@message(126)
class ListLogsReply(Message):
    files: list[Any]  # [[name, size_bytes, mtime_s], ...]


@message(127)
class ReadLog(Message):
    name: str
    offset: int = 0
    length: int = 1 << 20
    tail_lines: int = -1  # >= 0: the last N lines instead of reading at offset


@message(128)
class ReadLogReply(Message):
    found: bool
    data: bytes
    end: int  # offset after the data (the file size for a tail read)


# ---------------------------------------------------------------- metrics (dashboard, /metrics)
@message(140)
class GetClusterMetrics(Message):
    """-> ClusterMetricsReply: every metric family the head computes now (cluster_metrics.py)."""


@message(141)
class ClusterMetricsReply(Message):
    families: list[Any]  # [{"name", "type", "help", "samples": [[series key, value], ...]}]


@message(142)
class GetTimeSeries(Message):
    """-> TimeSeriesReply: the head's history of the named series (or those starting with prefix)."""

    names: list[Any]
    prefix: str = ""
    since: float = 0.0


@message(143)
class TimeSeriesReply(Message):
    series: dict[Any, Any]  # {"time": [...], name: [value or None, ...]}


# ---------------------------------------------------------------- the cluster autoscaler (raylite.autoscaler)
# The head keeps both as rows of its key-value store (control_store.AUTOSCALER_*), so they are
# persisted and restored like any row; only these messages (and the store) know the rows' names.
@message(150)
class PublishAutoscalerView(Message):
    """-> KvReply: an autoscaler's view, JSON {"node_types": {name: {"resources": {...},
    "min_workers", "max_workers"}}, "launching": N, "time": ..., ...}; b"" withdraws it. While a
    view is published, a request only a launchable node type fits stays pending."""

    view: bytes


@message(151)
class GetAutoscalerView(Message):
    """-> KvReply: the published view (JSON bytes), or None."""


@message(152)
class RequestResources(Message):
    """-> KvReply: `request_resources()`'s standing demand, JSON {"bundles": [{resource: amount},
    ...]}; b"" drops it."""

    request: bytes


# ---------------------------------------------------------------- Ray Client (ray://HOST:10001)
@message(230)
class ClientCall(Message):
    """A remote driver's API call to its proxy driver on the head (client_remote.py ->
    client_proxy.py, whose docstring lists the methods and their arguments). Sent without a
    request id when the caller needs no answer (submit, release, export, ...)."""

    method: str
    args: list[Any]


@message(231)
class ClientCallReply(Message):
    """ok: `value` is the method's result; not ok: `value` is [meta, buffers] of the pickled
    exception, so the caller raises the original type."""

    ok: bool
    value: Any = None
