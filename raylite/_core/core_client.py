"""CoreClient: the Core API engine shared by drivers and workers.

It owns the objects its process creates (the memory store and reference
counts), submits tasks straight to leased workers and actor calls straight to
actor workers, and serves owner requests (object status, borrowers, streamed
generator items) on its own socket. Its I/O runs on an asyncio loop in a
background thread; user-facing calls hand work to that loop and wait on
thread-safe latches.
"""

from __future__ import annotations

import asyncio
import collections
import concurrent.futures
import contextlib
import logging
import os
import socket
import threading
import time
from dataclasses import dataclass, field
from typing import Any

from raylite import exceptions as E
from raylite._core import protocol as P
from raylite._core import serialization as ser
from raylite._core.config import Config
from raylite._core.ids import ObjectID, TaskID
from raylite._core.reference_counter import ReferenceCounter
from raylite._core.refs import DynamicObjectRefGenerator, ObjectRef, ObjectRefGenerator
from raylite._core.task_spec import DYNAMIC, KIND_ACTOR_CALL, STREAMING, TaskSpec
from raylite._core.transport import rpc
from raylite._core.transport.base import ConnectionBrokenError, RemoteError
from raylite._core.worker_pool import env_key

log = logging.getLogger("raylite.core")


class _Latch:
    """Counts down from n; wait() returns when it reaches zero (or times out)."""

    __slots__ = ("_n", "_lock")

    def __init__(self, n: int) -> None:
        self._n = n
        self._lock = threading.Lock()
        self._lock.acquire()

    def count_down(self) -> None:
        self._n -= 1
        if self._n == 0:
            self._lock.release()

    def wait(self, timeout: float | None) -> bool:
        # Wait in slices: an exception injected into this thread (ray.cancel of a task
        # blocked in get()) is only delivered when Python code runs again.
        if timeout is None:
            while not self._lock.acquire(timeout=0.1):
                pass
            return True
        deadline = time.monotonic() + max(0.0, timeout)
        while True:
            left = deadline - time.monotonic()
            if self._lock.acquire(timeout=max(0.0, min(left, 0.1))):
                return True
            if left <= 0.1:
                return False


@dataclass
class ObjectEntry:
    kind: str | None = None  # None (pending) | "v" | "e" | "s"
    payload: Any = None
    waiters: list = field(default_factory=list)  # _Latch or callables(entry)


@dataclass
class TaskRecord:
    spec: TaskSpec
    retries_left: int
    retry_exceptions: Any
    dep_ids: list  # object ids pinned (submitted count) until the task finishes
    lease: Any = None
    cancelled: bool = False
    worker_conn: Any = None


@dataclass
class Lease:
    lease_id: bytes
    worker_id: bytes
    conn: rpc.Connection
    queue: SchedulingQueue
    in_flight: int = 0
    idle_handle: Any = None
    dead: bool = False
    node_conn: Any = None  # the node that granted it (another node after spillback)
    node_id: bytes = b""
    blocked: bool = False  # its worker bounced queued tasks while blocked in get()
    gpu_ids: list = field(default_factory=list)  # devices the node gave this lease


@dataclass
class SchedulingQueue:
    key: tuple
    resources: dict
    runtime_env: dict
    strategy: list
    description: str
    tasks: collections.deque = field(default_factory=collections.deque)
    leases: list = field(default_factory=list)
    requesting: int = 0
    # moving average of push-to-reply seconds; queued tasks are pipelined to a worker
    # only while tasks are short, so long tasks still spread over every worker
    avg_task_s: float = 1.0


@dataclass
class ActorState:
    actor_id: bytes
    conn: Any = None
    connecting: bool = False
    restarts_seen: int = -1
    queue: collections.deque = field(default_factory=collections.deque)
    in_flight: dict = field(default_factory=dict)
    dead_error: Any = None
    seq: int = 0
    kill_when_idle: bool = False
    node_id: bytes = b""


@dataclass
class GeneratorState:
    items: list = field(default_factory=list)  # ObjectRef
    done: bool = False
    error: Any = None  # (kind, payload) of the task's failure
    waiters: list = field(default_factory=list)
    dynamic: bool = False


