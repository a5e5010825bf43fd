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
import errno
import logging
import os
import random
import socket
import threading
from typing import Any

from raylite._core import protocol as P
from raylite._core import serialization as ser
from raylite._core.client.actors import ActorCaller
from raylite._core.client.head_calls import HeadCalls
from raylite._core.client.head_link import HeadLink
from raylite._core.client.lineage import LineageRebuilder
from raylite._core.client.objects import ObjectPlane
from raylite._core.client.records import (
    ActorState,
    GeneratorState,
    Lease,
    ObjectEntry,
    SchedulingQueue,
    TaskRecord,
)
from raylite._core.client.reference_counter import ReferenceCounter
from raylite._core.client.tasks import TaskSubmitter
from raylite._core.config import Config
from raylite._core.core_api import CoreAPI
from raylite._core.head.task_events import TaskEventBuffer, describe_task
from raylite._core.ids import TaskID
from raylite._core.private_paths import owned_dir as private_dir
from raylite._core.transport import rpc
from raylite._core.transport.base import ConnectionBrokenError
from raylite._core.transport.loops import new_event_loop

log = logging.getLogger("raylite.core")


def finish_pending_tasks(loop: asyncio.AbstractEventLoop, timeout_s: float = 1.0) -> None:
    """Cancel the tasks still pending on a stopped I/O loop and let them unwind before it closes.

    A request whose reply had not come when the client shut down (a lease asked for while the
    last results arrived on other leases) leaves its task waiting; closing the loop under it
    prints "Task was destroyed but it is pending!" on the user's terminal as the program exits.
    A cancelled task may start another (its `finally` pumps a queue), so this goes a few rounds.
    """
    for _ in range(3):
        pending = [t for t in asyncio.all_tasks(loop) if not t.done()]
        if not pending:
            return
        for task in pending:
            task.cancel()
        with contextlib.suppress(Exception):
            loop.run_until_complete(asyncio.wait(pending, timeout=timeout_s))
        for task in pending:  # retrieved, so none is reported as "exception never retrieved"
            if task.done() and not task.cancelled():
                task.exception()


