"""The node daemon: one per machine. Worker pool, leases, the local object store.

Clients (drivers and workers) ask it for worker leases sized by resources; it
grants an idle worker when the resources fit, lends a blocked worker's CPU back,
starts dedicated workers for actors on the head's request, accounts the shared
memory objects written on this machine, and forwards worker output to drivers.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import shutil
import socket
from dataclasses import dataclass

from raylite._core import labels
from raylite._core import protocol as P
from raylite._core import resources as R
from raylite._core import scheduling as S
from raylite._core.clock import MonotonicClock
from raylite._core.config import Config
from raylite._core.node import log_files, shm_files
from raylite._core.node import memory_monitor as MM
from raylite._core.node.gpu_ids import GpuIds, gpu_amount, node_device_ids
from raylite._core.node.object_store import Freed, ObjectStore, default_capacity_bytes
from raylite._core.node.stats import NodeStats
from raylite._core.node.worker_pool import WorkerPool, WorkerRecord
from raylite._core.strategy import decode as decode_strategy
from raylite._core.task_spec import _FIELDS as TASK_SPEC_FIELDS
from raylite._core.task_spec import env_key
from raylite._core.transport import rpc

log = logging.getLogger("raylite.node")


def _only_group_resources_missing(request: dict, total: dict) -> bool:
    """The request lacks only placement-group bundle resources here: the group's bundle is not
    reserved on this node yet (a task can arrive first), so the lease waits for it."""
    return all("_group_" in k for k, v in request.items() if v > total.get(k, 0))


def worker_key(runtime_env: dict, resources: dict) -> str:
    """Which idle workers a lease may reuse: the same runtime environment, and, as in Ray, a
    task that asks for GPUs never gets a worker started for CPU-only work (nor the reverse:
    CUDA state set up in a process stays with it)."""
    key = env_key(runtime_env)
    return key + "|gpu" if resources.get("GPU") else key


@dataclass
class PendingLease:
    msg: P.RequestLease
    conn: rpc.Connection
    rid: int
    key: str
    actor: tuple | None = None  # (actor_id, spec, future) for actor starts


class NodeDaemon:
    def __init__(self, config: Config, *, node_id: bytes, ip: str, resources: dict, labels: dict,
                 session_dir: str, token: str, head_address: str, address: str,
                 tcp_address: str = "", tcp_sock: socket.socket | None = None,
                 exit_with_creator: bool = False) -> None:
        self.config = config
        self.node_id = node_id
        self.ip = ip
        self.total = dict(resources)
        self.available = dict(resources)
        self._exits: dict[bytes, tuple] = {}  # worker id -> (exit info, pid, kill reason)
        self.gpus = GpuIds(node_device_ids(self.total.get("GPU", 0), os.environ.get("CUDA_VISIBLE_DEVICES")))
        self.base_total = dict(resources)  # restored when the node fences itself
        self.bulk = None  # multi-node: serves object bytes to other nodes (transport/bulk.py)
        self._fenced = False
        self.labels = labels
        self.session_dir = session_dir
        self.token = token
        self.head_address = head_address
        self.address = address  # unix:// for local clients
        self.tcp_address = tcp_address
        self._tcp_sock = tcp_sock  # bound already (node_main), or None: listen() binds tcp_address
        self.exit_with_creator = exit_with_creator
        self.clock = MonotonicClock()
        self.store = ObjectStore(
            os.path.join(config.shm_dir, f"raylite_{os.path.basename(session_dir)}_{node_id.hex()[:8]}"),
            capacity_bytes=config.object_store_bytes or default_capacity_bytes(config.object_store_fraction,
                                                                               config.shm_dir),
            spill_dir=os.path.join(config.spill_dir or session_dir, f"spill_{node_id.hex()[:8]}"),
            spill_capacity_bytes=config.object_spill_bytes)
        shm_files.make_dirs(self.store)
        # reported like Ray's (cluster_resources()["object_store_memory"]); nothing requests it
        store_fixed = R.to_fixed({"object_store_memory": self.store.capacity_bytes})
        for table in (self.total, self.available, self.base_total):
            table.update(store_fixed)
        self._spilling: dict[bytes, asyncio.Future] = {}  # object id -> copy to disk in flight
        self._writers: dict[bytes, rpc.Connection] = {}  # object reserved, not sealed -> its writer
        self._spill_inflight_bytes = 0
        self._spill_ahead_bytes = min(self.store.capacity_bytes // 16, 64 << 20)
        self._restoring: dict[bytes, asyncio.Future] = {}
        self.pool = WorkerPool(address, token, session_dir, self._on_worker_exit)
        # forked workers register over the node's socket: starting thousands at once (a burst
        # of actors) only queues them behind each other and the registrations they wait for
        self._start_limit = config.worker_start_concurrency or max(8, 4 * (os.cpu_count() or 1))
        self._stats = NodeStats()
        self.pending: list[PendingLease] = []
        self.leases: dict[bytes, WorkerRecord] = {}
        self.clients: dict[bytes, rpc.Connection] = {}  # worker_id -> conn (drivers and workers)
        self.drivers: dict[bytes, rpc.Connection] = {}
        self.head: rpc.Connection | None = None
        self.stopped: asyncio.Event | None = None
        self._servers: list[asyncio.AbstractServer] = []
        self._bg: set[asyncio.Task] = set()
        self._release_asked = 0.0
        self._bundles: dict[str, dict[int, dict]] = {}  # placement group hex -> bundle index -> offered
        self._report_handle: asyncio.TimerHandle | None = None
        self._report_sent: asyncio.Future | None = None
        self._lease_events = 0  # lease requests and returns seen (a heartbeat goes out after any)
        self.handlers = {
            P.RegisterClient: self._on_register_client,
            P.RequestLease: self._on_request_lease,
            P.ReturnLease: self._on_return_lease,
            P.CancelLease: self._on_cancel_lease,
            P.WorkerBlocked: self._on_worker_blocked,
            P.ObjectSealed: self._on_object_sealed,
            P.FreeObjects: self._on_free_objects,
            P.KillWorker: self._on_kill_worker,
            P.GetWorkerExit: self._on_get_worker_exit,
            P.LogLines: self._on_log_lines,
            P.StartActor: self._on_start_actor,
            P.ReserveBundles: self._on_reserve_bundles,
            P.ReleaseBundles: self._on_release_bundles,
            P.GetNodeInfo: self._on_get_node_info,
            P.PullObject: self._on_pull_object,
            P.CreateObject: self._on_create_object,
            P.RestoreObject: self._on_restore_object,
            P.ObjectsMapped: self._on_objects_mapped,
            P.HeartbeatReply: self._on_heartbeat_reply,
            P.ListLogs: lambda conn, msg, rid: P.ListLogsReply(log_files.list_files(self.session_dir)),
            P.ReadLog: lambda conn, msg, rid: P.ReadLogReply(*log_files.read(
                self.session_dir, msg.name, msg.offset, min(msg.length, 8 << 20), msg.tail_lines)),
        }

    # ------------------------------------------------------------ life cycle
    async def start(self) -> None:
        self.stopped = asyncio.Event()
        self.pool.attach(asyncio.get_running_loop())
        self._servers.append(await rpc.listen(self.address, self.handlers, token=self.token,
                                              backlog=self.config.listen_backlog))
        if self.tcp_address:
            self._servers.append(await rpc.listen(self.tcp_address, self.handlers, token=self.token,
                                                  sock=self._tcp_sock))
            from raylite._core.transport.bulk import BulkServer

            self.bulk = BulkServer(self.ip, self.token, self._locate_object)
        reply = await self._register_with_head()
        if not reply.ok:
            raise RuntimeError(f"the head refused this node: {reply.error}")
        self._spawn(self._heartbeat_loop())
        self._spawn(self._memory_monitor_loop())
        self._spawn(self._pool_trim_loop())

    def prestart_workers(self) -> None:
        """Start idle workers ahead of demand; called once this node has announced itself,
        so its own start (and its driver's) does not compete with theirs for the CPUs."""
        if self.config.prestart_workers and not self.stopped.is_set():
            for _ in range(max(1, min(int(self.total.get("CPU", 0) // 10000), 8))):
                self._start_worker("", {})

    def _spawn(self, coro) -> asyncio.Task:
        t = asyncio.get_running_loop().create_task(coro)
        self._bg.add(t)
        t.add_done_callback(self._bg.discard)
        return t

    async def _register_with_head(self) -> P.RegisterNodeReply:
        head = await rpc.connect(self.head_address, self.handlers, token=self.token, role="node")
        reply = await head.request(P.RegisterNode(
            self.node_id, self.tcp_address or self.address, self.ip, self.total, self.labels,
            self.store.directory, _version(), self.address if self.tcp_address else "",
            self.bulk.address if self.bulk is not None else ""))
        if reply.ok:
            self.head = head
            self._last_ack = self.clock.monotonic()
            head.on_close.append(lambda c: self._head_lost())
        else:
            head.close()
        return reply

    def _head_lost(self) -> None:
        if self.stopped.is_set():
            return
        if not self.head_address.startswith("tcp://"):
            log.error("lost the connection to the head; stopping this node")
            self.stop()
            return
        log.warning("lost the connection to the head at %s; reconnecting", self.head_address)
        self._spawn(self._reconnect_head())

    async def _reconnect_head(self) -> None:
        """The head restarted or the link broke: rejoin (as a new node if it declared us dead)."""
        from raylite._core.ids import NodeID

        deadline = self.clock.monotonic() + self.config.head_reconnect_timeout_s
        while self.clock.monotonic() < deadline and not self.stopped.is_set():
            if self._fenced:
                self.node_id = NodeID.from_random()
                self._fenced = False
            try:
                reply = await self._register_with_head()
            except Exception:  # noqa: BLE001  the head is not back yet
                await asyncio.sleep(0.2)
                continue
            if reply.ok:
                log.warning("rejoined the head as node %s", self.node_id.hex()[:8])
                return
            self._fence(reply.error)
        log.error("could not reach the head at %s for %.0fs; stopping this node", self.head_address,
                  self.config.head_reconnect_timeout_s)
        self.stop()

    def _on_heartbeat_reply(self, conn, msg: P.HeartbeatReply, rid):
        if not msg.alive:
            self._fence("the head declared this node dead")

    def _fence(self, why: str) -> None:
        """The head declared this node dead (its work was moved elsewhere): stop every worker,
        drop its objects and leases, so a healed partition leaves no duplicate actors."""
        if self._fenced:
            return
        log.error("fencing this node: %s; its workers are stopped and it rejoins as a new node", why)
        self._fenced = True
        for rec in list(self.pool.workers.values()):
            self._release_held(rec, give_back=False)
            self.pool.kill(rec, "its node was declared dead")
        for p in self.pending:
            if p.actor is not None and not p.actor[2].done():
                p.actor[2].set_result(P.StartActorReply(False, system_error="its node was declared dead"))
            elif p.rid:
                with contextlib.suppress(Exception):
                    p.conn.send(P.RequestLeaseReply(p.msg.lease_id, error_type="RaySystemError",
                                                    error="the node was declared dead"), -p.rid)
        self.pending = []
        self.leases.clear()
        self._bundles.clear()
        self._on_free_objects(None, P.FreeObjects(list(self.store.objects)), 0)
        self.total = dict(self.base_total)
        self.available = dict(self.base_total)
        if self.head is not None and not self.head.is_closed():
            self.head.abort()  # _head_lost reconnects under a new node id

    def stop(self) -> None:
        if self.stopped.is_set():
            return
        self.stopped.set()
        for s in self._servers:
            s.close()
        self.pool.shutdown()
        for t in self._bg:
            t.cancel()
        if self.bulk is not None:
            self.bulk.close()
        shm_files.destroy(self.store)
        with contextlib.suppress(Exception):
            if self.head is not None:
                self.head.close()

    async def _heartbeat_loop(self) -> None:
        """A report goes out when the load changed (or statistics are due); at least every
        `ack_every` one is a request: no answer for node_dead_timeout_s on an open link means a
        partition, and the head has declared us dead by then, so fence before it heals. An
        idle node so costs the head one small request a second or so, not two."""
        last = self.clock.monotonic()
        ack_every = max(self.config.heartbeat_interval_s, self.config.node_dead_timeout_s / 4)
        asked, sent = 0.0, None
        while True:
            await asyncio.sleep(self.config.heartbeat_interval_s)
            now = self.clock.monotonic()
            if now - last > max(1.0, 4 * self.config.heartbeat_interval_s):
                self._last_ack = max(self._last_ack, now)  # our own loop stalled, not the link
            last = now
            head = self.head
            if head is None or head.is_closed():
                continue
            if now - self._last_ack > self.config.node_dead_timeout_s and self.head_address.startswith("tcp://"):
                self._fence(f"no heartbeat answer from the head for {now - self._last_ack:.1f}s")
                continue
            # lease traffic since the last report counts as a change even if `available` is back
            # where it was: the head subtracted its picks and learns of the returns only so
            report = (dict(self.available), [p.msg.resources for p in self.pending], dict(self.total),
                      self._lease_events)
            stats = self._stats_if_due(now)
            ask = now - asked >= ack_every
            if report == sent and stats is None and not ask:
                continue
            sent = report
            try:
                msg = P.Heartbeat(self.node_id, report[0], report[1], report[2], stats)
                if ask:
                    asked = now
                    head.request_future(msg).add_done_callback(self._heartbeat_answered)
                else:
                    head.send(msg)
            except Exception:  # noqa: BLE001
                pass

    def _stats_if_due(self, now: float) -> dict | None:
        """Machine and worker statistics for the dashboard, every stats interval (else None)."""
        if not self._stats.due(now):
            return None
        workers = [{"pid": w.pid, "worker_id": w.worker_id.hex(), "state": w.state,
                    "actor_id": w.actor_id.hex() if w.actor_id else "", "gpu_ids": list(w.gpu_ids)}
                   for w in self.pool.workers.values() if w.pid and w.state != "DEAD"]
        try:
            return self._stats.sample(workers, self.store, now)
        except Exception:  # noqa: BLE001 - statistics must never stop heartbeats
            return None

    def _heartbeat_answered(self, fut: asyncio.Future) -> None:
        if fut.cancelled() or fut.exception() is not None:
            return
        self._last_ack = self.clock.monotonic()
        if not fut.result().alive:
            self._fence("the head declared this node dead")

    # ------------------------------------------------------------ clients
    def _on_register_client(self, conn: rpc.Connection, msg: P.RegisterClient, rid: int):
        conn.context["worker_id"] = msg.worker_id
        conn.context["client"] = [msg.worker_id, msg.kind, msg.address, msg.pid]  # for the state API
        conn.context["kind"] = msg.kind
        conn.context["job_id"] = msg.job_id
        self.clients[msg.worker_id] = conn
        if msg.kind == "driver":
            self.drivers[msg.worker_id] = conn
            conn.context["creator"] = not self.drivers or len(self.drivers) == 1 and self.exit_with_creator
        else:
            rec = self.pool.workers.get(msg.worker_id)
            if rec is not None:
                rec.conn = conn
                rec.address = msg.address
                if not rec.pid:
                    rec.pid = msg.pid
                    self.pool.by_pid[msg.pid] = rec
                if rec.state == "STARTING":
                    self.pool.set_state(rec, "IDLE")
                    asyncio.get_running_loop().call_soon(self._try_grant)
        conn.on_close.append(self._on_client_closed)
        return P.RegisterClientReply(self.node_id, self.ip, self.session_dir, self.store.directory,
                                     self.head_address, msg.job_id, self.token,
                                     self.config.inline_threshold_bytes, self.tcp_address)

    def _on_client_closed(self, conn: rpc.Connection) -> None:
        worker_id = conn.context.get("worker_id")
        if worker_id is None:
            return
        self.clients.pop(worker_id, None)
        client = conn.context.get("client")
        if client and client[2]:
            self._free_owned_by(client[2])
        for oid in conn.context.get("mapped", ()):  # its mappings went with it
            self.store.unmapped(oid)
        # leases held by this client: its tasks' owner is gone, stop those workers
        if conn.context.get("lessee"):
            self._stop_orphans(conn, "the task's owner exited")
        if conn.context.get("requested"):
            self.pending = [p for p in self.pending if p.conn is not conn]
        rec = self.pool.workers.get(worker_id)
        if rec is not None:
            self._worker_gone(rec, rec.exit_info or "its connection to the node closed")
        if conn.context.get("kind") == "driver":
            self.drivers.pop(worker_id, None)
        with contextlib.suppress(Exception):
            self.head.send(P.WorkerDied(self.node_id, worker_id, b"", "the process exited"))
        if conn.context.get("creator") and self.exit_with_creator:
            log.info("the driver that started this local cluster exited; stopping")
            self.stop()
        self._try_grant()

    def _on_worker_exit(self, rec: WorkerRecord) -> None:
        self._exits[rec.worker_id] = (rec.exit_info, rec.pid, rec.kill_reason)
        while len(self._exits) > 1000:  # a bounded memory of recent deaths
            self._exits.pop(next(iter(self._exits)))
        self._worker_gone(rec, rec.exit_info)

    async def _on_get_worker_exit(self, conn, msg: P.GetWorkerExit, rid):
        # the owner often sees the broken link before the zygote reports the exit status
        for _ in range(40):
            known = self._exits.get(msg.worker_id)
            if known is not None:
                return P.WorkerExitReply(*known)
            if msg.worker_id not in self.pool.workers and _ > 10:
                break
            await asyncio.sleep(0.025)
        return P.WorkerExitReply()

    def _release_held(self, rec: WorkerRecord, give_back: bool = True) -> None:
        """Drop what a lease or actor holds: its GPU devices, and (give_back) its resources
        to `available` (a worker blocked in get() already lent its CPU back)."""
        if give_back and rec.held:
            held = rec.held if not rec.blocked else {k: v for k, v in rec.held.items() if not _lent(k)}
            R.add(self.available, held)
        self.gpus.release(rec.gpu_ids, gpu_amount(rec.held))
        rec.gpu_ids = []
        rec.held = {}

    def _worker_gone(self, rec: WorkerRecord, why: str) -> None:
        if rec.state == "DEAD":
            return
        prev = rec.state
        self.pool.set_state(rec, "DEAD")
        if prev in ("LEASED", "ACTOR"):
            self._release_held(rec)
        if rec.lease_id:
            self.leases.pop(rec.lease_id, None)
        if prev == "ACTOR" and rec.actor_id:
            reason = rec.kill_reason or f"its worker process (pid {rec.pid}) {why or 'died'}"
            with contextlib.suppress(Exception):
                self.head.send(P.WorkerDied(self.node_id, rec.worker_id, rec.actor_id, reason))
        self._try_grant()

    def _on_log_lines(self, conn, msg: P.LogLines, rid):
        for dconn in list(self.drivers.values()):
            if dconn.context.get("job_id") == msg.job_id or not msg.job_id:
                with contextlib.suppress(Exception):
                    dconn.send(msg)

    def _on_kill_worker(self, conn, msg: P.KillWorker, rid):
        rec = self.pool.workers.get(msg.worker_id)
        if rec is None:
            return P.Ack() if rid else None
        # an actor's owner died, or kill(): its last calls' events go first
        killing = asyncio.get_running_loop().create_task(self._flush_then_kill(rec, msg.reason))
        if not rid:
            return None
        return self._ack_when_gone(rec, killing)

    async def _ack_when_gone(self, rec: WorkerRecord, killing: asyncio.Task) -> P.Ack:
        """kill() promises its caller that the actor runs nothing after it returns: the reply
        waits until the process is gone (its connection here closes when the kernel tears it
        down), so no later call of that caller can reach it."""
        conn = rec.conn
        gone: asyncio.Future | None = None
        if conn is not None and not conn.is_closed():
            gone = asyncio.get_running_loop().create_future()
            conn.on_close.append(lambda c: gone.done() or gone.set_result(None))
        await killing
        if gone is not None and not conn.is_closed():
            with contextlib.suppress(asyncio.TimeoutError):
                await asyncio.wait_for(gone, KILL_CONFIRM_S)
        return P.Ack()

    # ------------------------------------------------------------ leases
    def _on_request_lease(self, conn: rpc.Connection, msg: P.RequestLease, rid: int):
        self._lease_events += 1
        request = msg.resources
        if "worker_id" not in conn.context and not conn.context.get("lessee_watched"):
            conn.context["lessee_watched"] = True  # a client on another node
            conn.on_close.append(self._on_remote_lessee_closed)
        if msg.allow_spillback and self._should_spill(msg):
            return self._spill(conn, msg, rid)
        if not R.fits(request, self.total) and not _only_group_resources_missing(request, self.total):
            views = [S.NodeView(self.node_id, self.total, self.available)]
            return P.RequestLeaseReply(
                msg.lease_id, error_type="TaskUnschedulableError",
                error=f"{msg.description} cannot be scheduled: {S.never_fits(request, views)}. {S.FIX_HINT}")
        how = decode_strategy(msg.strategy)
        if how.is_labels and not labels.first_matching(msg.strategy, self.labels):
            wanted = " or ".join(labels.describe(sel) for sel in msg.strategy[1])
            return P.RequestLeaseReply(msg.lease_id, error_type="TaskUnschedulableError",
                                       error=f"{msg.description} asks for a node with labels {wanted}; no node "
                                             f"of this cluster has them (this node's: {self.labels}).")
        if how.is_node:
            target = how.node_id_hex
            if target != self.node_id.hex() and not how.soft:
                return P.RequestLeaseReply(msg.lease_id, error_type="TaskUnschedulableError",
                                           error=f"{msg.description} is pinned to node {target[:8]} "
                                                 "(soft=False), which is not in this cluster.")
        conn.context["requested"] = True
        self.pending.append(PendingLease(msg, conn, rid, worker_key(msg.runtime_env, request)))
        self._try_grant()
        return None

    def _should_spill(self, msg: P.RequestLease) -> bool:
        """Multi-node only: ask the head when this node should not or cannot grant now."""
        if not self.tcp_address or self.head is None or self.head.is_closed():
            return False
        how = decode_strategy(msg.strategy)
        if how.is_spread:
            return True
        if how.is_node:
            return how.node_id_hex != self.node_id.hex()
        if how.is_labels:
            return True  # the head knows every node's labels (and the fallbacks' order)
        if not R.fits(msg.resources, self.total):
            return True
        return not R.fits(msg.resources, self._free_after_queued())

    def _free_after_queued(self) -> dict:
        """Free resources once the leases queued here are granted."""
        tentative = dict(self.available)
        for p in self.pending:
            R.subtract(tentative, p.msg.resources)
        return tentative

    async def _spill(self, conn: rpc.Connection, msg: P.RequestLease, rid: int):
        while True:  # `wait`: no node fits it yet, the autoscaler is adding one; ask again
            try:
                pick: P.PickNodeReply = await self.head.request(
                    P.PickNode(msg.resources, msg.strategy, self.node_id, msg.description,
                               self._free_after_queued()),
                    timeout_s=10)
            except Exception:  # noqa: BLE001  no head right now: decide locally
                pick = P.PickNodeReply(self.node_id)
            if not pick.wait or conn.is_closed() or self.stopped.is_set():
                break
        if pick.wait:
            return P.RequestLeaseReply(msg.lease_id, error_type="TaskUnschedulableError",
                                       error=f"{msg.description} was waiting for the autoscaler to add a "
                                       "node that fits it when its requester or this node went away.")
        if pick.error_type:
            return P.RequestLeaseReply(msg.lease_id, error_type=pick.error_type, error=pick.error)
        if pick.node_id != self.node_id:
            return P.RequestLeaseReply(msg.lease_id, node_id=pick.node_id, spillback_address=pick.address)
        local = P.RequestLease(msg.lease_id, msg.resources, [], msg.runtime_env, msg.description, False)
        return self._on_request_lease(conn, local, rid)

    def _on_remote_lessee_closed(self, conn: rpc.Connection) -> None:
        self._stop_orphans(conn, "the task's owner on another node went away")
        self.pending = [p for p in self.pending if p.conn is not conn]
        self._try_grant()

    def _stop_orphans(self, lessee: rpc.Connection, reason: str) -> None:
        """Stop the workers leased to `lessee`, which went away. Each first hands its task
        events to the head (bounded wait), so the tasks it ran do not stay unfinished."""
        for rec in list(self.pool.workers.values()):
            if rec.lessee is lessee and rec.state == "LEASED":
                rec.lessee = None  # nobody's lease any more; never granted again
                asyncio.get_running_loop().create_task(self._flush_then_kill(rec, reason))

    async def _flush_then_kill(self, rec: WorkerRecord, reason: str) -> None:
        self.pool.doom(rec, reason)  # a lease returned while it flushes must not hand it out again
        if rec.conn is not None and not rec.conn.is_closed():
            with contextlib.suppress(Exception):
                await rec.conn.request(P.FlushTaskEvents(), timeout_s=1.0)
        self.pool.kill(rec, reason)

    def _try_grant(self) -> None:
        """Grant pending leases (in order) to idle workers; start workers for those that fit
        but have none, at most `worker_start_concurrency` starting at once.

        Called on every event that may free a worker or resources, so it stops early: once
        no worker is idle and no more may start, nothing further down can be granted (a
        burst of thousands of actors costs O(1) per registration, not a scan of them all)."""
        if not self.pending or self.stopped.is_set():
            return
        pool = self.pool
        limit = self._start_limit
        pending = self.pending
        still: list[PendingLease] = []
        starting: dict[str, int] = {}  # leases of this pass waiting for a starting worker
        waiting_for_resources = False
        tentative = dict(self.available)  # leases waiting for a starting worker reserve room here
        cut = len(pending)
        for i, p in enumerate(pending):
            if pool.starting_total >= limit and not pool.has_idle():
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
                if pool.starting(p.key) < starting[p.key] and pool.starting_total < limit:
                    self._start_worker(p.key, p.msg.runtime_env)
                still.append(p)
                continue
            R.subtract(self.available, req)
            R.subtract(tentative, req)
            rec.held = dict(req)
            rec.gpu_ids = self.gpus.acquire(gpu_amount(req))
            rec.busy_since = self.clock.monotonic()
            if p.actor is not None:
                self._launch_actor(rec, p)
            else:
                pool.set_state(rec, "LEASED")
                rec.lease_id = p.msg.lease_id
                rec.lessee = p.conn
                p.conn.context["lessee"] = True
                self.leases[p.msg.lease_id] = rec
                p.conn.send(P.RequestLeaseReply(p.msg.lease_id, rec.worker_id, rec.address, self.node_id,
                                                gpu_ids=rec.gpu_ids), -p.rid)
        self.pending = still + pending[cut:] if cut < len(pending) else still
        if waiting_for_resources:
            self._ask_lessees_to_release()

    def _ask_lessees_to_release(self) -> None:
        now = self.clock.monotonic()
        if now - self._release_asked < 0.01:
            return
        self._release_asked = now
        seen = set()
        for rec in self.leases.values():
            if rec.lessee is not None and id(rec.lessee) not in seen:
                seen.add(id(rec.lessee))
                with contextlib.suppress(Exception):
                    rec.lessee.send(P.ReleaseIdleLeases())

    def _start_worker(self, key: str, runtime_env: dict) -> None:
        rec = self.pool.start_worker(key, runtime_env, now=self.clock.monotonic())
        asyncio.get_running_loop().call_later(self.config.worker_start_timeout_s, self._start_timed_out, rec)

    def _start_timed_out(self, rec: WorkerRecord) -> None:
        if rec.state == "STARTING":
            log.error("worker %s did not start within %.0fs", rec.worker_id.hex()[:8],
                      self.config.worker_start_timeout_s)
            self.pool.kill(rec, "start timeout")
            self._worker_gone(rec, "did not start in time")

    def _on_return_lease(self, conn, msg: P.ReturnLease, rid):
        self._lease_events += 1
        rec = self.leases.pop(msg.lease_id, None)
        if rec is None or rec.state != "LEASED":
            return None
        self._release_held(rec)
        rec.blocked = False
        rec.lease_id = b""
        rec.lessee = None
        if msg.disconnect_worker:
            self.pool.kill(rec, "returned with disconnect")
        else:
            self.pool.set_state(rec, "IDLE")
        self._try_grant()
        return None

    def _on_cancel_lease(self, conn, msg: P.CancelLease, rid):
        for p in self.pending:
            if p.msg.lease_id == msg.lease_id:
                self.pending.remove(p)
                with contextlib.suppress(Exception):
                    p.conn.send(P.RequestLeaseReply(msg.lease_id, error_type="Cancelled", error="cancelled"), -p.rid)
                break
        return None

    def _on_worker_blocked(self, conn, msg: P.WorkerBlocked, rid):
        rec = self.pool.workers.get(conn.context.get("worker_id", b""))
        if rec is None or rec.state not in ("LEASED", "ACTOR") or rec.blocked == msg.blocked:
            return None
        # the CPU it holds, plain or from a placement group bundle (a captured child runs there)
        lent = {k: v for k, v in rec.held.items() if _lent(k) and v}
        rec.blocked = msg.blocked
        for key, amount in lent.items():
            self.available[key] = self.available.get(key, 0) + (amount if msg.blocked else -amount)
        if lent and msg.blocked:
            self._try_grant()
        return None

    # ------------------------------------------------------------ actors
    async def _on_start_actor(self, conn, msg: P.StartActor, rid):
        fut = asyncio.get_running_loop().create_future()
        runtime_env = msg.spec[_SPEC_RUNTIME_ENV] or {}
        lease = P.RequestLease(msg.actor_id, msg.resources, [], runtime_env, "actor")
        self.pending.append(PendingLease(lease, conn, 0, worker_key(runtime_env, msg.resources),
                                        (msg.actor_id, msg.spec, fut)))
        self._try_grant()
        return await fut

    def _launch_actor(self, rec: WorkerRecord, p: PendingLease) -> None:
        actor_id, spec, fut = p.actor
        self.pool.set_state(rec, "ACTOR")
        rec.actor_id = actor_id

        async def create() -> None:
            try:
                reply = await rec.conn.request(P.CreateActor(spec, rec.gpu_ids))
            except Exception as e:  # noqa: BLE001
                if not fut.done():
                    fut.set_result(P.StartActorReply(False, system_error=f"the actor's worker died while starting: {rec.exit_info or e}"))
                return
            if reply.ok:
                fut.set_result(P.StartActorReply(True, rec.address, rec.worker_id, rec.pid))
            else:
                fut.set_result(P.StartActorReply(False, error=reply.error))
                rec.actor_id = b""  # the head already knows; don't report a restartable death
                self.pool.kill(rec, "constructor failed")

        self._spawn(create())

    # ------------------------------------------------------------ placement group bundles
    async def _on_reserve_bundles(self, conn, msg: P.ReserveBundles, rid):
        need: dict = {}
        for _i, b in msg.bundles:
            R.add(need, b)
        if not R.fits(need, self.available):
            return P.ReserveBundlesReply(False)
        hexid = msg.pg_id.hex()
        offered_by = self._bundles.setdefault(hexid, {})  # index -> {base resource: amount}
        for i, b in msg.bundles:
            R.subtract(self.available, b)
            offered = dict(b)
            offered["bundle"] = 1000 * 10000
            for k, v in offered.items():
                for name in (S.bundle_resource_names(hexid, i, k), S.bundle_resource_names(hexid, None, k)):
                    self.total[name] = self.total.get(name, 0) + v
                    self.available[name] = self.available.get(name, 0) + v
            offered_by[i] = offered
        self._try_grant()
        # the head must see the bundles' resources before it hears they are reserved (it may
        # place a task in the group at once): the reply waits for the report that carries them
        await self._report_soon()
        return P.ReserveBundlesReply(True)

    def _on_release_bundles(self, conn, msg: P.ReleaseBundles, rid):
        hexid = msg.pg_id.hex()
        offered_by = self._bundles.get(hexid, {})
        for i in msg.indexes:
            for base, amount in (offered_by.pop(i, None) or {}).items():
                name = S.bundle_resource_names(hexid, i, base)
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
        if not offered_by:
            self._bundles.pop(hexid, None)
        # workers still running inside the removed bundles are stopped
        for rec in list(self.pool.workers.values()):
            if rec.held and any(hexid in k for k in rec.held):
                self._release_held(rec, give_back=False)
                self.pool.kill(rec, "its placement group was removed")
        self._try_grant()
        self._report_soon()  # the head places the next groups on fresh numbers
        return None

    def _report_soon(self) -> asyncio.Future:
        """Tell the head our resources a moment after they changed; resolves once it is sent.
        One report serves a burst of changes: each carries every bundle's names, so a report
        per change made a thousand placement groups cost the head and this node quadratic time."""
        if self._report_handle is None:
            loop = asyncio.get_running_loop()
            self._report_sent = loop.create_future()
            # the more names a report carries, the more changes it should wait to batch
            delay_s = min(0.05, 0.002 + 5e-6 * len(self.total))
            self._report_handle = loop.call_later(delay_s, self._report_now)
        return self._report_sent

    def _report_now(self) -> None:
        self._report_handle = None
        with contextlib.suppress(Exception):
            self.head.send(P.Heartbeat(self.node_id, self.available, [], self.total))
        if not self._report_sent.done():
            self._report_sent.set_result(None)

    # ------------------------------------------------------------ objects
    def _on_object_sealed(self, conn, msg: P.ObjectSealed, rid):
        self.store.sealed(msg.object_id, msg.size, msg.owner_address, copy=msg.copy)
        self._written(msg.object_id)
        return P.Ack() if rid else None

    def _writing(self, conn: rpc.Connection, oid: bytes) -> None:
        """`conn` reserved room for `oid` and writes it now (possibly over a client's second,
        blocking link: node_sync.py); if the link closes before the object is sealed, its
        room comes back."""
        writing = conn.context.get("writing")
        if writing is None:
            writing = conn.context["writing"] = set()
            conn.on_close.append(self._writer_gone)
        writing.add(oid)
        self._writers[oid] = conn

    def _written(self, oid: bytes) -> None:
        conn = self._writers.pop(oid, None)
        if conn is not None:
            conn.context["writing"].discard(oid)

    def _writer_gone(self, conn: rpc.Connection) -> None:
        """Objects it was writing and never sealed (it crashed mid-write): their room comes back."""
        for oid in list(conn.context.get("writing", ())):
            self._writers.pop(oid, None)
            obj = self.store.objects.get(oid)
            if obj is not None and obj.state == "creating":
                self._on_free_objects(None, P.FreeObjects([oid]), 0)

    def _on_free_objects(self, conn, msg: P.FreeObjects, rid):
        for oid in msg.object_ids:
            if oid in self._writers:
                self._written(oid)
            freed = self.store.free(oid)
            if freed is None:
                shm_files.release(self.store, _untracked(oid))  # pulled copies, old writers
            elif oid not in self._spilling:  # a spill in flight cleans up when it ends
                shm_files.release(self.store, freed)
        return None

    def _free_owned_by(self, owner_address: str) -> None:
        """An owner exited: no one can resolve its objects any more (refs go through the
        owner), so their memory and spill files are freed now rather than at session end."""
        for oid in [oid for oid, o in self.store.objects.items() if o.owner_address == owner_address]:
            freed = self.store.free(oid)
            if freed is not None and oid not in self._spilling:
                shm_files.release(self.store, freed)

    def _on_create_object(self, conn, msg: P.CreateObject, rid):
        """Room for a new object: spill LRU objects if needed, hand over a warm segment.
        Answered at once (no task) unless objects must be spilled first."""
        try:
            res = self.store.reserve(msg.object_id, msg.size, msg.owner_address,
                                     spill_free_bytes=self._spill_free(msg.size))
        except Exception as e:  # noqa: BLE001  ObjectStoreFullError
            return P.CreateObjectReply(False, str(e))
        self._writing(conn, msg.object_id)
        self._drop_evicted(res.evict)
        shm_files.drop_pool_files(res.drop_pool)
        if res.spill:
            spills = self._start_spills(res.spill)
            if self._spill_inflight_bytes > self._spill_ahead_bytes:
                return self._spill_then_create(spills, res)
        shm_files.take_segment(self.store, res.reuse, msg.object_id)
        return P.CreateObjectReply(True)

    async def _spill_then_create(self, spills: list, res) -> P.CreateObjectReply:
        await asyncio.gather(*spills)
        shm_files.take_segment(self.store, res.reuse, res.object_id)
        return P.CreateObjectReply(True)

    async def _on_restore_object(self, conn, msg: P.RestoreObject, rid):
        oid = msg.object_id
        if oid in self._spilling:
            await asyncio.shield(self._spilling[oid])
        if oid in self._restoring:
            await asyncio.shield(self._restoring[oid])
        obj = self.store.objects.get(oid)
        if obj is None:
            return P.RestoreObjectReply(False, "this node's store no longer has it")
        if obj.state != "spilled":
            self.store.accessed(oid)
            return P.RestoreObjectReply(True)
        try:
            res = self.store.restore(oid, spill_free_bytes=self._spill_free(obj.size))
        except Exception as e:  # noqa: BLE001  ObjectStoreFullError
            return P.RestoreObjectReply(False, str(e))
        fut = self._restoring[oid] = asyncio.get_running_loop().create_future()
        ok = False
        try:
            self._drop_evicted(res.evict)
            shm_files.drop_pool_files(res.drop_pool)
            spills = self._start_spills(res.spill)
            if self._spill_inflight_bytes > self._spill_ahead_bytes:
                await asyncio.gather(*spills)
            ok = await asyncio.to_thread(shm_files.restore, self.store, oid, res.reuse)
            self.store.restore_done(oid, ok)
        finally:
            self._restoring.pop(oid, None)
            fut.set_result(None)
        if oid not in self.store.objects:  # freed while restoring
            shm_files.release(self.store, _untracked(oid))
        return P.RestoreObjectReply(ok, "" if ok else "restoring it from the spill directory failed")

    def _drop_evicted(self, evicted: list) -> None:
        """Copies of remote objects gave their room up: their primaries live on other nodes."""
        for freed in evicted:
            shm_files.release(self.store, freed)

    def _spill_free(self, size: int) -> int | None:
        s = self.store
        if s.fits(size):
            return None  # no spilling needed: skip the statvfs
        return shm_files.spill_free_bytes(s)

    def _on_objects_mapped(self, conn, msg: P.ObjectsMapped, rid):
        """A client's mappings: kept per connection, so a client that exits lets go of them all."""
        held = conn.context.setdefault("mapped", set())
        for oid in msg.mapped:
            if oid not in held:
                held.add(oid)
                self.store.mapped(oid)
        for oid in msg.unmapped:
            if oid in held:
                held.discard(oid)
                self.store.unmapped(oid)
        return None

    def _start_spills(self, victims: list[bytes]) -> list[asyncio.Future]:
        """Copy the victims to disk in the background. Whoever needed their room may go on
        while the bytes in flight stay under `_spill_ahead_bytes` (memory runs over the
        capacity by at most that much, briefly); past it, they wait for these copies."""
        loop = asyncio.get_running_loop()
        futs = []
        for oid in victims:
            fut = self._spilling[oid] = loop.create_future()
            futs.append(fut)
            size = self.store.objects[oid].size
            self._spill_inflight_bytes += size
            self._spawn(self._spill_one(oid, fut, size))
        return futs

    async def _spill_one(self, oid: bytes, fut: asyncio.Future, size: int) -> None:
        try:
            ok = await asyncio.to_thread(shm_files.spill, self.store, oid)
            if not self.store.spill_done(oid, ok):  # freed while it was copied
                shm_files.release(self.store, _untracked(oid))
            elif not ok:
                log.warning("spilling object %s failed; it stays in shared memory", oid.hex())
        finally:
            self._spill_inflight_bytes -= size
            self._spilling.pop(oid, None)
            fut.set_result(None)

    # ------------------------------------------------------------ memory monitor
    async def _memory_monitor_loop(self) -> None:
        """Kill the newest task's worker when node memory crosses the threshold (see memory_monitor.py)."""
        interval = self.config.memory_monitor_interval_s
        if interval <= 0 or self.config.memory_usage_threshold >= 1.0:
            return
        killed: WorkerRecord | None = None
        while True:
            await asyncio.sleep(interval)
            if killed is not None and killed.state != "DEAD":
                continue  # one kill at a time: wait for its memory to come back
            killed = None
            snapshot = _memory_snapshot()
            if not MM.over_threshold(snapshot, self.config.memory_usage_threshold):
                continue
            if self.store.pool:  # recycled segments are the cheapest memory to give back
                shm_files.drop_pool_files(self.store.trim_pool(0.0))
                continue
            busy = [r for r in self.pool.workers.values() if r.state in ("LEASED", "ACTOR") and r.pid]
            running = await asyncio.gather(*(self._running_task(r) for r in busy))
            candidates = [MM.Candidate(r.worker_id, r.pid, name, r.busy_since,
                                       is_actor=r.state == "ACTOR", retriable=retriable)
                          for r, (name, retriable) in zip(busy, running)]
            victim = MM.choose_victim(candidates)
            if victim is None:
                continue
            killed = self.pool.workers.get(victim.worker_id)
            if killed is not None:
                self._kill_for_memory(killed, victim, snapshot)

    async def _running_task(self, rec: WorkerRecord) -> tuple[str, bool]:
        """(task name, retriable) from the worker's I/O thread; a silent worker counts as retriable."""
        if rec.conn is None:
            return "", True
        try:
            reply = await asyncio.wait_for(rec.conn.request(P.GetRunningTask()), 0.5)
            return reply.task_name, reply.retriable
        except Exception:  # noqa: BLE001  exiting, or too busy to answer
            return "", True

    async def _pool_trim_loop(self) -> None:
        """Recycled segments make a put() loop fast; an idle node gives their memory back."""
        idle_s = self.config.recycled_segment_idle_s
        while True:
            await asyncio.sleep(max(0.5, idle_s / 2))
            shm_files.drop_pool_files(self.store.trim_pool(idle_s))

    def _kill_for_memory(self, rec: WorkerRecord, victim: MM.Candidate, snapshot: MM.MemorySnapshot) -> None:
        reason = MM.oom_reason(snapshot, self.config.memory_usage_threshold, self.ip, victim.is_actor)
        log.warning("memory monitor: killing worker pid %d (%s): %s", rec.pid, victim.description or "?", reason)
        if rec.lessee is not None:
            with contextlib.suppress(Exception):
                rec.lessee.send(P.WorkerOutOfMemory(reason, rec.worker_id))
        # the owner hears why before it sees the connection drop
        asyncio.get_running_loop().call_later(0.05, self.pool.kill, rec, f"was {reason}")

    def _on_pull_object(self, conn, msg: P.PullObject, rid):
        data = shm_files.read_range(self.store, msg.object_id, msg.offset, msg.length)
        if data is None:
            return P.PullObjectReply(msg.object_id, 0, b"", False)
        total, chunk = data
        return P.PullObjectReply(msg.object_id, total, chunk, True)

    def _locate_object(self, object_id: bytes) -> str | None:
        """Bulk-server thread: the file holding a sealed object here (shm or spilled), if any."""
        for name in ("path", "spill_path"):
            fn = getattr(self.store, name, None)
            if fn is not None:
                path = fn(object_id)
                if os.path.exists(path):
                    return path
        return None

    def _on_get_node_info(self, conn, msg, rid):
        return P.GetNodeInfoReply(self.node_id, self.total, self.available, self.store.used_bytes,
                                  self.store.capacity_bytes, len(self.pool.workers), self.store.listing(),
                                  self.store.stats(),
                                  [c.context["client"] for c in self.clients.values() if "client" in c.context])


# how long a KillWorker request waits for the killed process's connection to close
KILL_CONFIRM_S = 5.0
_SPEC_RUNTIME_ENV = TASK_SPEC_FIELDS.index("runtime_env")


def _memory_snapshot() -> MM.MemorySnapshot:
    try:
        with open("/proc/meminfo") as f:
            host = MM.parse_meminfo(f.read())
    except OSError:
        return MM.MemorySnapshot(0, 0)
    limit = current = None
    with contextlib.suppress(OSError, ValueError):
        with open("/sys/fs/cgroup/memory.max") as f:
            raw = f.read().strip()
        if raw != "max":
            limit = int(raw)
            with open("/sys/fs/cgroup/memory.current") as f:
                current = int(f.read().strip())
    return MM.apply_cgroup_limit(host, limit, current)


def _untracked(oid: bytes) -> Freed:
    """A free of files the store no longer counts: delete both copies, recycle nothing."""
    return Freed(oid, 0, True, True)


def _version() -> str:
    from importlib import metadata

    try:
        return metadata.version("raylite")
    except Exception:  # noqa: BLE001
        return "0+unknown"


async def run_node_forever(node: NodeDaemon) -> None:
    await node.start()
    await node.stopped.wait()


def remove_session_dir(path: str) -> None:
    shutil.rmtree(path, ignore_errors=True)


def _lent(resource: str) -> bool:
    """Resources a worker blocked in get() lends back: its CPU, plain or a bundle's."""
    return resource == "CPU" or resource.startswith("CPU_group_")