class CoreClient:
    def __init__(self, config: Config, *, worker_id: bytes, kind: str, job_id: bytes,
                 node_address: str, token: str, session_dir: str, namespace: str = "") -> None:
        self.config = config
        self.worker_id = worker_id
        self.kind = kind
        self.job_id = job_id
        self.node_address = node_address
        self.token = token
        self.session_dir = session_dir
        self.namespace = namespace
        self.address = f"unix://{os.path.join(session_dir, 'sockets', worker_id.hex()[:16])}"
        self._listen_sock: socket.socket | None = None
        if config.node_ip_address:  # multi-node: peers on other machines must reach us over TCP
            self._listen_sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
            self._listen_sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            self._listen_sock.bind((config.node_ip_address, 0))
            self.address = f"tcp://{config.node_ip_address}:{self._listen_sock.getsockname()[1]}"
        self.node_public_address = ""  # how other nodes reach our node (its TCP address)
        self._dead_nodes: set[bytes] = set()
        self._data_conns: dict[str, rpc.Connection] = {}  # chunked pulls, apart from control
        self._data_addresses: dict[bytes, str] = {}  # node id -> its bulk server HOST:PORT
        self._bulk_clients: dict[str, Any] = {}
        self._bulk_lock = threading.Lock()
        self.loop: asyncio.AbstractEventLoop | None = None
        self._thread: threading.Thread | None = None
        self._lock = threading.Lock()
        self._calls: collections.deque = collections.deque()  # see call_soon
        self._calls_scheduled = False
        self._deleted: collections.deque = collections.deque()  # decrements queued by __del__
        self.entries: dict[bytes, ObjectEntry] = {}
        self.refs = ReferenceCounter(self.address)
        self.node: rpc.Connection | None = None
        self.head: rpc.Connection | None = None
        self.node_id = b""
        self.node_ip = "127.0.0.1"
        self.store_dir = ""
        self.head_address = ""
        self._conns: dict[str, rpc.Connection] = {}
        self._connecting: dict[str, asyncio.Future] = {}
        self._queues: dict[tuple, SchedulingQueue] = {}
        self._leases: dict[bytes, Lease] = {}
        self._tasks: dict[bytes, TaskRecord] = {}
        self._actors: dict[bytes, ActorState] = {}
        self._generators: dict[bytes, GeneratorState] = {}
        self._oom_kills: dict[bytes, str] = {}  # worker id -> why the memory monitor killed it
        self._exported: set[bytes] = set()
        self._fn_cache: dict[bytes, Any] = {}
        self._server: asyncio.AbstractServer | None = None
        self._closed = False
        self.extra_handlers: dict[type, Any] = {}
        self.log_handler = None  # callable(LogLines) on drivers
        self.blocked_hook = None  # worker: callable(bool) around blocking waits
        self.current_task_id = b""
        self.handlers = {
            P.GetObjectStatus: self._on_get_object_status,
            P.AddBorrower: self._on_add_borrower,
            P.RemoveBorrower: self._on_remove_borrower,
            P.GeneratorItem: self._on_generator_item,
            P.ReleaseIdleLeases: self._on_release_idle_leases,
            P.WorkerOutOfMemory: self._on_worker_out_of_memory,
            P.ListOwnedObjects: self._on_list_owned_objects,
            P.LogLines: self._on_log_lines,
            P.NodeDied: self._on_node_died,
        }

    # ================================================================ life cycle
    def start(self) -> None:
        """Start the I/O thread and connect to the node and head. Blocks until ready."""
        ready = concurrent.futures.Future()

        def run() -> None:
            try:
                import uvloop  # type: ignore

                loop = uvloop.new_event_loop()
            except Exception:  # noqa: BLE001
                loop = asyncio.new_event_loop()
            asyncio.set_event_loop(loop)
            self.loop = loop
            try:
                loop.run_until_complete(self._connect())
            except BaseException as e:  # noqa: BLE001
                ready.set_exception(e)
                loop.close()
                return
            ready.set_result(None)
            loop.run_forever()
            loop.run_until_complete(asyncio.sleep(0))
            loop.close()

        self._thread = threading.Thread(target=run, name="raylite-io", daemon=True)
        self._thread.start()
        ready.result()

    async def _connect(self) -> None:
        self.handlers.update(self.extra_handlers)
        os.makedirs(os.path.join(self.session_dir, "sockets"), exist_ok=True)
        self._server = await rpc.listen(self.address, self.handlers, token=self.token,
                                        on_connect=self._on_incoming, sock=self._listen_sock)
        self.node = await rpc.connect(self.node_address, self.handlers, token=self.token, role=self.kind)
        self.node.on_close.append(self._on_node_lost)
        reply: P.RegisterClientReply = await self.node.request(P.RegisterClient(
            self.worker_id, self.kind, os.getpid(), self.job_id, self.address, self.namespace))
        self.node_id = reply.node_id
        self.node_ip = reply.node_ip
        self.store_dir = reply.store_dir
        self.head_address = reply.head_address
        self.node_public_address = reply.node_tcp_address or self.node_address
        self.head = await rpc.connect(reply.head_address, self.handlers, token=self.token, role=self.kind)
        self.head.on_close.append(self._on_head_lost)
        self.loop.call_later(2.0, self._trim_writer_maps)

    def _trim_writer_maps(self) -> None:
        """Unmap cached writer segments the node has deleted, so their memory really goes back."""
        ser.drop_stale_writer_maps()
        if not self._closed:
            self.loop.call_later(2.0, self._trim_writer_maps)

    def _on_head_lost(self, conn: rpc.Connection) -> None:
        if not self._closed and self.head_address.startswith("tcp://"):
            self.loop.create_task(self._reconnect_head())

    async def _reconnect_head(self) -> None:
        """A restarted head (with --persist) comes back at the same address: reconnect to it."""
        deadline = self.loop.time() + self.config.head_reconnect_timeout_s
        while not self._closed and self.loop.time() < deadline:
            try:
                head = await rpc.connect(self.head_address, self.handlers, token=self.token, role=self.kind)
            except Exception:  # noqa: BLE001
                await asyncio.sleep(0.2)
                continue
            self.head = head
            head.on_close.append(self._on_head_lost)
            return
        log.error("could not reconnect to the head at %s", self.head_address)

    def _on_node_died(self, conn, msg: P.NodeDied, rid):
        """The head declared a node dead: links to it may hang (cut cable), so drop them now;
        the usual paths then retry tasks, reconnect actors and report lost objects."""
        self._dead_nodes.add(msg.node_id)
        for lease in list(self._leases.values()):
            if lease.node_id == msg.node_id:
                lease.conn.abort()
        for st in self._actors.values():
            if st.node_id == msg.node_id and st.conn is not None:
                st.conn.abort()
        for address in (msg.address,):
            for cache in (self._conns, self._data_conns):
                c = cache.pop(address, None)
                if c is not None:
                    c.abort()
        data = self._data_addresses.get(msg.node_id)
        if data:  # a pull blocked on a cut link wakes up and reports the object lost
            with self._bulk_lock:
                bulk = self._bulk_clients.pop(data, None)
            if bulk is not None:
                bulk.close()

    def _on_incoming(self, conn: rpc.Connection) -> None:
        conn.on_close.append(self._on_incoming_closed)

    def _on_incoming_closed(self, conn: rpc.Connection) -> None:
        addr = conn.context.get("borrower_address")
        if addr and not self._closed:
            with self._lock:
                free, unborrow = self.refs.drop_borrowers_at(addr)
            self._release(free, unborrow)

    def _on_node_lost(self, conn: rpc.Connection) -> None:
        if not self._closed:
            log.error("lost the connection to the local raylite node")
            if self.kind == "worker":
                os._exit(1)

    def shutdown(self) -> None:
        if self._closed or self.loop is None:
            return
        self._closed = True

        async def close() -> None:
            if self.kind == "driver" and self.log_handler is not None and self.node is not None:
                # one round trip to the node: worker output it still holds for us is
                # forwarded before its reply, so prints from the last tasks are not lost
                with contextlib.suppress(Exception):
                    await self.node.request(P.GetNodeInfo(), 1.0)
            for lease in list(self._leases.values()):
                try:
                    (lease.node_conn or self.node).send(P.ReturnLease(lease.lease_id))
                except Exception:  # noqa: BLE001
                    pass
            for c in list(self._conns.values()):
                c.close()
            if self._server is not None:
                self._server.close()
            if self.head is not None:
                self.head.close()
            if self.node is not None:
                self.node.close()

        try:
            asyncio.run_coroutine_threadsafe(close(), self.loop).result(2)
        except Exception:  # noqa: BLE001
            pass
        self.loop.call_soon_threadsafe(self.loop.stop)
        if self._thread is not None and self._thread is not threading.current_thread():
            self._thread.join(2)

    # ================================================================ loop helpers
    def run_sync(self, coro, timeout: float | None = None) -> Any:
        """Run a coroutine on the I/O loop from a user thread and wait for it."""
        fut = asyncio.run_coroutine_threadsafe(coro, self.loop)
        try:
            return fut.result(timeout)
        except concurrent.futures.TimeoutError:
            fut.cancel()
            raise

    def call_soon(self, fn, *args) -> None:
        """Run fn(*args) on the I/O loop; safe from any thread.

        Calls are batched: one loop wake-up (a syscall) serves every call queued until
        the loop gets to them, so a burst of submissions costs one wake-up, not one each.
        Append first, then test the flag: the loop clears the flag before draining.
        """
        self._calls.append((fn, args))
        if not self._calls_scheduled:
            self._calls_scheduled = True
            self.loop.call_soon_threadsafe(self._run_calls)

    def _run_calls(self) -> None:
        self._calls_scheduled = False
        calls = self._calls
        while calls:
            fn, args = calls.popleft()
            try:
                fn(*args)
            except Exception:  # noqa: BLE001
                log.exception("callback %r failed on the I/O loop", fn)

    async def connection(self, address: str) -> rpc.Connection:
        conn = self._conns.get(address)
        if conn is not None and not conn.is_closed():
            return conn
        pending = self._connecting.get(address)
        if pending is not None:
            return await asyncio.shield(pending)
        fut = self.loop.create_future()
        self._connecting[address] = fut
        try:
            conn = await rpc.connect(address, self.handlers, token=self.token, role=self.kind)
            conn.on_close.append(lambda c, a=address: self._conns.pop(a, None) if self._conns.get(a) is c else None)
            self._conns[address] = conn
            fut.set_result(conn)
            return conn
        except BaseException as e:
            fut.set_exception(e)
            fut.exception()
            raise
        finally:
            self._connecting.pop(address, None)

    # ================================================================ references
    def ref_created(self, object_id: bytes, owner_address: str, *, borrowed: bool = False) -> None:
        register = False
        with self._lock:
            self.refs.add_local(object_id, owner_address)
            if borrowed and owner_address != self.address:
                register = self.refs.borrow(object_id, owner_address)
        if register and not self._closed:
            self._register_borrow(object_id, owner_address)

    def _register_borrow(self, object_id: bytes, owner_address: str) -> None:
        if threading.current_thread() is self._thread:
            self.loop.create_task(self._send_add_borrower(object_id, owner_address))
            return
        try:
            self.run_sync(self._send_add_borrower(object_id, owner_address), timeout=30)
        except Exception:  # noqa: BLE001  the owner is gone; get() reports it
            pass

    async def _send_add_borrower(self, object_id: bytes, owner_address: str) -> None:
        conn = await self.connection(owner_address)
        await conn.request(P.AddBorrower([object_id], self.address))

    def ref_deleted(self, object_id: bytes) -> None:
        """Called from ObjectRef.__del__, which the GC may run while this thread holds _lock:
        never block on the lock here; queue the decrement and drain it when the lock is free."""
        if self._closed:
            return
        self._deleted.append(object_id)
        if self._lock.acquire(blocking=False):
            try:
                free, unborrow = self._drain_deleted_locked()
            finally:
                self._lock.release()
            if free or unborrow:
                self._release(free, unborrow)
        else:
            try:
                self.loop.call_soon_threadsafe(self._drain_deleted)
            except RuntimeError:  # loop closed
                pass

    def _drain_deleted_locked(self) -> tuple[list, list]:
        free: list = []
        unborrow: list = []
        while self._deleted:
            f, u = self.refs.remove_local(self._deleted.popleft())
            free += f
            unborrow += u
        return free, unborrow

    def _drain_deleted(self) -> None:
        with self._lock:
            free, unborrow = self._drain_deleted_locked()
        if free or unborrow:
            self._release(free, unborrow)

    def _release(self, free: list, unborrow: list) -> None:
        if self._closed:
            return
        stored = []
        with self._lock:
            for oid in free:
                entry = self.entries.pop(oid, None)
                if entry is not None and entry.kind == "s":
                    stored.append((oid, entry.payload))
        if stored or unborrow:
            try:
                self.loop.call_soon_threadsafe(self._send_release, stored, unborrow)
            except RuntimeError:  # loop closed
                pass

    def _send_release(self, stored: list, unborrow: list) -> None:
        local = [oid for oid, loc in stored if loc[0] == self.node_id or self._cached_here(oid)]
        if local:
            try:
                self.node.send(P.FreeObjects(local))
            except Exception:  # noqa: BLE001
                pass
        for oid, loc in stored:
            if loc[0] != self.node_id:
                self.loop.create_task(self._send_to(loc[1], P.FreeObjects([oid])))
        by_owner: dict[str, list] = {}
        for owner, oid in unborrow:
            by_owner.setdefault(owner, []).append(oid)
        for owner, oids in by_owner.items():
            self.loop.create_task(self._send_to(owner, P.RemoveBorrower(oids, self.address)))

    async def _send_to(self, address: str, msg: P.Message) -> None:
        try:
            conn = await self.connection(address)
            conn.send(msg)
        except Exception:  # noqa: BLE001
            pass

    def _on_add_borrower(self, conn, msg: P.AddBorrower, rid):
        conn.context["borrower_address"] = msg.borrower_address
        with self._lock:
            for oid in msg.object_ids:
                self.refs.add_borrower(oid, msg.borrower_address)
        return P.Ack()

    def _on_remove_borrower(self, conn, msg: P.RemoveBorrower, rid):
        free: list = []
        unborrow: list = []
        with self._lock:
            for oid in msg.object_ids:
                f, u = self.refs.remove_borrower(oid, msg.borrower_address)
                free += f
                unborrow += u
        self._release(free, unborrow)
        return None

    # ================================================================ objects: put / store
    def put(self, value: Any, *, _owner_address: str | None = None) -> ObjectRef:
        if isinstance(value, ObjectRef):
            raise TypeError("Calling put() on an ObjectRef is not allowed: it is already in the object "
                            "store. Pass the ref itself, or put([ref]) to wrap it in a list.")
        so = ser.serialize(value, what="the value passed to put()")
        object_id = ObjectID.for_put()
        kind, payload = self._store_value(object_id, so)
        with self._lock:
            self.refs.own(object_id)
            self.entries[object_id] = ObjectEntry(kind, payload)
        ref = ObjectRef(object_id, self.address)
        if so.contained_refs:
            with self._lock:
                self.refs.add_contained(object_id, [(r._id, r._owner) for r in so.contained_refs])
        return ref

    def _store_value(self, object_id: bytes, so: ser.SerializedObject,
                     owner_address: str = "") -> tuple[str, Any]:
        """Inline small values; write big ones to this node's shared-memory store.

        owner_address: who owns the object when not this process (a task's return value
        belongs to its caller); the node frees an owner's objects when the owner exits."""
        kind = "e" if so.kind == ser.KIND_ERROR else "v"
        if so.total_bytes() <= self.config.inline_threshold_bytes:
            return kind, so.to_inline()
        path = os.path.join(self.store_dir, object_id.hex())
        owner = owner_address or self.address
        size = self._write_to_store(object_id, so, path, owner)
        msg = P.ObjectSealed(object_id, size, owner)
        if threading.current_thread() is self._thread:
            self.node.send(msg)
        else:
            self.loop.call_soon_threadsafe(self._send_node, msg)
        return "s", [self.node_id, self.node_public_address or self.node_address, size]

    def _write_to_store(self, object_id: bytes, so: ser.SerializedObject, path: str, owner: str) -> int:
        """Ask the node for room first (it spills LRU objects when full and hands over a
        recycled, already-faulted segment), then write the object once, in place."""
        if threading.current_thread() is self._thread:
            return ser.write_file(so, path)  # the loop cannot wait on the node; counted when sealed
        reply = self.run_sync(self.node.request(P.CreateObject(object_id, ser.stored_size(so), owner)))
        if not reply.ok:
            raise E.ObjectStoreFullError(reply.error)
        try:
            return ser.write_into(so, path)
        except BaseException:
            self.loop.call_soon_threadsafe(self._send_node, P.FreeObjects([object_id]))
            raise

    def _send_node(self, msg: P.Message) -> None:
        try:
            self.node.send(msg)
        except Exception:  # noqa: BLE001
            pass

    def _set_entry(self, object_id: bytes, kind: str, payload: Any) -> None:
        """Loop or user thread: an owned object became ready; wake its waiters."""
        with self._lock:
            entry = self.entries.get(object_id)
            if entry is None:
                # nobody holds a ref any more: free a stored copy at once
                if kind == "s":
                    self.loop.call_soon(self._send_release, [(object_id, payload)], [])
                return
            if entry.kind is not None:
                return
            entry.kind = kind
            entry.payload = payload
            waiters, entry.waiters = entry.waiters, []
        for w in waiters:
            if isinstance(w, _Latch):
                w.count_down()
            else:
                w(entry)

    # ================================================================ get / wait
    def _entry_for(self, ref: ObjectRef) -> ObjectEntry:
        oid = ref._id
        entry = self.entries.get(oid)
        if entry is not None:
            return entry
        with self._lock:
            entry = self.entries.get(oid)
            if entry is not None:
                return entry
            entry = self.entries[oid] = ObjectEntry()
            if ref._owner == self.address or not ref._owner:
                entry.kind, entry.payload = "e", self._lost_error(oid, "its owner released it")
                return entry
        self.loop.call_soon_threadsafe(self._start_fetch, oid, ref._owner)
        return entry

    def _lost_error(self, oid: bytes, why: str) -> list:
        err = E.ObjectLostError(oid.hex(), why)
        return ser.serialize(err, kind=ser.KIND_ERROR).to_inline()

    def _start_fetch(self, oid: bytes, owner: str) -> None:
        self.loop.create_task(self._fetch_status(oid, owner))

    async def _fetch_status(self, oid: bytes, owner: str) -> None:
        try:
            conn = await self.connection(owner)
            reply: P.GetObjectStatusReply = await conn.request(P.GetObjectStatus(oid, True))
            kind = {"inline": "v", "error": "e", "store": "s"}.get(reply.kind)
            if kind is None:
                self._set_entry(oid, "e", self._lost_error(oid, "its owner no longer has it"))
            else:
                self._set_entry(oid, kind, reply.payload)
        except Exception as e:  # noqa: BLE001
            err = E.OwnerDiedError(oid.hex(), f"its owner ({owner}) is unreachable: {e}. The process that "
                                   "created the object exited; keep the creating process alive while "
                                   "others use its objects.")
            self._set_entry(oid, "e", ser.serialize(err, kind=ser.KIND_ERROR).to_inline())

    def get(self, refs: list[ObjectRef], timeout: float | None = None) -> list[Any]:
        entries = [self._entry_for(r) for r in refs]
        pending = [e for e in entries if e.kind is None]
        if pending:
            self._wait_entries(pending, len(pending), timeout, refs)
        return [self._materialize(r, e) for r, e in zip(refs, entries)]

    def _wait_entries(self, entries: list[ObjectEntry], need: int, timeout: float | None, refs) -> None:
        latch = _Latch(need)
        registered = []
        with self._lock:
            ready = 0
            for e in entries:
                if e.kind is None:
                    e.waiters.append(latch)
                    registered.append(e)
                else:
                    ready += 1
            for _ in range(min(ready, need)):
                latch.count_down()
        if latch._n <= 0:
            self._drop_waiter(registered, latch)
            return
        hook = self.blocked_hook
        if hook is not None:
            hook(True)
        try:
            ok = latch.wait(timeout)
        finally:
            if hook is not None:
                hook(False)
            self._drop_waiter(registered, latch)
        if not ok:
            n = sum(1 for e in entries if e.kind is None)
            raise E.GetTimeoutError(f"get() timed out after {timeout}s: {n} of {len(entries)} objects "
                                    "were not ready. Raise the timeout, or check `raylite status` for "
                                    "tasks waiting on resources.")

    def _drop_waiter(self, entries: list[ObjectEntry], latch: _Latch) -> None:
        with self._lock:
            for e in entries:
                if latch in e.waiters:
                    e.waiters.remove(latch)

    def _materialize(self, ref: ObjectRef, entry: ObjectEntry) -> Any:
        kind, payload = entry.kind, entry.payload
        if kind == "v":
            return ser.from_inline(payload)
        if kind == "s":
            value_kind, value = self._read_stored(ref._id, payload)
            if value_kind == ser.KIND_ERROR:
                raise value
            return value
        if kind == "e":
            err = ser.from_inline(payload)
            raise err
        raise E.RaySystemError(f"object {ref.hex()} has no value (kind={kind})")

    def _read_stored(self, oid: bytes, location: list) -> tuple[int, Any]:
        node_id = location[0]
        path = os.path.join(self.store_dir, oid.hex())
        if node_id != self.node_id and not os.path.exists(path):
            self.run_sync(self._pull_object(oid, location))
        try:
            return ser.read_file(path)
        except FileNotFoundError:
            pass
        # spilled to disk? the node brings it back into shared memory
        reply: P.RestoreObjectReply = self.run_sync(self.node.request(P.RestoreObject(oid)))
        if reply.found:
            try:
                return ser.read_file(path)
            except FileNotFoundError:
                pass
        if reply.error.startswith("Cannot restore"):
            raise E.ObjectStoreFullError(reply.error)
        raise E.ObjectLostError(oid.hex(), "its shared-memory file is gone (it was freed, or its "
                                f"node's store was cleared){': ' + reply.error if reply.error else ''}")

    async def _pull_object(self, oid: bytes, location: list) -> None:
        """Copy an object from another node's store into ours (cached there for others)."""
        if location[0] in self._dead_nodes:
            raise E.ObjectLostError(oid.hex(), f"node {location[0].hex()[:8]} died holding its only copy")
        try:
            if not await self._bulk_pull(oid, location):
                await self._pull_chunks(oid, location)
        except (E.ObjectLostError, E.ObjectStoreFullError):
            raise
        except Exception as e:  # noqa: BLE001
            raise E.ObjectLostError(oid.hex(), f"node {location[0].hex()[:8]} is unreachable ({e}); it "
                                    "held the only copy") from None

    async def _bulk_pull(self, oid: bytes, location: list) -> bool:
        """Pull over the peer's bulk stream (sendfile -> mapped file); False if it has none."""
        addr = self._data_addresses.get(location[0])
        if addr is None:
            info = await self.head.request(P.GetClusterInfo())
            for n in info.nodes:
                self._data_addresses[n["node_id"]] = n.get("data_address", "")
            addr = self._data_addresses.get(location[0], "")
        if not addr:
            return False
        path = os.path.join(self.store_dir, oid.hex())
        # room in our store under a scratch id: the node makes space (spilling if it must) and
        # hands over a recycled segment whose pages are already faulted in; renamed when done,
        # so readers on this node never see a half-written object
        scratch = os.urandom(20)
        reply = await self.node.request(P.CreateObject(scratch, location[2], ""))
        if not reply.ok:
            raise E.ObjectStoreFullError(reply.error)
        tmp = os.path.join(self.store_dir, scratch.hex())
        try:
            total = await self.loop.run_in_executor(None, self._bulk_pull_blocking, addr, oid, tmp)
            if total is None:
                raise E.ObjectLostError(oid.hex(), f"node {location[0].hex()[:8]} no longer has it")
            os.replace(tmp, path)
            self.node.send(P.ObjectSealed(oid, total, "", True))
        finally:
            self.node.send(P.FreeObjects([scratch]))  # its reservation; the file moved on (or is recycled)
        return True

    def _cached_here(self, oid: bytes) -> bool:
        """Multi-node: a copy of a remote object was pulled into our node's store."""
        return self.node_public_address != self.node_address and \
            os.path.exists(os.path.join(self.store_dir, oid.hex()))

    def _bulk_pull_blocking(self, addr: str, oid: bytes, tmp: str) -> int | None:
        from raylite._core.transport.bulk import BulkClient

        with self._bulk_lock:
            client = self._bulk_clients.get(addr)
            if client is None:
                client = self._bulk_clients[addr] = BulkClient(addr, self.token)
        try:
            return client.pull(oid, tmp)
        except BaseException:
            with self._bulk_lock:
                if self._bulk_clients.get(addr) is client:
                    del self._bulk_clients[addr]
            client.close()
            with contextlib.suppress(OSError):
                os.unlink(tmp)
            raise

    async def _pull_chunks(self, oid: bytes, location: list) -> None:
        """Chunks travel on a connection of their own (so control messages to that node never
        queue behind them), several requests in flight to keep the link busy."""
        node_address = location[1]
        conn = self._data_conns.get(node_address)
        if conn is None or conn.is_closed():
            conn = await rpc.connect(node_address, {}, token=self.token, role=self.kind)
            self._data_conns[node_address] = conn
        chunk = 4 << 20
        path = os.path.join(self.store_dir, oid.hex())
        tmp = path + f".part{os.getpid()}_{id(conn) & 0xffff}"
        first: P.PullObjectReply = await conn.request(P.PullObject(oid, 0, chunk))
        if not first.found:
            raise E.ObjectLostError(oid.hex(), f"node {location[0].hex()[:8]} no longer has it")
        total = first.total_size
        fd = os.open(tmp, os.O_CREAT | os.O_WRONLY | os.O_TRUNC, 0o600)
        try:
            os.pwrite(fd, first.data, 0)
            offsets = list(range(len(first.data), total, chunk))
            window = 4
            for i in range(0, len(offsets), window):
                futs = [conn.request_future(P.PullObject(oid, off, chunk)) for off in offsets[i:i + window]]
                for off, fut in zip(offsets[i:i + window], futs):
                    reply: P.PullObjectReply = await fut
                    if not reply.found:
                        raise E.ObjectLostError(oid.hex(), f"node {location[0].hex()[:8]} no longer has it")
                    os.pwrite(fd, reply.data, off)
        finally:
            os.close(fd)
        os.replace(tmp, path)
        self.node.send(P.ObjectSealed(oid, total, "", True))

    def wait(self, refs: list[ObjectRef], num_returns: int, timeout: float | None,
             fetch_local: bool = True) -> tuple[list[ObjectRef], list[ObjectRef]]:
        deadline = None if timeout is None else time.monotonic() + timeout
        entries = [self._entry_for(r) for r in refs]
        ready_count = sum(1 for e in entries if e.kind is not None)
        if ready_count < num_returns:
            try:
                self._wait_entries([e for e in entries if e.kind is None], num_returns - ready_count,
                                   timeout, refs)
            except E.GetTimeoutError:
                pass
        ready, not_ready = [], []
        for r, e in zip(refs, entries):
            (ready if e.kind is not None and len(ready) < num_returns else not_ready).append(r)
        if fetch_local and ready:
            fetched = self._fetch_remote(ready, deadline)
            if len(fetched) < len(ready):  # still on their way here: not ready yet
                late = (set(map(id, ready)) - set(map(id, fetched))) | set(map(id, not_ready))
                not_ready = [r for r in refs if id(r) in late]
                ready = fetched
        return ready, not_ready

    def _fetch_remote(self, refs: list[ObjectRef], deadline: float | None) -> list[ObjectRef]:
        """wait(fetch_local=True): pull ready objects that live on other nodes into this
        node's store (in parallel, until the deadline); returns the refs now local."""
        remote = {}
        for r in refs:
            entry = self.entries.get(r._id)
            if entry is not None and entry.kind == "s" and entry.payload[0] != self.node_id \
                    and not os.path.exists(os.path.join(self.store_dir, r._id.hex())):
                remote[id(r)] = (r, entry.payload)
        if not remote:
            return refs

        async def pull_all() -> list:
            return await asyncio.gather(*(self._pull_object(r._id, loc) for r, loc in remote.values()),
                                        return_exceptions=True)

        left = None if deadline is None else max(0.0, deadline - time.monotonic())
        try:
            results = self.run_sync(pull_all(), left)
        except Exception:  # noqa: BLE001  timed out: what arrived so far is local
            results = [None if os.path.exists(os.path.join(self.store_dir, r._id.hex())) else TimeoutError()
                       for r, _ in remote.values()]
        failed = {key for key, res in zip(remote, results)
                  if isinstance(res, BaseException) and not isinstance(res, E.ObjectLostError)}
        return [r for r in refs if id(r) not in failed]

    def future_of(self, ref: ObjectRef) -> concurrent.futures.Future:
        fut: concurrent.futures.Future = concurrent.futures.Future()
        entry = self._entry_for(ref)

        def resolve(_entry=None) -> None:
            def work() -> None:
                try:
                    fut.set_result(self._materialize(ref, entry))
                except BaseException as e:  # noqa: BLE001
                    fut.set_exception(e)
            threading.Thread(target=work, daemon=True).start() if _needs_thread(entry) else work()

        with self._lock:
            if entry.kind is None:
                entry.waiters.append(resolve)
                return fut
        resolve()
        return fut

    # owner service: another process asks for one of our objects
    async def _on_get_object_status(self, conn, msg: P.GetObjectStatus, rid):
        oid = msg.object_id
        entry = self.entries.get(oid)
        if entry is None:
            return P.GetObjectStatusReply(oid, "lost", None)
        if entry.kind is None and msg.wait:
            fut = self.loop.create_future()
            with self._lock:
                if entry.kind is None:
                    entry.waiters.append(lambda e: fut.done() or self.loop.call_soon_threadsafe(_set_if_pending, fut))
                else:
                    fut.set_result(None)
            await fut
        kind = {"v": "inline", "e": "error", "s": "store"}.get(entry.kind, "lost")
        return P.GetObjectStatusReply(oid, kind, entry.payload)

    # ================================================================ tasks
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
        arg_refs: list = []
        pinned: list = []
        if any(isinstance(a, ObjectRef) for a in args) or any(isinstance(v, ObjectRef) for v in kwargs.values()):
            args = list(args)
            for i, a in enumerate(args):
                if isinstance(a, ObjectRef):
                    args[i] = _ArgPlaceholder(len(arg_refs))
                    arg_refs.append([len(arg_refs), a._id, a._owner])
            kwargs = dict(kwargs)
            for k, v in kwargs.items():
                if isinstance(v, ObjectRef):
                    kwargs[k] = _ArgPlaceholder(len(arg_refs))
                    arg_refs.append([len(arg_refs), v._id, v._owner])
        so = ser.serialize((tuple(args), kwargs), what=f"the arguments of {what}")
        pinned = [r[1] for r in arg_refs] + [r._id for r in so.contained_refs]
        if so.total_bytes() > self.config.inline_threshold_bytes:
            ref = self.put(_PackedArgs(so.meta, [memoryview(b) for b in so.buffers]))
            pinned.append(ref._id)
            payload = ["ref", ref._id, self.address]
        else:
            payload = ["inline", *so.to_inline()]
        with self._lock:
            self.refs.add_submitted(pinned)
        return payload, arg_refs, pinned

    def submit_task(self, spec: TaskSpec, pinned: list, retry_exceptions: Any) -> Any:
        return_ids = spec.return_ids()
        with self._lock:
            for oid in return_ids:
                self.refs.own(oid)
                self.entries[oid] = ObjectEntry()
        rec = TaskRecord(spec, spec.max_retries, retry_exceptions, pinned)
        if spec.num_returns in (STREAMING, DYNAMIC):
            self._generators[spec.task_id] = GeneratorState(dynamic=spec.num_returns == DYNAMIC)
            gen = ObjectRefGenerator(spec.task_id, self) if spec.num_returns == STREAMING else None
            refs = [ObjectRef(oid, self.address) for oid in return_ids]
            self._tasks[spec.task_id] = rec
            self.call_soon(self._enqueue_task, rec)
            return gen if gen is not None else refs[0]
        refs = [ObjectRef(oid, self.address) for oid in return_ids]
        self._tasks[spec.task_id] = rec
        self.call_soon(self._enqueue_task, rec)
        if spec.num_returns == 1:
            return refs[0]
        return refs if spec.num_returns > 1 else None

    def _enqueue_task(self, rec: TaskRecord) -> None:
        if rec.cancelled:
            return
        spec = rec.spec
        if spec.kind == KIND_ACTOR_CALL:
            self._send_actor_task(rec)
            return
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
                    e.waiters.append(one_ready)
            if still:
                return
        self._inline_ready_args(rec)
        key = (tuple(sorted(spec.resources.items())), env_key(spec.runtime_env), tuple(map(str, spec.strategy)))
        q = self._queues.get(key)
        if q is None:
            q = self._queues[key] = SchedulingQueue(key, spec.resources, spec.runtime_env, spec.strategy,
                                                    spec.display_name())
        q.tasks.append(rec)
        self._pump(q)

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

    def _pump(self, q: SchedulingQueue) -> None:
        limit = self._pipeline_depth(q)
        for lease in q.leases:
            if lease.blocked:
                if lease.in_flight:
                    continue
                lease.blocked = False
            while q.tasks and lease.in_flight < limit and not lease.dead:
                rec = q.tasks.popleft()
                if rec.cancelled:
                    continue
                self._push(rec, lease)
        want = min(len(q.tasks), 16) - q.requesting
        for _ in range(max(0, want)):
            q.requesting += 1
            self.loop.create_task(self._request_lease(q))
        if not q.tasks:
            for lease in q.leases:
                if lease.in_flight == 0 and lease.idle_handle is None:
                    lease.idle_handle = self.loop.call_later(self.config.lease_idle_timeout_s,
                                                             self._return_lease, lease)

    async def _request_lease(self, q: SchedulingQueue) -> None:
        from raylite._core.ids import WorkerID

        lease_id = WorkerID.from_random()
        node_conn = self.node
        try:
            reply: P.RequestLeaseReply = await self.node.request(
                P.RequestLease(lease_id, q.resources, q.strategy, q.runtime_env, q.description))
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
        if not q.tasks:
            self._return_lease(lease)
            return
        self._pump(q)

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
            self._pump(lease.queue)

    def _task_worker_died(self, rec: TaskRecord, exc: BaseException) -> None:
        if rec.cancelled:
            self._finish_with_error(rec, E.TaskCancelledError(rec.spec.task_id.hex()))
            return
        if rec.retries_left != 0:
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
            self._requeue(rec)
            return
        if spec.num_returns in (STREAMING, DYNAMIC):
            self._generator_finished(rec, reply)
        else:
            for item in reply.returns:
                if len(item) > 3:
                    self._adopt_contained(item[0], item[3])
                self._set_entry(item[0], item[1], item[2])
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

    def _finish_with_error(self, rec: TaskRecord, err: BaseException) -> None:
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
    def _on_generator_item(self, conn, msg: P.GeneratorItem, rid):
        gen = self._generators.get(msg.task_id)
        oid, kind, payload = msg.item[:3]
        with self._lock:
            self.refs.own(oid)
            self.entries[oid] = ObjectEntry(kind, payload)
        if len(msg.item) > 3:
            self._adopt_contained(oid, msg.item[3])
        if gen is None:
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
            if gen.error:
                self._set_entry(first, *gen.error)
            else:
                value = DynamicObjectRefGenerator(list(gen.items))
                so = ser.serialize(value)
                self._set_entry(first, "v", so.to_inline())
                with self._lock:
                    self.refs.add_contained(first, [(r._id, r._owner) for r in gen.items])
        else:
            self._set_entry(first, *(gen.error or ("v", ser.serialize(None).to_inline())))
        with self._lock:
            gen.done = True
            waiters, gen.waiters = gen.waiters, []
        for w in waiters:
            w.count_down()
        if gen.dynamic:
            self._generators.pop(rec.spec.task_id, None)

    def next_generator_item(self, task_id: bytes, index: int, timeout: float | None) -> ObjectRef | None:
        gen = self._generators.get(task_id)
        if gen is None:
            return None
        while True:
            with self._lock:
                if index < len(gen.items):
                    return gen.items[index]
                if gen.done:
                    if gen.error:
                        kind, payload = gen.error
                        gen.error = None  # raise once, then end
                        raise ser.from_inline(payload)
                    return None
                latch = _Latch(1)
                gen.waiters.append(latch)
            hook = self.blocked_hook
            if hook is not None:
                hook(True)
            try:
                if not latch.wait(timeout):
                    raise E.GetTimeoutError("timed out waiting for the next generator item")
            finally:
                if hook is not None:
                    hook(False)

    def generator_completed_ref(self, task_id: bytes) -> ObjectRef:
        return ObjectRef(ObjectID.for_return(task_id, 1), self.address)

    def generator_length(self, task_id: bytes) -> int:
        gen = self._generators.get(task_id)
        return len(gen.items) if gen else 0

    def generator_dropped(self, task_id: bytes) -> None:
        gen = self._generators.get(task_id)
        if gen is not None and gen.done and not self._closed:
            self._generators.pop(task_id, None)

    # ================================================================ actors
    def register_actor(self, spec: TaskSpec, get_if_exists: bool) -> P.RegisterActorReply:
        reply: P.RegisterActorReply = self.run_sync(self.head.request(P.RegisterActor(spec.to_wire(), get_if_exists)))
        if reply.error_type:
            raise getattr(E, reply.error_type, None) or ValueError(reply.error) if reply.error_type != "ValueError" else ValueError(reply.error)
        return reply

    def submit_actor_task(self, spec: TaskSpec, pinned: list) -> Any:
        return self.submit_task(spec, pinned, False)

    def _send_actor_task(self, rec: TaskRecord) -> None:
        aid = rec.spec.actor_id
        st = self._actors.get(aid)
        if st is None:
            st = self._actors[aid] = ActorState(aid)
        if st.dead_error is not None:
            self._finish_with_error(rec, st.dead_error)
            return
        st.queue.append(rec)
        self._flush_actor(st)

    def _flush_actor(self, st: ActorState) -> None:
        if st.conn is None or st.conn.is_closed():
            if not st.connecting:
                st.connecting = True
                self.loop.create_task(self._connect_actor(st))
            return
        while st.queue:
            rec = st.queue.popleft()
            if rec.cancelled:
                continue
            st.seq += 1  # one connection per caller keeps calls in order; no per-call copy needed
            st.in_flight[rec.spec.task_id] = rec
            rec.worker_conn = st.conn
            fut = st.conn.request_future(P.PushTask(rec.spec.to_wire()))
            fut.add_done_callback(lambda f, rec=rec, st=st: self._on_actor_reply(st, rec, f))

    async def _connect_actor(self, st: ActorState) -> None:
        try:
            while True:
                info: P.ActorInfo = await self.head.request(P.GetActorInfo(st.actor_id, True, st.restarts_seen))
                if info.state == "DEAD":
                    self._actor_is_dead(st, info)
                    return
                st.restarts_seen = info.num_restarts
                st.node_id = info.node_id
                try:
                    conn = await self.connection(info.address)
                except ConnectionBrokenError:
                    await asyncio.sleep(0.05)
                    continue
                st.conn = conn
                conn.on_close.append(lambda c, st=st: self._actor_conn_lost(st, c))
                break
        except Exception as e:  # noqa: BLE001
            self._actor_is_dead(st, None, str(e))
            return
        finally:
            st.connecting = False
        self._flush_actor(st)

    def _actor_is_dead(self, st: ActorState, info: P.ActorInfo | None, why: str = "") -> None:
        cause = (info.death_cause if info else why) or "The actor died."
        if info is not None and info.creation_error is not None:
            try:
                init_err = ser.from_inline(info.creation_error)
                cause = f"{cause}\n{init_err}"
            except Exception:  # noqa: BLE001
                pass
        name = info.class_name if info else ""
        msg = (f"The actor {name + ' ' if name else ''}({st.actor_id.hex()[:12]}) is dead: {cause}")
        err: E.RayActorError = E.ActorDiedError(msg, st.actor_id.hex())
        if cause.startswith("UNSCHEDULABLE: "):
            err = E.ActorUnschedulableError(msg)  # type: ignore[assignment]
        st.dead_error = err
        while st.queue:
            self._finish_with_error(st.queue.popleft(), err)
        for rec in list(st.in_flight.values()):
            self._finish_with_error(rec, err)
        st.in_flight.clear()

    def _actor_conn_lost(self, st: ActorState, conn) -> None:
        if st.conn is conn:
            st.conn = None
        # in-flight calls get their fate in _on_actor_reply (the futures fail with the connection)
        if st.queue and not st.connecting and st.dead_error is None:
            st.connecting = True
            self.loop.create_task(self._connect_actor(st))

    def actor_out_of_scope(self, actor_id: bytes) -> None:
        """Loop thread: the last handle is gone; stop the actor once submitted calls finish."""
        st = self._actors.get(actor_id)
        if st is not None and (st.queue or st.in_flight):
            st.kill_when_idle = True
            return
        self._kill_quietly(actor_id)

    def _kill_quietly(self, actor_id: bytes) -> None:
        try:
            self.head.send(P.KillActor(actor_id, True))
        except Exception:  # noqa: BLE001
            pass

    def _on_actor_reply(self, st: ActorState, rec: TaskRecord, fut: asyncio.Future) -> None:
        st.in_flight.pop(rec.spec.task_id, None)
        if st.kill_when_idle and not st.queue and not st.in_flight:
            st.kill_when_idle = False
            self.loop.call_soon(self._kill_quietly, st.actor_id)
        exc = fut.exception() if not fut.cancelled() else asyncio.CancelledError()
        if exc is None:
            self._task_done(rec, fut.result())
            return
        if st.dead_error is not None:
            self._finish_with_error(rec, st.dead_error)
            return
        if rec.cancelled:
            self._finish_with_error(rec, E.TaskCancelledError(rec.spec.task_id.hex()))
            return
        limit = rec.spec.max_task_retries
        if limit == -1 or rec.spec.attempt < limit:
            rec.spec = rec.spec.replace(attempt=rec.spec.attempt + 1)
            st.queue.appendleft(rec)
            if not st.connecting:
                st.connecting = True
                self.loop.create_task(self._connect_actor(st))
            return
        self._finish_with_error(rec, E.ActorDiedError(
            f"The actor ({st.actor_id.hex()[:12]}) died while running {rec.spec.display_name()}: its "
            "worker process exited or was killed. If the actor has max_restarts > 0 it restarts; set "
            "max_task_retries to retry calls that were running.", st.actor_id.hex()))
        if not st.connecting:
            st.connecting = True
            self.loop.create_task(self._connect_actor(st))

    def actor_info(self, actor_id: bytes, wait_alive: bool = False) -> P.ActorInfo:
        return self.run_sync(self.head.request(P.GetActorInfo(actor_id, wait_alive, -1)))

    def kill_actor(self, actor_id: bytes, no_restart: bool) -> None:
        self.run_sync(self.head.request(P.KillActor(actor_id, no_restart)))
        if no_restart:
            self.run_sync(self._mark_killed(actor_id))

    async def _mark_killed(self, actor_id: bytes) -> None:
        """Calls made after kill() fail at once instead of racing the kill."""
        st = self._actors.get(actor_id)
        if st is None:
            st = self._actors[actor_id] = ActorState(actor_id)
        st.dead_error = E.ActorDiedError(
            f"The actor ({actor_id.hex()[:12]}) was killed by raylite.kill(no_restart=True).", actor_id.hex())
        while st.queue:
            self._finish_with_error(st.queue.popleft(), st.dead_error)

    # ================================================================ cancel
    def cancel(self, ref: ObjectRef, force: bool, recursive: bool) -> None:
        task_id = ObjectID(ref._id).task_id()
        rec = self._tasks.get(bytes(task_id))
        if force and rec is not None and rec.spec.kind == KIND_ACTOR_CALL:
            raise ValueError("force=True is not supported for actor tasks: an actor's process runs "
                             "its other calls too. Use raylite.kill(actor) to stop the actor.")
        self.loop.call_soon_threadsafe(self._cancel, bytes(task_id), force, recursive)

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

    # ================================================================ head requests
    def head_request(self, msg: P.Message, timeout: float | None = None) -> Any:
        return self.run_sync(self.head.request(msg), timeout)

    def node_request(self, msg: P.Message, timeout: float | None = None) -> Any:
        return self.run_sync(self.node.request(msg), timeout)

    def _on_log_lines(self, conn, msg: P.LogLines, rid):
        if self.log_handler is not None:
            self.log_handler(msg)

    def new_task_id(self) -> bytes:
        return TaskID.from_random()


