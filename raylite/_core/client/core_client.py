"""CoreClient: the Core API engine shared by drivers and workers.

It owns the objects its process creates (the memory store and reference
counts), submits tasks straight to leased workers and actor calls straight to
actor workers, and serves owner requests (object status, borrowers, streamed
generator items) on its own socket. Its I/O runs on an asyncio loop in a
background thread; user-facing calls hand work to that loop and wait on
thread-safe latches. Each concern is a component owning its tables (see the
class docstring); what they share is one ClientLinks (links.py).
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import errno
import gc
import logging
import os
import random
import threading
import time
from typing import Any

from raylite._core import protocol as P
from raylite._core.client.actors import ActorCaller
from raylite._core.client.functions import FunctionExport
from raylite._core.client.generators import Generators
from raylite._core.client.head_calls import HeadCalls
from raylite._core.client.head_link import HeadLink
from raylite._core.client.leases import Leases
from raylite._core.client.lineage import LineageRebuilder
from raylite._core.client.links import ClientLinks
from raylite._core.client.objects import ObjectPlane
from raylite._core.client.ownership import Ownership
from raylite._core.client.refs import ObjectRef
from raylite._core.client.tasks import TaskSubmitter
from raylite._core.client.transfers import ObjectTransfers
from raylite._core.config import Config
from raylite._core.core_api import CoreAPI
from raylite._core.ids import TaskID, set_job
from raylite._core.private_paths import owned_dir as private_dir
from raylite._core.task_event_buffer import TaskEventBuffer, describe_task
from raylite._core.task_spec import TaskSpec
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


class CoreClient(HeadCalls, CoreAPI):
    """The engine behind the Core API in one process, composed of components that each own
    their tables and share only the links (links.py):

    - `objects` (objects.py): the object table, put / get / wait, store reads, frees;
    - `transfers` (transfers.py): copies pulled from other nodes' stores;
    - `ownership` (ownership.py): ref counts, borrows and borrowers;
    - `functions` (functions.py): exported functions and argument packing;
    - `generators` (generators.py): streamed generator items and waits on them;
    - `leases` (leases.py): scheduling queues, worker leases, pushes;
    - `tasks` (tasks.py): task records, replies, retries, cancellation;
    - `actors` (actors.py): actor calls; `lineage` (lineage.py): rebuilding lost objects.

    This class starts and stops the I/O loop, connects to the node and head, flushes task
    events, and offers the CoreAPI (core_api.py) as thin delegations to the components; the
    public layer's head requests are HeadCalls' (head_calls.py)."""

    def __init__(self, config: Config, *, worker_id: bytes, kind: str, job_id: bytes,
                 node_address: str, token: str, session_dir: str, namespace: str = "") -> None:
        # task events (task_events.py): appended on the task path, flushed to the head ~1/s
        # The head keeps the newest task_events_max_per_job rows of a job: a flush carrying many
        # more (a burst of a million submissions) only costs both sides memory for events the
        # head drops, so the buffer holds about that many (the oldest go first, counted)
        events = TaskEventBuffer(capacity=3 * config.task_events_max_per_job) if config.task_events_enabled else None
        links = self.links = ClientLinks(config, worker_id=worker_id, kind=kind, job_id=job_id,
                                         node_address=node_address, token=token, session_dir=session_dir,
                                         task_events=events)
        self.config = config
        self._last_gc = -float("inf")  # monotonic time of the last collection the node asked for
        self.worker_id = worker_id
        self.kind = kind
        self.job_id = job_id
        if job_id:  # a driver: the ids it makes carry its job (ids.py)
            set_job(job_id)
        self.node_address = node_address
        self.token = token
        self.session_dir = session_dir
        self.namespace = namespace
        self.address = links.address
        self.refs = links.refs
        self._lock = links.lock
        self.task_events = links.task_events
        self._server: asyncio.AbstractServer | None = None
        self._flush_armed = False  # a task-event flush is scheduled
        self.extra_handlers: dict[type, Any] = {}
        self.log_handler = None  # callable(LogLines) on drivers
        self.current_task_id = b""

        # the components, each given what it calls; the cycles (a component calling back into
        # one built after it) are closed right below, in one place
        self.transfers = ObjectTransfers(links)
        self.objects = ObjectPlane(links, self.transfers)
        self.ownership = Ownership(links, self.objects)
        self.functions = FunctionExport(links, self.objects)
        self.generators = Generators(links, self.objects, self.ownership)
        self.leases = Leases(links)
        self.tasks = TaskSubmitter(links, self.objects, self.ownership, self.generators, self.leases, self)
        self.actors = ActorCaller(links, self.tasks)
        self.lineage = LineageRebuilder(links, self.objects, self.tasks)
        self.leases.tasks = self.tasks
        self.tasks.actors = self.actors
        self.tasks.lineage = self.lineage
        self.objects.lineage = self.lineage
        self.lineage.generators = self.generators
        self.objects.freed_hook = self.actors.tokens_freed

        # every ObjectRef's birth and death call these: bound straight to the component
        self.ref_created = self.ownership.ref_created
        self.ref_deleted = self.ownership.ref_deleted
        # names the worker (worker/) and the Ray Client proxy (ray_client/) use
        self.entries = self.objects.entries
        self._tasks = self.tasks.records
        self._cancel = self.tasks.cancel_now
        self._store_value = self.objects.store_value
        self._materialize = self.objects.materialize
        self.adopt_entry = self.objects.adopt_entry
        self._send_node = links.send_node

        links.handlers.update({
            P.GetObjectStatus: self.objects.on_get_object_status,
            P.AddBorrower: self.ownership.on_add_borrower,
            P.RemoveBorrower: self.ownership.on_remove_borrower,
            P.GeneratorItem: self.generators.on_generator_item,
            P.ReleaseIdleLeases: self.leases.on_release_idle_leases,
            P.WorkerOutOfMemory: self.tasks.on_worker_out_of_memory,
            P.ListOwnedObjects: self.ownership.on_list_owned_objects,
            P.LogLines: self._on_log_lines,
            P.NodeDied: self._on_node_died,
            P.FlushTaskEvents: self._on_flush_task_events,
            P.CancelTask: self.tasks.on_cancel_owned,
            P.CollectGarbage: self._on_collect_garbage,
        })
        self.handlers = links.handlers

    # what the node told us while connecting, and the loop (the links hold them)
    @property
    def loop(self) -> asyncio.AbstractEventLoop | None:  # type: ignore[override]
        return self.links.loop

    @property
    def _thread(self) -> threading.Thread | None:
        return self.links.thread

    @property
    def _closed(self) -> bool:  # type: ignore[override]
        return self.links.closed

    @property
    def node(self) -> rpc.Connection | None:
        return self.links.node

    @property
    def head(self) -> HeadLink | None:
        return self.links.head

    @property
    def node_id(self) -> bytes:  # type: ignore[override]
        return self.links.node_id

    @property
    def node_ip(self) -> str:  # type: ignore[override]
        return self.links.node_ip

    @property
    def store_dir(self) -> str:
        return self.links.store_dir

    @property
    def head_address(self) -> str:  # type: ignore[override]
        return self.links.head_address

    @property
    def node_public_address(self) -> str:
        return self.links.node_public_address

    @property
    def blocked_hook(self) -> Any:
        """Worker: callable(bool) around blocking waits (get, wait, a generator's next)."""
        return self.links.blocked_hook

    @blocked_hook.setter
    def blocked_hook(self, hook: Any) -> None:
        self.links.blocked_hook = hook

    # ================================================================ life cycle
    def start(self) -> None:
        """Start the I/O thread and connect to the node and head. Blocks until ready."""
        ready = concurrent.futures.Future()
        links = self.links

        def run() -> None:
            loop = new_event_loop()
            asyncio.set_event_loop(loop)
            links.loop = loop
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

        links.thread = threading.Thread(target=run, name="raylite-io", daemon=True)
        links.thread.start()
        ready.result()

    async def _connect(self) -> None:
        links = self.links
        links.handlers.update(self.extra_handlers)
        private_dir(os.path.join(self.session_dir, "sockets"))
        self._server = await rpc.listen(self.address, links.handlers, token=self.token,
                                        on_connect=self.ownership.on_incoming, sock=links.listen_sock)
        links.node = await connect_patiently(self.node_address, links.handlers, token=self.token, role=self.kind,
                                             within_s=self.config.worker_start_timeout_s)
        links.node.on_close.append(self._on_node_lost)
        reply: P.RegisterClientReply = await links.node.request(P.RegisterClient(
            self.worker_id, self.kind, os.getpid(), self.job_id, self.address, self.namespace))
        links.node_id = reply.node_id
        links.node_ip = reply.node_ip
        links.store_dir = reply.store_dir
        links.head_address = reply.head_address
        links.node_public_address = reply.node_tcp_address or self.node_address
        links.head = self._head_link(reply.head_address)
        if self.kind != "worker":
            await links.head.connected()  # a driver registers its job and hears broadcasts at once
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

    def flush_task_events(self) -> None:
        """Send what the buffer holds to the head in one message (on the I/O loop)."""
        buf = self.task_events
        if buf is None or not len(buf) or self.head is None or self.head.is_closed():
            return
        events, descs, dropped = buf.drain(describe_task)
        with contextlib.suppress(Exception):
            self.head.send(P.TaskEvents(events, dropped, descs))

    def _on_collect_garbage(self, conn, msg: P.CollectGarbage, rid: int):
        """This node's store is filling up: collect reference cycles now, so refs held only by
        them are released and their objects freed (Ray's automatic global GC); at most once
        per local_gc_min_interval_s, and only when the node asks."""
        now = time.monotonic()
        if conn is not self.links.node or now - self._last_gc < self.config.local_gc_min_interval_s:
            return None
        self._last_gc = now
        gc.collect()
        return None

    async def _on_flush_task_events(self, conn, msg: P.FlushTaskEvents, rid: int):
        """The node is about to stop this worker (its task's owner exited): hand the head
        what the buffer holds and answer once the head has it."""
        buf = self.task_events
        if buf is not None and len(buf) and self.head is not None and not self.head.is_closed():
            events, descs, dropped = buf.drain(describe_task)
            with contextlib.suppress(Exception):
                await self.head.request(P.TaskEvents(events, dropped, descs), timeout_s=2.0)
        return P.Ack()

    def _head_link(self, address: str) -> HeadLink:
        """Drivers keep their link to the head; workers open it when they need it and let it
        go when idle (see head_link.py)."""
        async def open_link() -> rpc.Connection:
            return await connect_patiently(address, self.links.handlers, token=self.token, role=self.kind,
                                           within_s=self.config.worker_start_timeout_s)

        idle_s = self.config.worker_head_idle_s if self.kind == "worker" else None
        link = HeadLink(address, open_link, idle_s=idle_s, may_close=self._head_may_close)
        link.on_close.append(self._on_head_lost)
        return link

    def _head_may_close(self) -> bool:
        """Idle, and holding no lease or actor whose node the head might report dead."""
        return self.leases.holds_none() and self.actors.holds_none() and not self._closed

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
        self.links.dead_nodes.add(msg.node_id)
        self.leases.node_died(msg.node_id)
        self.actors.node_died(msg.node_id)
        c = self.links.conns.pop(msg.address, None)
        if c is not None:
            c.abort()
        self.transfers.node_died(msg.node_id, msg.address)

    def _on_node_lost(self, conn: rpc.Connection) -> None:
        if not self._closed:
            log.error("lost the connection to the local raylite node")
            if self.kind == "worker":
                os._exit(1)

    def shutdown(self) -> None:
        if self._closed or self.loop is None:
            return
        self.links.closed = True
        self.links.gc_pacer.close()  # the process's own GC thresholds come back

        async def close() -> None:
            if self.kind == "driver" and self.log_handler is not None and self.node is not None:
                # one round trip to the node: worker output it still holds for us is
                # forwarded before its reply, so prints from the last tasks are not lost
                with contextlib.suppress(Exception):
                    await self.node.request(P.GetNodeInfo(), 1.0)
            self.flush_task_events()  # a short driver's events would be lost otherwise
            self.leases.return_all()
            for c in list(self.links.conns.values()):
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
        self.objects.close()
        self.loop.call_soon_threadsafe(self.loop.stop)
        if self._thread is not None and self._thread is not threading.current_thread():
            self._thread.join(2)

    # ================================================================ loop helpers
    def run_sync(self, coro: Any, timeout: float | None = None) -> Any:
        return self.links.run_sync(coro, timeout)

    def call_soon(self, fn: Any, *args: Any) -> None:
        self.links.call_soon(fn, *args)

    async def connection(self, address: str) -> rpc.Connection:
        return await self.links.connection(address)

    # ================================================================ the components' API
    def owns_referenced_objects(self) -> bool:
        """Some object this process owns is still referenced (objects.py, owns_referenced)."""
        return self.objects.owns_referenced()

    def put(self, value: Any, *, _owner_address: str | None = None) -> Any:
        return self.objects.put(value, _owner_address=_owner_address)

    def get(self, refs: list, timeout: float | None = None) -> list[Any]:
        return self.objects.get(refs, timeout)

    def wait(self, refs: list, num_returns: int, timeout: float | None,
             fetch_local: bool = True) -> tuple[list, list]:
        return self.objects.wait(refs, num_returns, timeout, fetch_local)

    def future_of(self, ref: Any) -> concurrent.futures.Future:
        return self.objects.future_of(ref)

    def promise(self, produce: Any) -> Any:
        return self.objects.promise(produce)

    def owned_objects(self) -> list:
        return self.ownership.owned_objects()

    def pack_args(self, args: tuple, kwargs: dict, what: str) -> tuple[list, list, list]:
        return self.functions.pack_args(args, kwargs, what)

    def submit_task(self, spec: TaskSpec, pinned: list, retry_exceptions: Any) -> Any:
        return self.tasks.submit_task(spec, pinned, retry_exceptions)

    def export_function(self, function_id: bytes, pickled: bytes) -> None:
        self.functions.export_function(function_id, pickled)

    def load_function(self, function_id: bytes) -> Any:
        return self.functions.load_function(function_id)

    def cancel(self, ref: Any, force: bool, recursive: bool) -> None:
        self.tasks.cancel(ref, force, recursive)

    def return_idle_leases(self) -> list[asyncio.Future]:
        return self.leases.return_idle_leases()

    def wait_with_generators(self, items: list, num_returns: int,
                             timeout: float | None) -> tuple[list, list]:
        return self.generators.wait_with_generators(items, num_returns, timeout)

    def next_generator_item(self, task_id: bytes, index: int, timeout: float | None) -> Any:
        return self.generators.next_generator_item(task_id, index, timeout)

    def generator_length(self, task_id: bytes) -> int:
        return self.generators.generator_length(task_id)

    def generator_dropped(self, task_id: bytes) -> None:
        self.generators.generator_dropped(task_id)

    def register_actor(self, spec: TaskSpec, get_if_exists: bool) -> P.RegisterActorReply:
        return self.actors.register_actor(spec, get_if_exists)

    def submit_actor_task(self, spec: TaskSpec, pinned: list, held: tuple[bytes, ...] = ()) -> Any:
        return self.actors.submit_actor_task(spec, pinned, held)

    def actor_out_of_scope(self, actor_id: bytes) -> None:
        self.actors.actor_out_of_scope(actor_id)

    def actor_token(self, actor_id: bytes, creation_task_id: bytes) -> ObjectRef | None:
        """The ref every strong handle of an actor created here holds (ActorCaller.handle_token)."""
        return ObjectRef.counted(self.actors.handle_token(actor_id, creation_task_id), self.address, self)

    def actor_info(self, actor_id: bytes, wait_alive: bool = False) -> P.ActorInfo:
        return self.actors.actor_info(actor_id, wait_alive)

    def kill_actor(self, actor_id: bytes, no_restart: bool) -> None:
        self.actors.kill_actor(actor_id, no_restart)

    def record_lineage(self, spec: TaskSpec, stored_ids: list[bytes]) -> None:
        self.lineage.record_lineage(spec, stored_ids)

    # ================================================================ head requests
    def head_request(self, msg: P.Message, timeout: float | None = None) -> Any:
        return self.links.run_sync(self.links.head.request(msg), timeout)

    def head_send(self, msg: P.Message) -> None:
        """Send without waiting for an answer (for requests the head only acknowledges). It goes
        out before any request this process makes later: both pass through the I/O loop in order."""
        self.links.call_soon(self._send_head, msg)

    def _send_head(self, msg: P.Message) -> None:
        try:
            self.links.head.send(msg)
        except Exception:  # noqa: BLE001  no head: the requests that follow say so
            pass

    def node_request(self, msg: P.Message, timeout: float | None = None) -> Any:
        return self.links.run_sync(self.links.node.request(msg), timeout)

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
