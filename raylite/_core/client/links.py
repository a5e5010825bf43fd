"""What a CoreClient's components truly share: who this process is, its I/O loop, its
connections to the node, the head and peers, the lock and the reference counter.

Each component (objects, ownership, tasks, leases, generators, functions, actors, lineage)
owns its own tables and receives this one object; nothing else is shared between them. The
fields the CoreClient learns while connecting (node id, store directory, the head link, ...)
are written here once, before any component runs on the loop.
"""

from __future__ import annotations

import asyncio
import collections
import concurrent.futures
import logging
import os
import socket
import threading
from collections.abc import Callable
from typing import Any

from raylite._core import protocol as P
from raylite._core.client.gc_pacing import GcPacer
from raylite._core.client.head_link import HeadLink
from raylite._core.client.reference_counter import ReferenceCounter
from raylite._core.config import Config
from raylite._core.transport import rpc

log = logging.getLogger("raylite.core")


class ClientLinks:
    """The shared part of a CoreClient (see the module docstring)."""

    def __init__(self, config: Config, *, worker_id: bytes, kind: str, job_id: bytes,
                 node_address: str, token: str, session_dir: str,
                 task_events: Any) -> None:
        self.config = config
        self.worker_id = worker_id
        self.kind = kind
        self.job_id = job_id
        self.node_address = node_address
        self.token = token
        self.session_dir = session_dir
        self.address = f"unix://{os.path.join(session_dir, 'sockets', worker_id.hex()[:16])}"
        self.listen_sock: socket.socket | None = None
        if config.node_ip_address:  # multi-node: peers on other machines must reach us over TCP
            self.listen_sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
            self.listen_sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            self.listen_sock.bind((config.node_ip_address, 0))
            self.address = f"tcp://{config.node_ip_address}:{self.listen_sock.getsockname()[1]}"
        # learnt from the node while connecting (CoreClient._connect)
        self.node: rpc.Connection | None = None
        self.head: HeadLink | None = None
        self.node_id = b""
        self.node_ip = "127.0.0.1"
        self.store_dir = ""
        self.head_address = ""
        self.node_public_address = ""  # how other nodes reach our node (its TCP address)
        self.loop: asyncio.AbstractEventLoop | None = None
        self.thread: threading.Thread | None = None
        self.closed = False
        # guards the reference counter and the object table together (user threads and the loop)
        self.lock = threading.Lock()
        self.gc_pacer = GcPacer(config.gc_pacing)  # full collections paced to the tables' size
        self.refs = ReferenceCounter(self.address)
        self.dead_nodes: set[bytes] = set()  # nodes the head declared dead
        self.handlers: dict[type, Any] = {}  # every message this process answers, by type
        self.blocked_hook: Callable[[bool], None] | None = None  # worker: around blocking waits
        # the TaskEventBuffer (head/task_events.py; the CoreClient makes it), appended on the task
        # path; None when task events are off
        self.task_events = task_events
        self.conns: dict[str, rpc.Connection] = {}  # peers by address (owners, workers, nodes)
        self._connecting: dict[str, asyncio.Future] = {}
        self._calls: collections.deque = collections.deque()  # see call_soon
        self._calls_scheduled = False

    def on_loop(self) -> bool:
        """True on the I/O thread (which must never block on the loop itself)."""
        return threading.current_thread() is self.thread

    def run_sync(self, coro: Any, timeout: float | None = None) -> Any:
        """Run a coroutine on the I/O loop from a user thread and wait for it."""
        fut = asyncio.run_coroutine_threadsafe(coro, self.loop)
        try:
            return fut.result(timeout)
        except concurrent.futures.TimeoutError:
            fut.cancel()
            raise

    def call_soon(self, fn: Any, *args: Any) -> None:
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
        """The connection to a peer, opened once and shared (concurrent openers wait for one)."""
        conn = self.conns.get(address)
        if conn is not None and not conn.is_closed():
            return conn
        pending = self._connecting.get(address)
        if pending is not None:
            return await asyncio.shield(pending)
        fut = self.loop.create_future()
        self._connecting[address] = fut
        try:
            conn = await rpc.connect(address, self.handlers, token=self.token, role=self.kind)
            conn.on_close.append(lambda c, a=address: self.conns.pop(a, None) if self.conns.get(a) is c else None)
            self.conns[address] = conn
            fut.set_result(conn)
            return conn
        except BaseException as e:
            fut.set_exception(e)
            fut.exception()
            raise
        finally:
            self._connecting.pop(address, None)

    async def send_to(self, address: str, msg: P.Message) -> None:
        """Send to a peer, quietly: a peer that is gone has no use for it."""
        try:
            conn = await self.connection(address)
            conn.send(msg)
        except Exception:  # noqa: BLE001
            pass

    def send_node(self, msg: P.Message) -> None:
        """I/O loop: send to the local node, quietly (it is going away when this fails)."""
        try:
            self.node.send(msg)
        except Exception:  # noqa: BLE001
            pass