_SIGNAL_HINTS = {
    "SIGSEGV": "a crash in native code, e.g. a C extension or a library bug",
    "SIGBUS": "a crash in native code, or shared memory (/dev/shm) ran out",
    "SIGABRT": "native code aborted, e.g. a failed assertion in a C++ library",
    "SIGKILL": "killed from outside: often the kernel's OOM killer when memory ran out",
    "SIGTERM": "asked to stop by another process",
}


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


def _set_if_pending(fut: asyncio.Future) -> None:
    if not fut.done():
        fut.set_result(None)


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


def _needs_thread(entry: ObjectEntry) -> bool:
    return entry.kind == "s"


class _ArgPlaceholder:
    """Stands for a top-level ObjectRef argument inside the pickled (args, kwargs)."""

    __slots__ = ("index",)

    def __init__(self, index: int) -> None:
        self.index = index

    def __reduce__(self):
        return (_ArgPlaceholder, (self.index,))


class _PackedArgs:
    """Large pickled arguments, shipped through the object store instead of the message."""

    def __init__(self, meta: bytes, buffers: list) -> None:
        self.meta = meta
        self.buffers = buffers

    def __reduce_ex__(self, protocol):
        return (_PackedArgs, (self.meta, [pickle_buffer(b) for b in self.buffers]))


def pickle_buffer(b):
    import pickle

    return pickle.PickleBuffer(b)
