"""The head's I/O shell: the control store (control_store.py) served over rpc.

The store holds the tables (nodes, actors, named actors, placement groups, the
key-value store, jobs) and decides; this module listens, turns protocol messages
into store calls, and carries out the effects the store returns: it sends to
nodes and clients, runs the placement attempts that wait on a node's reply,
wakes callers waiting on an actor or a placement group, writes persistence rows,
and runs the heartbeat check. A node that cannot grant a lease asks the head which
node should (PickNode: spillback). With a Persistence store every table change is
written through, and a restarted head reloads the tables and gives the nodes one
dead-timeout to reconnect.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Iterable

from raylite._core import protocol as P
from raylite._core import scheduling as S
from raylite._core.clock import Clock, MonotonicClock
from raylite._core.config import Config
from raylite._core.head import control_store as CS
from raylite._core.head.control_store import NodeRecord, expired_nodes  # noqa: F401  (tests import them here)
from raylite._core.head.metrics_service import HeadMetrics
from raylite._core.head.persistence import Persistence
from raylite._core.head.task_events import TaskEventTable
from raylite._core.task_spec import TaskSpec
from raylite._core.transport import rpc

log = logging.getLogger("raylite.head")
# how long kill() waits for the node to confirm that the actor's process is gone
KILL_WAIT_S = 10.0

# a lease pick that waits for the autoscaler's node is answered `wait` after at most this long
# (the node asks again), so the node's request never times out and a dead requester is noticed
PICK_WAIT_S = 4.0


class Head:
    def __init__(self, config: Config, token: str, clock: Clock | None = None,
                 persist: Persistence | None = None) -> None:
        self.config = config
        self.token = token
        self.clock = clock or MonotonicClock()
        self.persist = persist
        self.store = CS.ControlStore(self.clock, config.node_dead_timeout_s)
        self._clients: set[rpc.Connection] = set()
        self._liveness: asyncio.Task | None = None
        self._servers: list[asyncio.AbstractServer] = []
        self._bg: set[asyncio.Task] = set()
        self._actor_waiters: dict[bytes, list[tuple[asyncio.Future, int]]] = {}
        self._pg_waiters: dict[bytes, list[asyncio.Future]] = {}
        self._node_waiters: list[asyncio.Future] = []  # lease picks waiting for a node to join
        self._restored = False
        self.handlers = {
            P.RegisterNode: self._on_register_node,
            P.CollectGarbage: self._on_collect_garbage,
            P.Heartbeat: self._on_heartbeat,
            P.WorkerDied: self._on_worker_died,
            P.NodeShutdown: self._on_node_shutdown,
            P.RegisterActor: self._on_register_actor,
            P.GetActorInfo: self._on_get_actor_info,
            P.GetNamedActor: self._on_get_named_actor,
            P.ListNamedActors: self._on_list_named,
            P.ListActors: self._on_list_actors,
            P.KillActor: self._on_kill_actor,
            P.KvPut: self._on_kv_put,
            P.KvGet: self._on_kv_get,
            P.KvDel: self._on_kv_del,
            P.KvKeys: self._on_kv_keys,
            P.PublishAutoscalerView: self._on_publish_autoscaler_view,
            P.GetAutoscalerView: self._on_get_autoscaler_view,
            P.RequestResources: self._on_request_resources,
            P.CreatePlacementGroup: self._on_create_pg,
            P.RemovePlacementGroup: self._on_remove_pg,
            P.GetPlacementGroup: self._on_get_pg,
            P.ListPlacementGroups: self._on_list_pgs,
            P.GetClusterInfo: self._on_cluster_info,
            P.RegisterJob: self._on_register_job,
            P.PickNode: self._on_pick_node,
            P.TaskEvents: self._on_task_events,
            P.GetTaskEvents: self._on_get_task_events,
            P.ListJobs: self._on_list_jobs,
        }
        self.task_events = TaskEventTable(config.task_events_max_per_job)
        self.metrics = HeadMetrics(self.store, self.task_events)  # /metrics and the dashboard's history
        self.handlers.update(self.metrics.handlers())
        if persist is not None:
            self.store.restore(persist.load)
            s = self.store
            log.warning("head restored %d nodes, %d actors, %d kv entries", len(s.nodes), len(s.actors),
                        len(s.kv))
            self._restored = True

    async def listen(self, address: str) -> None:
        self._servers.append(await rpc.listen(address, self.handlers, token=self.token,
                                              on_connect=self._on_connect))
        if self._liveness is None:
            self._liveness = asyncio.get_running_loop().create_task(self._liveness_loop())
            self._spawn(self.metrics.run())
            if self._restored:
                self._restored = False
                self._apply(self.store.resume())

    def _on_connect(self, conn: rpc.Connection) -> None:
        self._clients.add(conn)
        conn.on_close.append(self._clients.discard)

    def close(self) -> None:
        for s in self._servers:
            s.close()
        for t in self._bg:
            t.cancel()
        if self._liveness is not None:
            self._liveness.cancel()
        if self.persist is not None:
            self.persist.close()

    async def _liveness_loop(self) -> None:
        """Declare nodes dead whose heartbeats stopped (a cut link keeps TCP open)."""
        interval = min(0.25, self.config.heartbeat_interval_s)
        last = self.clock.monotonic()
        while True:
            await asyncio.sleep(interval)
            now = self.clock.monotonic()
            stall_s = now - last - interval
            if stall_s > interval:  # this loop was late: heartbeats of that time may be unread
                self.store.excuse_stall(stall_s)
            last = now
            self._apply(self.store.expire_silent_nodes())

    def _spawn(self, coro) -> None:
        t = asyncio.get_running_loop().create_task(coro)
        self._bg.add(t)
        t.add_done_callback(self._bg.discard)

    # ------------------------------------------------------------ effects
    def _apply(self, effects: Iterable[CS.Effect]) -> None:
        for e in effects:
            match e:
                case CS.Persist(table, key, value):
                    self._save(table, key, value)
                case CS.Unpersist(table, key):
                    self._drop(table, key)
                case CS.MarkNodeDead(node_id, cause):
                    self._fence(node_id, cause)
                case CS.Broadcast(msg):
                    self._broadcast(msg)
                case CS.ScheduleActor(actor_id):
                    self._spawn(self._start_actor(actor_id))
                case CS.ActorChanged(actor_id):
                    self._wake_actor_waiters(actor_id)
                case CS.KillWorkerOn(node_id, worker_id, reason):
                    self._send_to_node(node_id, P.KillWorker(worker_id, reason))
                case CS.PlacePlacementGroup(pg_id):
                    self._spawn(self._place_pg(pg_id))
                case CS.ReleaseBundlesOn(node_id, pg_id, indexes):
                    self._send_to_node(node_id, P.ReleaseBundles(pg_id, indexes))
                case CS.PlacementGroupChanged(pg_id):
                    self._wake_pg_waiters(pg_id)
                case _:  # StartActorOn, ReserveBundles, RetryPlacement: only inside their attempt loops
                    raise TypeError(f"the head cannot carry out {e!r} here")

    def _save(self, table: str, key: bytes, value) -> None:
        if self.persist is not None:
            try:
                self.persist.put(table, key, value)
            except Exception:  # noqa: BLE001
                log.exception("could not persist %s row", table)

    def _drop(self, table: str, key: bytes) -> None:
        if self.persist is not None:
            with contextlib.suppress(Exception):
                self.persist.delete(table, key)

    def _fence(self, node_id: bytes, cause: str) -> None:
        log.warning("node %s is dead: %s", node_id.hex()[:8], cause)
        conn = self.store.nodes[node_id].link
        if conn is not None and not conn.is_closed():
            # a partitioned node may come back: it must learn it is dead and fence itself
            with contextlib.suppress(Exception):
                conn.send(P.HeartbeatReply(False))
            conn.abort()

    def _broadcast(self, msg: P.Message) -> None:
        for c in list(self._clients):
            if c.peer_role in ("driver", "worker") and not c.is_closed():
                with contextlib.suppress(Exception):
                    c.send(msg)

    def _send_to_node(self, node_id: bytes, msg: P.Message) -> None:
        node = self.store.nodes.get(node_id)
        if node is not None and node.alive:
            with contextlib.suppress(Exception):
                node.link.send(msg)

    def _wake_actor_waiters(self, actor_id: bytes) -> None:
        waiters = self._actor_waiters.pop(actor_id, [])
        keep = []
        for fut, after in waiters:
            if fut.done():
                continue
            if self.store.actor_settled(actor_id, after):
                fut.set_result(None)
            else:
                keep.append((fut, after))
        if keep:
            self._actor_waiters.setdefault(actor_id, []).extend(keep)

    def _wake_pg_waiters(self, pg_id: bytes) -> None:
        for fut in self._pg_waiters.pop(pg_id, []):
            if not fut.done():
                fut.set_result(None)

    # ------------------------------------------------------------ nodes
    def _on_register_node(self, conn: rpc.Connection, msg: P.RegisterNode, rid: int):
        if msg.version and msg.version != raylite_version():
            return P.RegisterNodeReply(False, f"version mismatch: the head runs raylite {raylite_version()}, "
                                       f"this node runs {msg.version}; install the same raylite version "
                                       "on every node")
        error, effects = self.store.register_node(msg.node_id, msg.address, msg.ip, msg.resources, msg.labels,
                                                  msg.store_dir, conn, msg.local_address, msg.data_address)
        if error:
            return P.RegisterNodeReply(False, error)
        conn.context["node_id"] = msg.node_id
        conn.on_close.append(lambda c: self._apply(self.store.link_closed(msg.node_id, c)))
        self._apply(effects)
        waiters, self._node_waiters = self._node_waiters, []
        for fut in waiters:  # lease picks waiting for a node: ask again now
            if not fut.done():
                fut.set_result(None)
        return P.RegisterNodeReply(True)

    def _on_collect_garbage(self, conn, msg: P.CollectGarbage, rid):
        """A node's store is filling up: every node has its processes collect reference cycles.
        Only a registered node may ask (the node throttles itself; drivers and workers cannot)."""
        if "node_id" not in conn.context:
            return None
        for node in list(self.store.nodes.values()):
            link = node.link
            if link is not None and not link.is_closed():
                with contextlib.suppress(Exception):
                    link.send(P.CollectGarbage())
        return None

    def _on_heartbeat(self, conn, msg: P.Heartbeat, rid):
        alive = self.store.heartbeat(msg.node_id, msg.available, msg.total, msg.pending, msg.stats)
        if rid:
            return P.HeartbeatReply(alive)
        if not alive:  # a one-way report from a node declared dead: it must fence itself
            with contextlib.suppress(Exception):
                conn.send(P.HeartbeatReply(False))
        return None

    def _on_pick_node(self, conn, msg: P.PickNode, rid):
        """Spillback: choose the node for a lease its requester cannot (or should not) grant.
        A request that no node fits but an autoscaler's node type would, or that a node which
        died in the last minute fitted, waits here (listed as a demand) until a node joins, then
        the requester is told to ask again."""
        choice, covered = self.store.pick_node(msg.resources, msg.strategy, msg.requester,
                                               msg.requester_available, msg.batch)
        if choice is None or (isinstance(choice, S.Infeasible) and not msg.strategy
                              and (self.store.launchable_fits(msg.resources)
                                   or self.store.lost_node_fitted(msg.resources))):
            return self._wait_for_node(msg.resources)  # a coroutine: only this case awaits
        if isinstance(choice, S.Infeasible):
            return P.PickNodeReply(error_type="TaskUnschedulableError",
                                   error=f"{msg.description} cannot be scheduled: {choice.reason}. "
                                   f"{S.FIX_HINT}")
        return P.PickNodeReply(choice.node_id, choice.address, covered=covered)

    async def _wait_for_node(self, resources: dict) -> P.PickNodeReply:
        """Listed as a demand until a node joins (or PICK_WAIT_S passes); then the requester
        is told to ask again."""
        key = self.store.wait_for_node(resources)
        fut = asyncio.get_running_loop().create_future()
        self._node_waiters.append(fut)
        try:
            await asyncio.wait_for(fut, PICK_WAIT_S)
        except asyncio.TimeoutError:
            pass
        finally:
            self.store.stop_waiting(key)
        return P.PickNodeReply(wait=True)

    def _on_node_shutdown(self, conn, msg: P.NodeShutdown, rid):
        self._apply(self.store.node_lost(msg.node_id, "it was stopped"))

    def _on_cluster_info(self, conn, msg, rid):
        return P.ClusterInfo([
            {"node_id": n.node_id, "address": n.address, "ip": n.ip, "alive": n.alive,
             "total": n.total, "available": n.available, "labels": n.labels,
             "death_cause": n.death_cause, "store_dir": n.store_dir,
             "local_address": n.local_address, "data_address": n.data_address,
             "pending": n.pending, "stats": n.stats, "idle_s": self.store.idle_s(n.node_id)}
            for n in self.store.nodes.values()], self.store.demands())

    # ------------------------------------------------------------ actors
    def _on_register_actor(self, conn, msg: P.RegisterActor, rid):
        try:
            rec, reused, effects = self.store.register_actor(TaskSpec.from_wire(msg.spec), msg.get_if_exists)
        except CS.NameTakenError as e:
            return P.RegisterActorReply(b"", False, "ValueError", str(e))
        self._apply(effects)
        if reused:
            return P.RegisterActorReply(rec.spec.actor_id, True, spec=rec.spec.to_wire())
        return P.RegisterActorReply(rec.spec.actor_id, False)

    async def _start_actor(self, actor_id: bytes) -> None:
        """Placement attempts for one actor until a node answers its StartActor."""
        while True:
            effects = self.store.place_actor(actor_id)
            start = next((e for e in effects if isinstance(e, CS.StartActorOn)), None)
            if start is None:
                self._apply(effects)
                return
            node = self.store.nodes[start.node_id]
            try:
                reply = await node.link.request(P.StartActor(actor_id, start.spec.to_wire(), start.resources))
            except Exception as e:  # noqa: BLE001  the node died while starting it
                log.info("starting actor on node %s failed: %s", node.node_id.hex()[:8], e)
                self.store.actor_start_failed(actor_id, start.node_id)
                await asyncio.sleep(0.05)
                continue
            self._apply(self.store.actor_start_replied(actor_id, start.node_id, reply))
            return

    def _actor_info(self, rec: CS.ActorRecord) -> P.ActorInfo:
        s = rec.spec
        return P.ActorInfo(s.actor_id, rec.state.value, rec.address, rec.worker_id, rec.node_id,
                           rec.num_restarts, rec.death_cause, s.actor_name, s.namespace,
                           s.function.qualname, rec.pid, rec.creation_error,
                           not (s.is_async or s.max_concurrency > 1 or s.concurrency_groups))

    async def _on_get_actor_info(self, conn, msg: P.GetActorInfo, rid):
        rec = self.store.actors.get(msg.actor_id)
        if rec is None:
            return P.ActorInfo(msg.actor_id, "DEAD", "", b"", b"", 0,
                               "The actor is unknown to this cluster (it was never created here, "
                               "or the head restarted without persistence).")
        if msg.wait_alive and not self.store.actor_settled(msg.actor_id, msg.after_restarts):
            fut = asyncio.get_running_loop().create_future()
            self._actor_waiters.setdefault(msg.actor_id, []).append((fut, msg.after_restarts))
            await fut
        return self._actor_info(rec)

    def _on_get_named_actor(self, conn, msg: P.GetNamedActor, rid):
        rec = self.store.named_actor(msg.namespace, msg.name)
        if rec is None:
            return P.GetNamedActorReply(b"", None)
        return P.GetNamedActorReply(rec.spec.actor_id, rec.spec.to_wire())

    def _on_list_named(self, conn, msg: P.ListNamedActors, rid):
        return P.ListNamedActorsReply(self.store.named_actors(msg.namespace, msg.all_namespaces))

    def _on_list_actors(self, conn, msg, rid):
        out = []
        for rec in self.store.actors.values():
            info = self._actor_info(rec)
            row = {f: getattr(info, f) for f in info._FIELDS if f != "creation_error"}
            s = rec.spec
            row.update(job_id=s.job_id, is_detached=s.detached, required_resources=s.resources,
                       max_restarts=s.max_restarts)
            out.append(row)
        return P.ListActorsReply(out)

    async def _on_kill_actor(self, conn, msg: P.KillActor, rid):
        """kill() returns once the actor's process is gone (its node confirms), so no call its
        caller makes afterwards (an actor call or a compiled graph's execute) reaches it."""
        effects = self.store.kill_actor(msg.actor_id, msg.no_restart, msg.reason)
        kills = [e for e in effects if isinstance(e, CS.KillWorkerOn)] if msg.confirm else []
        self._apply([e for e in effects if e not in kills])
        for e in kills:
            node = self.store.nodes.get(e.node_id)
            if node is None or not node.alive or node.link is None:
                continue
            with contextlib.suppress(Exception):
                await node.link.request(P.KillWorker(e.worker_id, e.reason), timeout_s=KILL_WAIT_S)
        return P.Ack()

    def _on_worker_died(self, conn, msg: P.WorkerDied, rid):
        self._apply(self.store.worker_died(msg.worker_id, msg.actor_id, msg.reason))
        return None

    # ------------------------------------------------------------ kv
    def _on_kv_put(self, conn, msg: P.KvPut, rid):
        existed, effects = self.store.kv_put(msg.namespace, msg.key, msg.value, msg.overwrite)
        self._apply(effects)
        return P.KvReply(existed)

    def _on_kv_get(self, conn, msg: P.KvGet, rid):
        return P.KvReply(self.store.kv_get(msg.namespace, msg.key))

    def _on_kv_del(self, conn, msg: P.KvDel, rid):
        deleted, effects = self.store.kv_del(msg.namespace, msg.key, msg.by_prefix)
        self._apply(effects)
        return P.KvReply(deleted)

    def _on_kv_keys(self, conn, msg: P.KvKeys, rid):
        return P.KvReply(self.store.kv_keys(msg.namespace, msg.prefix))

    def _on_publish_autoscaler_view(self, conn, msg: P.PublishAutoscalerView, rid):
        self._apply(self.store.publish_autoscaler_view(msg.view))
        return P.KvReply(None)

    def _on_get_autoscaler_view(self, conn, msg: P.GetAutoscalerView, rid):
        return P.KvReply(self.store.autoscaler_view())

    def _on_request_resources(self, conn, msg: P.RequestResources, rid):
        self._apply(self.store.request_resources(msg.request))
        return P.KvReply(None)

    # ------------------------------------------------------------ placement groups
    def _on_create_pg(self, conn, msg: P.CreatePlacementGroup, rid):
        self._apply(self.store.create_placement_group(msg.pg_id, msg.bundles, msg.strategy, msg.name,
                                                      msg.namespace, msg.detached))
        return P.Ack()

    async def _place_pg(self, pg_id: bytes) -> None:
        """Placement attempts for one group until the store settles it."""
        while True:
            effects = self.store.plan_placement_group(pg_id)
            reserve = _take(effects, CS.ReserveBundles)
            if reserve is not None:
                reserved_on, ok = await self._reserve(reserve)
                effects = self.store.bundles_reserved(reserve, reserved_on, ok)
            retry = _take(effects, CS.RetryPlacement)
            self._apply(effects)
            if retry is None:
                return
            await asyncio.sleep(retry.delay_s)

    async def _reserve(self, plan: CS.ReserveBundles) -> tuple[list[bytes], bool]:
        """Reserve on each node in turn, stopping at the first refusal or failure."""
        reserved_on: list[bytes] = []
        for nid, items in plan.by_node.items():
            try:
                reply = await self.store.nodes[nid].link.request(P.ReserveBundles(plan.pg_id, items))
            except Exception:  # noqa: BLE001
                return reserved_on, False
            if not reply.ok:
                return reserved_on, False
            reserved_on.append(nid)
        return reserved_on, True

    def _on_remove_pg(self, conn, msg: P.RemovePlacementGroup, rid):
        self._apply(self.store.remove_placement_group(msg.pg_id))
        return P.Ack()

    async def _on_get_pg(self, conn, msg: P.GetPlacementGroup, rid):
        pg = self.store.find_placement_group(msg.pg_id, msg.name, msg.namespace)
        if pg is None:
            return P.PlacementGroupInfo(msg.pg_id, "REMOVED", [], "", [], "", "unknown placement group")
        if msg.wait_ready and pg.state is CS.PlacementGroupState.PENDING:
            fut = asyncio.get_running_loop().create_future()
            self._pg_waiters.setdefault(pg.pg_id, []).append(fut)
            try:
                await asyncio.wait_for(fut, None if msg.timeout_s < 0 else msg.timeout_s)
            except asyncio.TimeoutError:
                pass
        return _pg_info(pg)

    def _on_list_pgs(self, conn, msg, rid):
        return P.ListPlacementGroupsReply([
            {f: getattr(_pg_info(pg), f) for f in P.PlacementGroupInfo._FIELDS}
            for pg in self.store.pgs.values()])

    # ------------------------------------------------------------ jobs
    def _on_register_job(self, conn, msg: P.RegisterJob, rid):
        self._apply(self.store.register_job(msg.job_id, msg.driver_address, msg.namespace, msg.entrypoint,
                                            int(time.time() * 1000), msg.submission_id, msg.pid))
        conn.on_close.append(lambda c: self._on_driver_gone(msg.job_id))
        return P.RegisterJobReply(msg.job_id)

    def _on_driver_gone(self, job_id: bytes) -> None:
        self._apply(self.store.job_ended(job_id, int(time.time() * 1000)))
        # events still on their way (a worker's last flush) get a grace period; rows of the job
        # that are still open after it ended with the driver, and say so
        asyncio.get_running_loop().call_later(
            self.config.task_events_job_end_grace_s, lambda: self.task_events.close_job(
                job_id, time.time(), "its job's driver exited before the task reported its end"))

    def _on_list_jobs(self, conn, msg, rid):
        return P.ListJobsReply([{"job_id": job_id, **job} for job_id, job in self.store.jobs.items()])

    # ------------------------------------------------------------ task events (state API)
    def _on_task_events(self, conn, msg: P.TaskEvents, rid):
        self.task_events.add(msg.events, msg.descs, msg.dropped, conn.context.get("job_id", b""))
        return P.Ack() if rid else None  # a worker being stopped waits until its events are here

    def _on_get_task_events(self, conn, msg: P.GetTaskEvents, rid):
        return P.GetTaskEventsReply(self.task_events.rows(msg.job_id, msg.limit),
                                    {k.hex(): v for k, v in self.task_events.dropped.items()})


def _pg_info(pg: CS.PlacementGroupRecord) -> P.PlacementGroupInfo:
    return P.PlacementGroupInfo(pg.pg_id, pg.state.value, pg.bundles, pg.strategy, pg.bundle_nodes,
                                pg.name, pg.error)


def _take(effects: list, kind: type):
    """Remove and return the first effect of `kind` (the ones an attempt loop acts on itself)."""
    for i, e in enumerate(effects):
        if isinstance(e, kind):
            return effects.pop(i)
    return None


def raylite_version() -> str:
    from importlib import metadata

    try:
        return metadata.version("raylite")
    except Exception:  # noqa: BLE001  running from a source tree
        return "0+unknown"
