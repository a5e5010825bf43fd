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
import time

from raylite._core import labels as labels_mod
from raylite._core import protocol as P
from raylite._core import resources as R
from raylite._core.clock import MonotonicClock
from raylite._core.config import Config
from raylite._core.node import lease_table as LT
from raylite._core.node import log_files, shm_files
from raylite._core.node import memory_monitor as MM
from raylite._core.node import object_plane as OP
from raylite._core.node.gpu_ids import GpuIds, node_device_ids, other_device_pools
from raylite._core.node.lease_table import PendingLease, worker_key
from raylite._core.node.object_store import ObjectStore, default_capacity_bytes
from raylite._core.node.stats import NodeStats
from raylite._core.node.worker_pool import WorkerPool, WorkerRecord
from raylite._core.task_spec import _FIELDS as TASK_SPEC_FIELDS
from raylite._core.transport import rpc

log = logging.getLogger("raylite.node")

__all__ = ["NodeDaemon", "PendingLease", "worker_key", "run_node_forever", "remove_session_dir"]


# a request queued here because no node had room is offered to the head again after this long,
# then at twice the interval each time up to the last; at most this many are retried at once
RESPILL_FIRST_S = 0.02
RESPILL_MAX_S = 0.32
RESPILL_MAX = 64

class NodeDaemon:
    def __init__(self, config: Config, *, node_id: bytes, ip: str, resources: dict, labels: dict,
                 session_dir: str, token: str, head_address: str, address: str,
                 tcp_address: str = "", tcp_sock: socket.socket | None = None,
                 exit_with_creator: bool = False) -> None:
        self.config = config
        self.node_id = node_id
        self.ip = ip
        self._exits: dict[bytes, tuple] = {}  # worker id -> (exit info, pid, kill reason)
        self.bulk = None  # multi-node: serves object bytes to other nodes (transport/bulk.py)
        self._fenced = False
        self.labels = {**labels, labels_mod.NODE_ID_LABEL: node_id.hex()}
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
            spill_capacity_bytes=config.object_spill_bytes, spilling_enabled=config.object_spilling)
        shm_files.make_dirs(self.store)
        # reported like Ray's (cluster_resources()["object_store_memory"]); nothing requests it
        total = dict(resources)
        total.update(R.to_fixed({"object_store_memory": self.store.capacity_bytes}))
        # the pure part of the objects: writers, spills in flight, what a free may delete (object_plane.py)
        self.objects = OP.ObjectPlane(self.store, spill_ahead_bytes=min(self.store.capacity_bytes // 16, 64 << 20))
        self._spilling: dict[bytes, asyncio.Future] = {}  # object id -> its copy to disk, ends when done
        self._restoring: dict[bytes, asyncio.Future] = {}
        self.pool = WorkerPool(address, token, session_dir, self._on_worker_exit)
        # forked workers register over the node's socket: starting thousands at once (a burst
        # of actors) only queues them behind each other and the registrations they wait for
        start_limit = config.worker_start_concurrency or max(8, 4 * (os.cpu_count() or 1))
        gpus = GpuIds(node_device_ids(resources.get("GPU", 0), os.environ.get("CUDA_VISIBLE_DEVICES")))
        # the pure part: resources, the lease queue, leases, bundles (lease_table.py)
        self.table = LT.LeaseTable(node_id=node_id, total=total, labels=self.labels, workers=self.pool, gpus=gpus,
                                   clock=self.clock, start_limit=start_limit,
                                   devices=other_device_pools(resources, os.environ))
        self._stats = NodeStats()
        self.clients: dict[bytes, rpc.Connection] = {}  # worker_id -> conn (drivers and workers)
        self.drivers: dict[bytes, rpc.Connection] = {}
        self.head: rpc.Connection | None = None
        self.stopped: asyncio.Event | None = None
        self._servers: list[asyncio.AbstractServer] = []
        self._bg: set[asyncio.Task] = set()
        self._report_handle: asyncio.TimerHandle | None = None
        self._reported_available: dict = {}  # `available` as the head last heard it
        self._granted_remote = False  # a lease went to another node's client since our last report
        self._respilling: set[bytes] = set()  # queued requests the head is asked about again (_respill_later)
        self._effects = self._effect_handlers()
        self._report_sent: asyncio.Future | None = None
        self._last_global_gc = -float("inf")  # monotonic time this node last asked for one
        self.handlers = {
            P.CollectGarbage: self._on_collect_garbage,
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

    def _effect_handlers(self) -> dict:
        """How the shell carries out each of the lease table's effects (lease_table.py)."""
        return {
            LT.Reply: self._do_reply, LT.Granted: self._do_granted, LT.LaunchActor: self._launch_actor,
            LT.FailActorStart: self._do_fail_actor_start,
            LT.StartWorker: lambda e: self._start_worker(e.key, e.runtime_env),
            LT.SpillBack: lambda e: self._spill(e.lease.conn, e.lease.msg, e.lease.rid),
            LT.KillWorker: self._do_kill, LT.AskToRelease: self._do_ask_to_release,
            LT.ActorWorkerDied: self._do_actor_worker_died, LT.ReportResources: self._do_report,
        }

    # the lease table's tables, under the names the rest of the shell reads
    @property
    def total(self) -> dict:
        return self.table.total

    @property
    def available(self) -> dict:
        return self.table.available

    @property
    def pending(self) -> list[PendingLease]:
        return self.table.pending

    @property
    def leases(self) -> dict[bytes, WorkerRecord]:
        return self.table.leases

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

    def adopt_pool(self, pool: WorkerPool) -> None:
        """Use `pool` (its zygote forked before any thread or loop existed: cluster/daemon.py)
        instead of the one made here; the lease table hands out its workers from then on."""
        pool.on_exit = self._on_worker_exit
        pool.node_address = self.address
        self.pool = pool
        self.table.workers = pool

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
        self._lease(LT.Fenced("fence-" + self.node_id.hex()))
        self._on_free_objects(None, P.FreeObjects(list(self.store.objects)), 0)
        if self.head is not None and not self.head.is_closed():
            self.head.abort()  # _head_lost reconnects under a new node id

    def stop(self) -> None:
        if self.stopped.is_set():
            return
        self.stopped.set()
        self.table.stopped = True
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
                      self.table.lease_events)
            stats = self._stats_if_due(now)
            ask = now - asked >= ack_every
            if report == sent and stats is None and not ask:
                continue
            sent = report
            try:
                msg = P.Heartbeat(self.node_id, report[0], report[1], report[2], stats)
                self._reported_available = report[0]
                self._granted_remote = False
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
        if conn.context.get("lessee") or conn.context.get("requested"):
            self._lease(LT.RequesterGone(conn, "the task's owner exited", "client-" + worker_id.hex()))
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

    def _worker_gone(self, rec: WorkerRecord, why: str) -> None:
        held = rec.lease_id or rec.actor_id  # an actor's lease id is its actor id
        self._lease(LT.WorkerGone(rec, why, LT.lease_cause(held) if held else "worker-" + rec.worker_id.hex()))

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

    # ------------------------------------------------------------ leases (the table decides, lease_table.py)
    def _lease(self, event: LT.Event) -> object:
        """Hand `event` to the lease table and carry out the effects; returns the direct
        answer to the request that caused it, if the table gave one (else None)."""
        return self._carry_out(event, self.table.handle(event))

    def _carry_out(self, event: LT.Event, effects: list[LT.Effect]) -> object:
        """Do what the table decided; the log lines carry the event's cause id (lease_table.py)."""
        if log.isEnabledFor(logging.DEBUG):
            _log_lease(event, effects)
        answer = None
        handlers = self._effects
        for effect in effects:
            done = handlers[type(effect)](effect)
            if done is not None:
                answer = done
        return answer

    def _do_reply(self, e: LT.Reply) -> object:
        if e.rid > 0:
            return e.msg  # the answer to the request being handled: the rpc layer sends it
        with contextlib.suppress(Exception):
            e.requester.send(e.msg, e.rid)
        return None

    def _do_granted(self, e: LT.Granted) -> None:
        p = e.lease
        p.conn.context["lessee"] = True
        if p.conn.context.get("lessee_watched"):
            self._granted_remote = True
        p.conn.send(e.reply, -p.rid)

    def _do_fail_actor_start(self, e: LT.FailActorStart) -> None:
        fut = e.lease.actor[2]
        if not fut.done():
            fut.set_result(e.reply)

    def _do_kill(self, e: LT.KillWorker) -> None:
        if e.flush:
            asyncio.get_running_loop().create_task(self._flush_then_kill(e.worker, e.reason))
        else:
            self.pool.kill(e.worker, e.reason)

    def _do_ask_to_release(self, e: LT.AskToRelease) -> None:
        for lessee in e.lessees:
            with contextlib.suppress(Exception):
                lessee.send(P.ReleaseIdleLeases())

    def _do_actor_worker_died(self, e: LT.ActorWorkerDied) -> None:
        with contextlib.suppress(Exception):
            self.head.send(P.WorkerDied(self.node_id, e.worker_id, e.actor_id, e.reason))

    def _on_request_lease(self, conn: rpc.Connection, msg: P.RequestLease, rid: int):
        if "worker_id" not in conn.context and not conn.context.get("lessee_watched"):
            conn.context["lessee_watched"] = True  # a client on another node
            conn.on_close.append(self._on_remote_lessee_closed)
        can_spill = bool(self.tcp_address) and self.head is not None and not self.head.is_closed()
        p = PendingLease(msg, conn, rid, worker_key(msg.runtime_env, msg.resources))
        conn.context["requested"] = True
        return self._lease(LT.LeaseRequested(p, can_spill, p.cause))

    def _free_after_queued(self) -> dict:
        """Free resources once the leases queued here are granted."""
        return self.table.free_after_queued()

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
            log.debug("[%s] spilled back to node %s", LT.lease_cause(msg.lease_id), pick.node_id.hex()[:8])
            return P.RequestLeaseReply(msg.lease_id, node_id=pick.node_id, spillback_address=pick.address)
        local = P.RequestLease(msg.lease_id, msg.resources, [], msg.runtime_env, msg.description, False)
        answer = self._on_request_lease(conn, local, rid)
        if not msg.strategy and self.table.is_pending(msg.lease_id):
            self._respill_later(conn, msg, rid, RESPILL_FIRST_S)
        return answer

    def _respill_later(self, conn: rpc.Connection, msg: P.RequestLease, rid: int, delay_s: float) -> None:
        """A request queued here because no node had room when the head looked: ask the head
        again in a moment. Its copy of the other nodes' resources lags (a heartbeat, or a report
        once a full node frees room), and a burst queued here meanwhile would never reach the
        room that opened elsewhere (Ray's raylet reschedules its queue on each resource update)."""
        if len(self._respilling) >= RESPILL_MAX and msg.lease_id not in self._respilling:
            return
        self._respilling.add(msg.lease_id)
        asyncio.get_running_loop().call_later(
            delay_s, lambda: self._spawn(self._respill(conn, msg, rid, delay_s)))

    async def _respill(self, conn: rpc.Connection, msg: P.RequestLease, rid: int, delay_s: float) -> None:
        self._respilling.discard(msg.lease_id)
        if conn.is_closed() or self.stopped.is_set() or not self.table.is_pending(msg.lease_id):
            return
        try:
            pick: P.PickNodeReply = await self.head.request(
                P.PickNode(msg.resources, msg.strategy, self.node_id, msg.description, self._free_after_queued()),
                timeout_s=10)
        except Exception:  # noqa: BLE001  no head right now: it stays queued here
            return
        if pick.node_id and pick.node_id != self.node_id and not pick.error_type and not pick.wait:
            if self.table.withdraw(msg.lease_id):  # not granted here meanwhile
                log.debug("[%s] queued here, spilled back to node %s", LT.lease_cause(msg.lease_id),
                          pick.node_id.hex()[:8])
                with contextlib.suppress(Exception):
                    conn.send(P.RequestLeaseReply(msg.lease_id, node_id=pick.node_id,
                                                  spillback_address=pick.address), -rid)
            return
        if self.table.is_pending(msg.lease_id):
            self._respill_later(conn, msg, rid, min(delay_s * 2, RESPILL_MAX_S))

    def _on_remote_lessee_closed(self, conn: rpc.Connection) -> None:
        self._lease(LT.RequesterGone(conn, "the task's owner on another node went away", "lessee-closed"))
        self._try_grant()

    async def _flush_then_kill(self, rec: WorkerRecord, reason: str) -> None:
        self.pool.doom(rec, reason)  # a lease returned while it flushes must not hand it out again
        if rec.conn is not None and not rec.conn.is_closed():
            with contextlib.suppress(Exception):
                await rec.conn.request(P.FlushTaskEvents(), timeout_s=1.0)
        self.pool.kill(rec, reason)

    def _try_grant(self, cause: str = "regrant") -> None:
        """Grant what the queue can now (the table's grant pass: lease_table.py)."""
        self._lease(LT.Regrant(cause))

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
        self._lease(LT.LeaseReturned(msg.lease_id, msg.disconnect_worker, LT.lease_cause(msg.lease_id),
                                     msg.retire_worker))
        return None

    def _on_cancel_lease(self, conn, msg: P.CancelLease, rid):
        self._lease(LT.LeaseCancelled(msg.lease_id, LT.lease_cause(msg.lease_id)))
        return None

    def _on_worker_blocked(self, conn, msg: P.WorkerBlocked, rid):
        worker_id = conn.context.get("worker_id", b"")
        rec = self.pool.workers.get(worker_id)
        cause = LT.lease_cause(rec.lease_id or rec.actor_id) if rec is not None else "worker-" + worker_id.hex()
        self._lease(LT.WorkerBlockedChanged(worker_id, msg.blocked, cause))
        return None

    # ------------------------------------------------------------ actors
    async def _on_start_actor(self, conn, msg: P.StartActor, rid):
        fut = asyncio.get_running_loop().create_future()
        runtime_env = msg.spec[_SPEC_RUNTIME_ENV] or {}
        lease = P.RequestLease(msg.actor_id, msg.resources, [], runtime_env, "actor")
        p = PendingLease(lease, conn, 0, worker_key(runtime_env, msg.resources), (msg.actor_id, msg.spec, fut))
        self._lease(LT.ActorRequested(p, p.cause))
        return await fut

    def _launch_actor(self, e: LT.LaunchActor) -> None:
        """The table gave `e.worker` to the actor: create it there and answer the head."""
        rec = e.worker
        _actor_id, spec, fut = e.lease.actor

        async def create() -> None:
            try:
                reply = await rec.conn.request(P.CreateActor(spec, rec.gpu_ids, rec.device_ids))
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
        event = LT.BundlesReserved(msg.pg_id, msg.bundles, "pg-" + msg.pg_id.hex())
        effects = self.table.handle(event)
        self._carry_out(event, effects)
        if not any(isinstance(e, LT.ReportResources) for e in effects):  # they did not fit
            return P.ReserveBundlesReply(False)
        # the head must see the bundles' resources before it hears they are reserved (it may
        # place a task in the group at once): the reply waits for the report that carries them
        await self._report_soon()
        return P.ReserveBundlesReply(True)

    def _on_release_bundles(self, conn, msg: P.ReleaseBundles, rid):
        self._lease(LT.BundlesReleased(msg.pg_id, list(msg.indexes), "pg-" + msg.pg_id.hex()))
        return None

    def _do_report(self, e: LT.ReportResources) -> None:
        if e.room_freed and not (self.tcp_address and (self._granted_remote or self._head_saw_full())):
            return  # single node, or the head knows we have room: the next heartbeat will do
        self._report_soon()

    def _head_saw_full(self) -> bool:
        """Whether our last report showed a resource used up: the head then sends no lease here
        until it hears otherwise, so a return should not wait for the next heartbeat (a burst on
        another node would stay there meanwhile). Reports go out on such a change only (or after
        leases the head sent here, `_granted_remote`: it subtracted them from its copy), so a
        node busy at capacity does not report on every lease it turns over."""
        seen = self._reported_available
        return any(seen.get(k, 0) <= 0 for k, v in self.total.items()
                   if v > 0 and not k.startswith("node:") and "_group_" not in k)

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
            self._reported_available = dict(self.available)
            self._granted_remote = False
        if not self._report_sent.done():
            self._report_sent.set_result(None)

    # ------------------------------------------------------------ objects (the plane decides, object_plane.py)
    def _objects_do(self, event: OP.Event) -> tuple[list[asyncio.Future], OP.Effect | None]:
        """Hand `event` to the object plane and carry out the effects that need no waiting;
        returns the futures of the spills it started and its last effect that does wait
        (an Answer, TakeSegment or CopyBack), for the request handler to finish."""
        debug = log.isEnabledFor(logging.DEBUG)
        if debug:
            log.debug("[%s] %s", event.cause, type(event).__name__)
        spills: list[asyncio.Future] = []
        last = None
        for e in self.objects.handle(event):
            if debug:
                log.debug("[%s] -> %s", e.cause, type(e).__name__)
            kind = type(e)
            if kind is OP.ReleaseFiles:
                for freed in e.freed:
                    shm_files.release(self.store, freed)
            elif kind is OP.DropPoolFiles:
                shm_files.drop_pool_files(e.paths)
            elif kind is OP.StartSpill:
                spills.append(self._start_spill(e.object_id))
            elif kind is OP.WatchWriter:
                e.writer.on_close.append(self._writer_gone)
            elif kind is OP.SpillFailed:
                log.warning("spilling object %s failed; it stays in shared memory", e.object_id.hex())
            else:
                last = e
        return spills, last

    def _on_object_sealed(self, conn, msg: P.ObjectSealed, rid):
        # a copy larger than the store, written under another id's reservation and renamed,
        # is a link to a file on disk (the only check by file; it runs only for such sizes)
        fallback = (msg.size > self.store.capacity_bytes and msg.object_id not in self.store.objects
                    and shm_files.is_fallback_file(self.store, msg.object_id))
        self._objects_do(OP.Sealed(msg.object_id, msg.size, msg.owner_address, msg.copy,
                                   OP.object_cause(msg.object_id), fallback))
        self._gc_if_store_full()
        return P.Ack() if rid else None

    def _gc_if_store_full(self) -> None:
        """Ray's automatic global GC: a store past the threshold asks every process of the
        cluster to collect reference cycles (refs in cycles pin objects here), at most once per
        global_gc_min_interval_s (P.CollectGarbage)."""
        store, cfg = self.store, self.config
        if not store.capacity_bytes or store.used_bytes <= cfg.store_usage_gc_threshold * store.capacity_bytes:
            return
        now = time.monotonic()
        if now - self._last_global_gc < cfg.global_gc_min_interval_s:
            return
        self._last_global_gc = now
        log.info("the object store is %.0f%% full: every process collects reference cycles",
                 100 * store.used_bytes / store.capacity_bytes)
        if self.head is not None and not self.head.is_closed():
            self.head.send(P.CollectGarbage())  # the head sends it to every node, this one too
        else:
            self._collect_garbage_here()

    def _on_collect_garbage(self, conn, msg: P.CollectGarbage, rid):
        """From the head only (a worker or driver has no say in the cluster's collections)."""
        if conn is self.head:
            self._collect_garbage_here()
        return None

    def _collect_garbage_here(self) -> None:
        conns = [rec.conn for rec in list(self.pool.workers.values()) if rec.conn is not None]
        for conn in conns + list(self.drivers.values()):
            if not conn.is_closed():
                with contextlib.suppress(Exception):
                    conn.send(P.CollectGarbage())

    def _writer_gone(self, conn: rpc.Connection) -> None:
        """Objects it was writing and never sealed (it crashed mid-write): their room comes back."""
        self._objects_do(OP.WriterGone(conn, "writer-closed"))

    def _on_free_objects(self, conn, msg: P.FreeObjects, rid):
        self._objects_do(OP.FreeRequested(list(msg.object_ids), "free"))
        return None

    def _free_owned_by(self, owner_address: str) -> None:
        """An owner exited: no one can resolve its objects any more (refs go through the
        owner), so their memory and spill files are freed now rather than at session end."""
        self._objects_do(OP.OwnerGone(owner_address, "owner-" + owner_address))

    def _on_create_object(self, conn, msg: P.CreateObject, rid):
        """Room for a new object: spill LRU objects if needed, hand over a warm segment.
        Answered at once (no task) unless objects must be spilled first."""
        spills, last = self._objects_do(OP.CreateRequested(
            msg.object_id, msg.size, msg.owner_address, conn, self._spill_free(msg.size),
            OP.object_cause(msg.object_id)))
        if isinstance(last, OP.Answer):
            return P.CreateObjectReply(last.ok, last.error)
        if last.fallback:
            try:
                shm_files.make_fallback_file(self.store, last.object_id)
            except OSError as e:
                self._objects_do(OP.FreeRequested([last.object_id], OP.object_cause(last.object_id)))
                return P.CreateObjectReply(False, f"Cannot store object {last.object_id.hex()} ({msg.size} bytes): "
                                                  f"it is larger than the whole object store, and its file on "
                                                  f"disk could not be made ({e}). Raise object_store_memory, or "
                                                  "free disk space in the spill directory.")
            return P.CreateObjectReply(True)
        if last.after_spills:
            return self._spill_then_create(spills, last)
        shm_files.take_segment(self.store, last.reuse, last.object_id)
        return P.CreateObjectReply(True)

    async def _spill_then_create(self, spills: list, take: OP.TakeSegment) -> P.CreateObjectReply:
        await asyncio.gather(*spills)
        shm_files.take_segment(self.store, take.reuse, take.object_id)
        return P.CreateObjectReply(True)

    async def _on_restore_object(self, conn, msg: P.RestoreObject, rid):
        oid = msg.object_id
        if oid in self._spilling:
            await asyncio.shield(self._spilling[oid])
        if oid in self._restoring:
            await asyncio.shield(self._restoring[oid])
        obj = self.store.objects.get(oid)
        spill_free = self._spill_free(obj.size) if obj is not None and obj.state == "spilled" else None
        cause = OP.object_cause(oid)
        spills, last = self._objects_do(OP.RestoreRequested(oid, spill_free, cause))
        if isinstance(last, OP.Answer):
            return P.RestoreObjectReply(last.ok, last.error)
        fut = self._restoring[oid] = asyncio.get_running_loop().create_future()
        try:
            if last.after_spills:
                await asyncio.gather(*spills)
            ok = await asyncio.to_thread(shm_files.restore, self.store, oid, last.reuse)
            _spills, answer = self._objects_do(OP.RestoreFinished(oid, ok, cause))
        finally:
            self._restoring.pop(oid, None)
            fut.set_result(None)
        return P.RestoreObjectReply(answer.ok, answer.error)

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

    def _start_spill(self, oid: bytes) -> asyncio.Future:
        """Copy a victim to disk in the background (the plane counts its bytes in flight)."""
        fut = self._spilling[oid] = asyncio.get_running_loop().create_future()
        self._spawn(self._spill_one(oid, fut))
        return fut

    async def _spill_one(self, oid: bytes, fut: asyncio.Future) -> None:
        ok = None
        try:
            ok = await asyncio.to_thread(shm_files.spill, self.store, oid)
        finally:
            self._spilling.pop(oid, None)
            self._objects_do(OP.SpillFinished(oid, ok, OP.object_cause(oid)))
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



def _log_lease(event: LT.Event, effects: list[LT.Effect]) -> None:
    """The lease decisions, one line for the event and one per effect, each under its cause id."""
    log.debug("[%s] %s", event.cause, _describe(event))
    for effect in effects:
        log.debug("[%s] -> %s", effect.cause, _describe(effect))


def _describe(item: object) -> str:
    """One log line's worth of a lease event or effect: its kind and what it names."""
    parts = [type(item).__name__]
    for name in ("lease", "worker"):
        value = getattr(item, name, None)
        if isinstance(value, PendingLease):
            parts.append(f"lease {value.msg.lease_id.hex()} of {value.msg.description or '?'} "
                         f"{R.describe(value.msg.resources)}")
        elif isinstance(value, WorkerRecord):
            parts.append(f"worker {value.worker_id.hex()[:8]} pid {value.pid}")
    reason = getattr(item, "reason", None) or getattr(item, "why", None)
    if isinstance(reason, str) and reason:
        parts.append(reason)
    return " ".join(parts)