class CoreClient(ObjectPlane, TaskSubmitter, ActorCaller, LineageRebuilder, HeadCalls, CoreAPI):
    """The engine behind the Core API in one process; its concerns live in the mixins:
    ObjectPlane (client_objects.py), TaskSubmitter (client_tasks.py), ActorCaller
    (client_actors.py), LineageRebuilder (client_lineage.py), HeadCalls (head_calls.py: the public
    layer's head requests). This class holds the shared state, the I/O loop, connections and
    reference counting. It is the CoreAPI (core_api.py) of a process on a cluster machine."""

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
        self._flush_armed = False  # a task-event flush is scheduled
        self._trim_armed = False  # a writer-map trim is scheduled
        self._deleted: collections.deque = collections.deque()  # decrements queued by __del__
        self.entries: dict[bytes, ObjectEntry] = {}
        self._mappings: dict[bytes, int] = {}  # store objects this process maps now (I/O loop only)
        self._mapping_news: dict[bytes, bool] = {}  # not yet told to the node: mapped or not
        self._mapping_flush = False
        self._node_sync = None  # blocking link to the node for user threads' round trips (node_sync.py)
        self.frees_queued: collections.deque = collections.deque()  # frees handed to the loop, not yet sent
        self.refs = ReferenceCounter(self.address)
        self.node: rpc.Connection | None = None
        self.head: HeadLink | None = None
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
        # task events (task_events.py): appended on the task path, flushed to the head ~1/s
        # The head keeps the newest task_events_max_per_job rows of a job: a flush carrying many
        # more (a burst of a million submissions) only costs both sides memory for events the
        # head drops, so the buffer holds about that many (the oldest go first, counted)
        self.task_events: TaskEventBuffer | None = (
            TaskEventBuffer(capacity=3 * config.task_events_max_per_job) if config.task_events_enabled else None)
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
            P.FlushTaskEvents: self._on_flush_task_events,
            P.CancelTask: self._on_cancel_owned,
        }

    # ================================================================ life cycle
    def start(self) -> None:
        """Start the I/O thread and connect to the node and head. Blocks until ready."""
        ready = concurrent.futures.Future()

        def run() -> None:
            loop = new_event_loop()
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
            finish_pending_tasks(loop)
            loop.close()

        self._thread = threading.Thread(target=run, name="raylite-io", daemon=True)
        self._thread.start()
        ready.result()

    async def _connect(self) -> None:
        self.handlers.update(self.extra_handlers)
        private_dir(os.path.join(self.session_dir, "sockets"))
        self._server = await rpc.listen(self.address, self.handlers, token=self.token,
                                        on_connect=self._on_incoming, sock=self._listen_sock)
        self.node = await connect_patiently(self.node_address, self.handlers, token=self.token, role=self.kind,
                                            within_s=self.config.worker_start_timeout_s)
        self.node.on_close.append(self._on_node_lost)
        reply: P.RegisterClientReply = await self.node.request(P.RegisterClient(
            self.worker_id, self.kind, os.getpid(), self.job_id, self.address, self.namespace))
        self.node_id = reply.node_id
        self.node_ip = reply.node_ip
        self.store_dir = reply.store_dir
        self.head_address = reply.head_address
        self.node_public_address = reply.node_tcp_address or self.node_address
        self.head = self._head_link(reply.head_address)
        if self.kind != "worker":
            await self.head.connected()  # a driver registers its job and hears broadcasts at once
        if self.task_events is not None:
            self.task_events.on_first = self._events_arrived
            self.task_events.on_batch = self._events_piled_up
            if len(self.task_events):
                self._events_arrived()

    # periodic work runs only while there is work: a thousand idle actors must not wake up
    def _events_arrived(self) -> None:
        """Any thread: the task event buffer was empty and has an event now."""
        if not self._flush_armed and not self._closed:
            self._flush_armed = True
            with contextlib.suppress(RuntimeError):  # the loop is gone
                self.loop.call_soon_threadsafe(self.loop.call_later, self.config.task_events_flush_interval_s,
                                               self._flush_task_events_timer)

    def _events_piled_up(self) -> None:
        """Any thread: a batch of task events is waiting; send it now, not at the next tick."""
        with contextlib.suppress(RuntimeError):
            self.loop.call_soon_threadsafe(self.flush_task_events)

    def _flush_task_events_timer(self) -> None:
        if self._closed:
            return
        self.flush_task_events()
        if self.task_events is not None and len(self.task_events):
            self.loop.call_later(self.config.task_events_flush_interval_s, self._flush_task_events_timer)
            return
        self._flush_armed = False
        if self.task_events is not None and len(self.task_events):  # one slipped in meanwhile
            self._events_arrived()

    def wrote_segment(self) -> None:
        """Any thread: a put() wrote a shared-memory segment whose mapping stays cached."""
        if not self._trim_armed and not self._closed:
            self._trim_armed = True
            with contextlib.suppress(RuntimeError):
                self.loop.call_soon_threadsafe(self.loop.call_later, 2.0, self._trim_writer_maps)

    def flush_task_events(self) -> None:
        """Send what the buffer holds to the head in one message (on the I/O loop)."""
        buf = self.task_events
        if buf is None or not len(buf) or self.head is None or self.head.is_closed():
            return
        events, descs, dropped = buf.drain(describe_task)
        with contextlib.suppress(Exception):
            self.head.send(P.TaskEvents(events, dropped, descs))

    async def _on_flush_task_events(self, conn, msg: P.FlushTaskEvents, rid: int):
        """The node is about to stop this worker (its task's owner exited): hand the head
        what the buffer holds and answer once the head has it."""
        buf = self.task_events
        if buf is not None and len(buf) and self.head is not None and not self.head.is_closed():
            events, descs, dropped = buf.drain(describe_task)
            with contextlib.suppress(Exception):
                await self.head.request(P.TaskEvents(events, dropped, descs), timeout_s=2.0)
        return P.Ack()

    def _trim_writer_maps(self) -> None:
        """Unmap cached writer segments the node has deleted, so their memory really goes back."""
        if ser.drop_stale_writer_maps() and not self._closed:
            self.loop.call_later(2.0, self._trim_writer_maps)
        else:
            self._trim_armed = False

    def _head_link(self, address: str) -> HeadLink:
        """Drivers keep their link to the head; workers open it when they need it and let it
        go when idle (see head_link.py)."""
        async def open_link() -> rpc.Connection:
            return await connect_patiently(address, self.handlers, token=self.token, role=self.kind,
                                           within_s=self.config.worker_start_timeout_s)

        idle_s = self.config.worker_head_idle_s if self.kind == "worker" else None
        link = HeadLink(address, open_link, idle_s=idle_s, may_close=self._head_may_close)
        link.on_close.append(self._on_head_lost)
        return link

    def _head_may_close(self) -> bool:
        """Idle, and holding no lease or actor whose node the head might report dead."""
        return not self._leases and not self._actors and not self._closed

    def _on_head_lost(self, link: HeadLink) -> None:
        if not self._closed and self.head_address.startswith("tcp://"):
            self.loop.create_task(self._reconnect_head())

    async def _reconnect_head(self) -> None:
        """A restarted head (with --persist) comes back at the same address: reconnect to it."""
        deadline = self.loop.time() + self.config.head_reconnect_timeout_s
        while not self._closed and self.loop.time() < deadline:
            try:
                await self.head.connected()
            except Exception:  # noqa: BLE001
                await asyncio.sleep(0.2)
                continue
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
            self.flush_task_events()  # a short driver's events would be lost otherwise
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
        if self._node_sync is not None:
            self._node_sync.close()
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
            if stored:
                self.frees_queued.append(None)  # popped once sent (see _write_to_store)
            try:
                self.loop.call_soon_threadsafe(self._send_release, stored, unborrow, bool(stored))
            except RuntimeError:  # loop closed
                pass

    def _send_release(self, stored: list, unborrow: list, counted: bool = False) -> None:
        local = [oid for oid, loc in stored if loc[0] == self.node_id or self._cached_here(oid)]
        if local:
            try:
                self.node.send(P.FreeObjects(local))
            except Exception:  # noqa: BLE001
                pass
        if counted:  # after the connection's pending frames are written (its flush runs first)
            self.loop.call_soon(self.frees_queued.popleft)
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

    # ================================================================ head requests
    def head_request(self, msg: P.Message, timeout: float | None = None) -> Any:
        return self.run_sync(self.head.request(msg), timeout)

    def head_send(self, msg: P.Message) -> None:
        """Send without waiting for an answer (for requests the head only acknowledges). It goes
        out before any request this process makes later: both pass through the I/O loop in order."""
        self.call_soon(self._send_head, msg)

    def _send_head(self, msg: P.Message) -> None:
        try:
            self.head.send(msg)
        except Exception:  # noqa: BLE001  no head: the requests that follow say so
            pass

    def node_request(self, msg: P.Message, timeout: float | None = None) -> Any:
        return self.run_sync(self.node.request(msg), timeout)

    def _on_log_lines(self, conn, msg: P.LogLines, rid):
        if self.log_handler is not None:
            self.log_handler(msg)

    def new_task_id(self) -> bytes:
        return bytes(TaskID.from_random())  # plain bytes: a queued task keeps it (49 bytes, not 80)


async def connect_patiently(address: str, handlers: dict, *, token: str, role: str,
                            within_s: float) -> rpc.Connection:
    """rpc.connect, retried with backoff while the listener is only busy.

    A node whose listen queue is full (hundreds of workers forked at once) refuses a
    Unix-socket connect with EAGAIN, and a loaded one may answer the handshake late; both
    pass. Anything else (no such socket, refused, wrong token) fails at once."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + within_s
    delay = 0.005
    while True:
        try:
            return await rpc.connect(address, handlers, token=token, role=role)
        except ConnectionBrokenError as e:
            cause = e.__cause__
            busy = isinstance(cause, (asyncio.TimeoutError, TimeoutError)) or \
                isinstance(cause, OSError) and cause.errno in (errno.EAGAIN, errno.EWOULDBLOCK)
            if not busy or loop.time() + delay > deadline:
                raise
        await asyncio.sleep(delay * (0.5 + random.random()))
        delay = min(delay * 2, 0.5)
