"""The head: the cluster's control store served over rpc.

Tables: nodes, actors (named, detached), placement groups, the key-value store
and jobs. The head places actors and placement-group bundles on nodes (the
node daemons run them), restarts actors whose worker died, and declares nodes
dead when their connection drops or their heartbeats stop (then tells every
client, so links to that node that may hang are dropped). A node that cannot
grant a lease asks the head which node should (PickNode: spillback). With a
Persistence store every table change is written through, and a restarted head
reloads the tables and gives the nodes one dead-timeout to reconnect.

ActorState: PENDING -> ALIVE [-> RESTARTING -> ALIVE]* -> DEAD (terminal).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from dataclasses import dataclass, field

import msgpack

from raylite._core import protocol as P
from raylite._core import resources as R
from raylite._core import scheduling as S
from raylite._core.clock import Clock, MonotonicClock
from raylite._core.config import Config
from raylite._core.ids import ActorID
from raylite._core.persistence import Persistence
from raylite._core.task_spec import TaskSpec
from raylite._core.transport import rpc

log = logging.getLogger("raylite.head")


@dataclass
class NodeRecord:
    node_id: bytes
    address: str
    ip: str
    total: dict
    available: dict
    labels: dict
    store_dir: str
    conn: rpc.Connection | None
    alive: bool = True
    last_seen: float = 0.0
    death_cause: str = ""
    local_address: str = ""
    data_address: str = ""
    pending: list = field(default_factory=list)  # resource demands queued on the node

    def view(self) -> S.NodeView:
        return S.NodeView(self.node_id, self.total, self.available, self.alive)


@dataclass
class ActorRecord:
    spec: TaskSpec
    state: str = "PENDING"
    address: str = ""
    worker_id: bytes = b""
    node_id: bytes = b""
    pid: int = 0
    num_restarts: int = 0
    death_cause: str = ""
    creation_error: object = None
    no_restart: bool = False
    waiters: list = field(default_factory=list)


@dataclass
class PlacementGroupRecord:
    pg_id: bytes
    bundles: list
    strategy: str
    name: str
    namespace: str
    detached: bool
    state: str = "PENDING"
    bundle_nodes: list = field(default_factory=list)
    error: str = ""
    waiters: list = field(default_factory=list)

    def info(self) -> P.PlacementGroupInfo:
        return P.PlacementGroupInfo(self.pg_id, self.state, self.bundles, self.strategy,
                                    self.bundle_nodes, self.name, self.error)


class Head:
    def __init__(self, config: Config, token: str, clock: Clock | None = None,
                 persist: Persistence | None = None) -> None:
        self.config = config
        self.token = token
        self.clock = clock or MonotonicClock()
        self.persist = persist
        self._clients: set[rpc.Connection] = set()
        self._liveness: asyncio.Task | None = None
        self.nodes: dict[bytes, NodeRecord] = {}
        self.actors: dict[bytes, ActorRecord] = {}
        self.named: dict[tuple[str, str], bytes] = {}
        self.kv: dict[tuple[str, bytes], bytes] = {}
        self.pgs: dict[bytes, PlacementGroupRecord] = {}
        self.jobs: dict[bytes, dict] = {}
        self._spread = 0
        self._servers: list[asyncio.AbstractServer] = []
        self._bg: set[asyncio.Task] = set()
        self.handlers = {
            P.RegisterNode: self._on_register_node,
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
            P.CreatePlacementGroup: self._on_create_pg,
            P.RemovePlacementGroup: self._on_remove_pg,
            P.GetPlacementGroup: self._on_get_pg,
            P.ListPlacementGroups: self._on_list_pgs,
            P.GetClusterInfo: self._on_cluster_info,
            P.RegisterJob: self._on_register_job,
            P.PickNode: self._on_pick_node,
        }
        if persist is not None:
            self._restore(persist)

    async def listen(self, address: str) -> None:
        self._servers.append(await rpc.listen(address, self.handlers, token=self.token,
                                              on_connect=self._on_connect))
        if self._liveness is None:
            self._liveness = asyncio.get_running_loop().create_task(self._liveness_loop())
            self._resume_restored()

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
            if now - last > max(1.0, 4 * interval):
                # this loop itself was stalled, so heartbeats that arrived meanwhile are unread:
                # give every node a fresh timeout rather than declare them dead
                for n in self.nodes.values():
                    n.last_seen = max(n.last_seen, now)
            last = now
            for node_id in expired_nodes(self.nodes, now, self.config.node_dead_timeout_s):
                self._node_lost(node_id, f"no heartbeat for {self.config.node_dead_timeout_s:g}s "
                                "(its host is down or its network link is cut)")

    def _spawn(self, coro) -> None:
        t = asyncio.get_running_loop().create_task(coro)
        self._bg.add(t)
        t.add_done_callback(self._bg.discard)

    # ------------------------------------------------------------ persistence
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

    def _save_node(self, n: NodeRecord) -> None:
        self._save("nodes", n.node_id, [n.address, n.ip, n.total, n.labels, n.store_dir, n.alive,
                                        n.death_cause, n.local_address, n.data_address])

    def _save_actor(self, a: ActorRecord) -> None:
        self._save("actors", a.spec.actor_id, [a.spec.to_wire(), a.state, a.address, a.worker_id,
                                               a.node_id, a.pid, a.num_restarts, a.death_cause,
                                               a.no_restart])

    def _save_pg(self, pg: PlacementGroupRecord) -> None:
        if pg.state == "REMOVED":
            self._drop("pgs", pg.pg_id)
            return
        self._save("pgs", pg.pg_id, [pg.bundles, pg.strategy, pg.name, pg.namespace, pg.detached,
                                     pg.state, pg.bundle_nodes])

    def _restore(self, store: Persistence) -> None:
        """Reload tables after a restart; nodes get one dead-timeout to reconnect."""
        now = self.clock.monotonic()
        for node_id, v in store.load("nodes"):
            address, ip, total, labels, store_dir, alive, cause, local, data = v
            self.nodes[node_id] = NodeRecord(node_id, address, ip, total, dict(total) if alive else {},
                                             labels, store_dir, None, alive, now, cause, local, data)
        for actor_id, v in store.load("actors"):
            spec_wire, state, address, worker_id, node_id, pid, restarts, cause, no_restart = v
            self.actors[actor_id] = ActorRecord(TaskSpec.from_wire(spec_wire), state, address, worker_id,
                                                node_id, pid, restarts, cause, no_restart=no_restart)
        for k, actor_id in store.load("named"):
            ns, name = _unkey(k)
            if actor_id in self.actors:
                self.named[(ns, name)] = actor_id
        for k, value in store.load("kv"):
            ns, key = _unkey(k)
            self.kv[(ns, key)] = value
        for pg_id, v in store.load("pgs"):
            bundles, strategy, name, ns, detached, state, bundle_nodes = v
            self.pgs[pg_id] = PlacementGroupRecord(pg_id, bundles, strategy, name, ns, detached, state,
                                                   bundle_nodes)
        for job_id, v in store.load("jobs"):
            self.jobs[job_id] = {**v, "alive": False}
        log.warning("head restored %d nodes, %d actors, %d kv entries", len(self.nodes), len(self.actors),
                    len(self.kv))
        self._restored = True

    def _resume_restored(self) -> None:
        if not getattr(self, "_restored", False):
            return
        self._restored = False
        for actor_id, a in self.actors.items():
            if a.state in ("PENDING", "RESTARTING"):
                self._spawn(self._schedule_actor(actor_id))
        self._retry_pending()

    # ------------------------------------------------------------ nodes
    def _on_register_node(self, conn: rpc.Connection, msg: P.RegisterNode, rid: int):
        if msg.version and msg.version != raylite_version():
            return P.RegisterNodeReply(False, f"version mismatch: the head runs raylite {raylite_version()}, "
                                       f"this node runs {msg.version}; install the same raylite version "
                                       "on every node")
        old = self.nodes.get(msg.node_id)
        if old is not None and not old.alive:
            return P.RegisterNodeReply(False, f"node {msg.node_id.hex()[:8]} was declared dead "
                                       f"({old.death_cause}); rejoin under a new node id")
        rec = NodeRecord(msg.node_id, msg.address, msg.ip, dict(msg.resources), dict(msg.resources),
                         dict(msg.labels), msg.store_dir, conn, last_seen=self.clock.monotonic(),
                         local_address=msg.local_address, data_address=msg.data_address)
        self.nodes[msg.node_id] = rec
        conn.context["node_id"] = msg.node_id
        conn.on_close.append(lambda c: self._node_conn_closed(msg.node_id, c))
        self._save_node(rec)
        self._retry_pending()
        return P.RegisterNodeReply(True)

    def _node_conn_closed(self, node_id: bytes, conn: rpc.Connection) -> None:
        rec = self.nodes.get(node_id)
        if rec is not None and rec.conn is conn:
            self._node_lost(node_id, "its connection to the head closed (its processes died)")

    def _on_heartbeat(self, conn, msg: P.Heartbeat, rid):
        rec = self.nodes.get(msg.node_id)
        if rec is not None and rec.alive:
            rec.available = dict(msg.available)
            if msg.total is not None:
                rec.total = dict(msg.total)
            rec.pending = list(msg.pending)
            rec.last_seen = self.clock.monotonic()
        if rid:
            return P.HeartbeatReply(rec is None or rec.alive)
        return None

    def _on_pick_node(self, conn, msg: P.PickNode, rid):
        """Spillback: choose the node for a lease its requester cannot (or should not) grant."""
        views = self.alive_views()
        choice = S.pick_node(msg.resources, views, msg.strategy, local_node=msg.requester,
                             spread_counter=self._spread)
        if msg.strategy and msg.strategy[0] == "SPREAD":
            self._spread += 1
        if isinstance(choice, S.Infeasible):
            return P.PickNodeReply(error_type="TaskUnschedulableError",
                                   error=f"{msg.description} cannot be scheduled: {choice.reason}. Lower "
                                   "the request (num_cpus/num_gpus/resources) or start a node that has it.")
        if choice is None:  # nobody has room now: queue where it fits, the requester first
            feasible = S.feasible_nodes(msg.resources, views)
            mine = [n for n in feasible if n.node_id == msg.requester]
            choice = mine[0] if mine else feasible[self._spread % len(feasible)]
            self._spread += 1
        rec = self.nodes[choice.node_id]
        R.subtract(rec.available, msg.resources)  # optimistic until its next heartbeat
        return P.PickNodeReply(rec.node_id, rec.address)

    def _on_node_shutdown(self, conn, msg: P.NodeShutdown, rid):
        self._node_lost(msg.node_id, "it was stopped")

    def _node_lost(self, node_id: bytes, cause: str) -> None:
        rec = self.nodes.get(node_id)
        if rec is None or not rec.alive:
            return
        rec.alive = False
        rec.death_cause = cause
        rec.available = {}
        rec.pending = []
        log.warning("node %s is dead: %s", node_id.hex()[:8], cause)
        self._save_node(rec)
        if rec.conn is not None and not rec.conn.is_closed():
            # a partitioned node may come back: it must learn it is dead and fence itself
            with contextlib.suppress(Exception):
                rec.conn.send(P.HeartbeatReply(False))
            rec.conn.abort()
        died = P.NodeDied(node_id, rec.address, cause)
        for c in list(self._clients):
            if c.peer_role in ("driver", "worker") and not c.is_closed():
                with contextlib.suppress(Exception):
                    c.send(died)
        for actor_id, a in list(self.actors.items()):
            if a.node_id == node_id and a.state in ("ALIVE", "PENDING", "RESTARTING"):
                self._actor_died(actor_id, f"its node {node_id.hex()[:8]} died ({cause})")
        for pg in self.pgs.values():
            if pg.state == "CREATED" and node_id in pg.bundle_nodes:
                pg.state = "PENDING"
                pg.bundle_nodes = []
                self._spawn(self._place_pg(pg))

    def alive_views(self) -> list[S.NodeView]:
        return [n.view() for n in self.nodes.values() if n.alive]

    def _retry_pending(self) -> None:
        for pg in self.pgs.values():
            if pg.state in ("PENDING", "INFEASIBLE"):
                self._spawn(self._place_pg(pg))

    # ------------------------------------------------------------ actors
    def _on_register_actor(self, conn, msg: P.RegisterActor, rid):
        spec = TaskSpec.from_wire(msg.spec)
        if spec.actor_name:
            key = (spec.namespace, spec.actor_name)
            existing = self.named.get(key)
            if existing is not None and self.actors[existing].state != "DEAD":
                if msg.get_if_exists:
                    return P.RegisterActorReply(existing, True, spec=self.actors[existing].spec.to_wire())
                return P.RegisterActorReply(b"", False, "ValueError",
                                            f"The name {spec.actor_name!r} (namespace={spec.namespace!r}) "
                                            "is already taken by a live actor. Pick another name, kill the "
                                            "existing actor, or pass get_if_exists=True to reuse it.")
            self.named[key] = spec.actor_id
            self._save("named", _key(*key), spec.actor_id)
        rec = ActorRecord(spec)
        self.actors[spec.actor_id] = rec
        self._save_actor(rec)
        self._spawn(self._schedule_actor(spec.actor_id))
        return P.RegisterActorReply(spec.actor_id, False)

    async def _schedule_actor(self, actor_id: bytes) -> None:
        rec = self.actors.get(actor_id)
        while rec is not None and rec.state in ("PENDING", "RESTARTING"):
            spec = rec.spec
            need = dict(spec.resources)
            # actors without an explicit CPU request need one CPU to be placed, hold none after
            placement_need = need if need.get("CPU") else {**need, "CPU": 10000}
            views = self.alive_views()
            choice = S.pick_node(placement_need if spec.resources.get("CPU") is None else need,
                                 views, spec.strategy, spread_counter=self._spread)
            if isinstance(choice, S.Infeasible) and not spec.resources.get("CPU"):
                choice = S.pick_node(need, views, spec.strategy, spread_counter=self._spread)
            if isinstance(choice, S.Infeasible):
                self._actor_dead(actor_id, f"The actor {spec.function.qualname} cannot be scheduled: "
                                 f"{choice.reason}. Lower its resource request or add nodes with "
                                 "those resources.", unschedulable=True)
                return
            if choice is None:  # no room right now: queue it on a node that can ever fit it
                feasible = S.feasible_nodes(need, views)
                choice = feasible[self._spread % len(feasible)]
            self._spread += 1
            node = self.nodes[choice.node_id]
            try:
                reply = await node.conn.request(P.StartActor(actor_id, spec.to_wire(), need))
            except Exception as e:  # noqa: BLE001  the node died while starting it
                log.info("starting actor on node %s failed: %s", node.node_id.hex()[:8], e)
                await asyncio.sleep(0.05)
                continue
            rec = self.actors.get(actor_id)
            if rec is None or rec.state == "DEAD":
                return
            if reply.ok:
                rec.state = "ALIVE"
                rec.address = reply.address
                rec.worker_id = reply.worker_id
                rec.node_id = node.node_id
                rec.pid = reply.pid
                self._notify(rec)
                return
            if reply.system_error:
                self._actor_dead(actor_id, reply.system_error)
            else:
                rec.creation_error = reply.error
                self._actor_dead(actor_id, "The actor's constructor (__init__) raised an exception.")
            return

    def _notify(self, rec: ActorRecord) -> None:
        self._save_actor(rec)
        waiters, rec.waiters = rec.waiters, []
        for fut, after in waiters:
            if fut.done():
                continue
            if rec.state == "DEAD" or (rec.state == "ALIVE" and rec.num_restarts > after):
                fut.set_result(None)
            else:
                rec.waiters.append((fut, after))

    def _actor_info(self, rec: ActorRecord) -> P.ActorInfo:
        s = rec.spec
        return P.ActorInfo(s.actor_id, rec.state, rec.address, rec.worker_id, rec.node_id,
                           rec.num_restarts, rec.death_cause, s.actor_name, s.namespace,
                           s.function.qualname, rec.pid, rec.creation_error)

    async def _on_get_actor_info(self, conn, msg: P.GetActorInfo, rid):
        rec = self.actors.get(msg.actor_id)
        if rec is None:
            return P.ActorInfo(msg.actor_id, "DEAD", "", b"", b"", 0,
                               "The actor is unknown to this cluster (it was never created here, "
                               "or the head restarted without persistence).")
        if msg.wait_alive and not (rec.state == "DEAD" or (rec.state == "ALIVE" and rec.num_restarts > msg.after_restarts)):
            fut = asyncio.get_running_loop().create_future()
            rec.waiters.append((fut, msg.after_restarts))
            await fut
        return self._actor_info(rec)

    def _on_get_named_actor(self, conn, msg: P.GetNamedActor, rid):
        actor_id = self.named.get((msg.namespace, msg.name))
        if actor_id is None or self.actors[actor_id].state == "DEAD":
            return P.GetNamedActorReply(b"", None)
        return P.GetNamedActorReply(actor_id, self.actors[actor_id].spec.to_wire())

    def _on_list_named(self, conn, msg: P.ListNamedActors, rid):
        out = []
        for (ns, name), actor_id in self.named.items():
            if self.actors[actor_id].state == "DEAD":
                continue
            if msg.all_namespaces or ns == msg.namespace:
                out.append({"name": name, "namespace": ns})
        return P.ListNamedActorsReply(out)

    def _on_list_actors(self, conn, msg, rid):
        out = []
        for rec in self.actors.values():
            info = self._actor_info(rec)
            d = {f: getattr(info, f) for f in info._FIELDS if f != "creation_error"}
            out.append(d)
        return P.ListActorsReply(out)

    def _on_kill_actor(self, conn, msg: P.KillActor, rid):
        rec = self.actors.get(msg.actor_id)
        if rec is None:
            return P.Ack()
        if msg.no_restart:
            rec.no_restart = True
        if rec.state == "ALIVE" and rec.node_id in self.nodes and self.nodes[rec.node_id].alive:
            node = self.nodes[rec.node_id]
            with contextlib.suppress(Exception):
                node.conn.send(P.KillWorker(rec.worker_id, "killed by raylite.kill()"))
        elif rec.state in ("PENDING", "RESTARTING") and msg.no_restart:
            self._actor_dead(msg.actor_id, "The actor was killed by raylite.kill() before it started.")
        return P.Ack()

    def _on_worker_died(self, conn, msg: P.WorkerDied, rid):
        if msg.actor_id:
            rec = self.actors.get(msg.actor_id)
            if rec is not None and rec.worker_id == msg.worker_id:
                self._actor_died(msg.actor_id, msg.reason)
        # actors owned by the dead process die with it unless detached
        for actor_id, rec in list(self.actors.items()):
            if rec.spec.owner_worker_id == msg.worker_id and not rec.spec.detached and rec.state != "DEAD":
                rec.no_restart = True
                self._kill_everywhere(rec)
                self._actor_dead(actor_id, "The actor's owner (the process that created it) exited, "
                                 "so it was stopped. Use lifetime='detached' to keep an actor alive "
                                 "after its creator exits.")
        return None

    def _kill_everywhere(self, rec: ActorRecord) -> None:
        node = self.nodes.get(rec.node_id)
        if node is not None and node.alive and rec.worker_id:
            try:
                node.conn.send(P.KillWorker(rec.worker_id, "owner died"))
            except Exception:  # noqa: BLE001
                pass

    def _actor_died(self, actor_id: bytes, reason: str) -> None:
        """The actor's process is gone: restart it if allowed, else mark it DEAD."""
        rec = self.actors[actor_id]
        if rec.state == "DEAD":
            return
        limit = rec.spec.max_restarts
        if not rec.no_restart and (limit == -1 or rec.num_restarts < limit):
            rec.state = "RESTARTING"
            rec.num_restarts += 1
            rec.address = ""
            rec.worker_id = b""
            rec.node_id = b""
            self._save_actor(rec)
            self._spawn(self._schedule_actor(actor_id))
            return
        self._actor_dead(actor_id, f"The actor died: {reason}")

    def _actor_dead(self, actor_id: bytes, cause: str, unschedulable: bool = False) -> None:
        rec = self.actors[actor_id]
        rec.state = "DEAD"
        rec.death_cause = ("UNSCHEDULABLE: " if unschedulable else "") + cause
        rec.address = ""
        self._notify(rec)

    # ------------------------------------------------------------ kv
    def _on_kv_put(self, conn, msg: P.KvPut, rid):
        key = (msg.namespace, msg.key)
        existed = key in self.kv
        if msg.overwrite or not existed:
            self.kv[key] = msg.value
            self._save("kv", _key(*key), msg.value)
        return P.KvReply(existed)

    def _on_kv_get(self, conn, msg: P.KvGet, rid):
        return P.KvReply(self.kv.get((msg.namespace, msg.key)))

    def _on_kv_del(self, conn, msg: P.KvDel, rid):
        if msg.by_prefix:
            keys = [k for k in self.kv if k[0] == msg.namespace and k[1].startswith(msg.key)]
        else:
            keys = [(msg.namespace, msg.key)] if (msg.namespace, msg.key) in self.kv else []
        for k in keys:
            del self.kv[k]
            self._drop("kv", _key(*k))
        return P.KvReply(len(keys))

    def _on_kv_keys(self, conn, msg: P.KvKeys, rid):
        return P.KvReply([k[1] for k in self.kv if k[0] == msg.namespace and k[1].startswith(msg.prefix)])

    # ------------------------------------------------------------ placement groups
    def _on_create_pg(self, conn, msg: P.CreatePlacementGroup, rid):
        pg = PlacementGroupRecord(msg.pg_id, msg.bundles, msg.strategy, msg.name, msg.namespace, msg.detached)
        self.pgs[msg.pg_id] = pg
        self._save_pg(pg)
        self._spawn(self._place_pg(pg))
        return P.Ack()

    async def _place_pg(self, pg: PlacementGroupRecord) -> None:
        while pg.state in ("PENDING", "INFEASIBLE"):
            placed = S.place_bundles(pg.bundles, pg.strategy, self.alive_views())
            if isinstance(placed, S.Infeasible):
                pg.state = "INFEASIBLE"
                pg.error = placed.reason
                self._wake_pg(pg)
                return
            if placed is None:
                await asyncio.sleep(0.05)
                continue
            by_node: dict[bytes, list] = {}
            for i, nid in enumerate(placed):
                by_node.setdefault(nid, []).append([i, pg.bundles[i]])
            ok = True
            done: list[bytes] = []
            for nid, items in by_node.items():
                try:
                    reply = await self.nodes[nid].conn.request(P.ReserveBundles(pg.pg_id, items))
                    ok = ok and reply.ok
                    if reply.ok:
                        done.append(nid)
                except Exception:  # noqa: BLE001
                    ok = False
                if not ok:
                    break
            if pg.state == "REMOVED":
                for nid in done:
                    self._release_on(nid, pg, [i for i, n in enumerate(placed) if n == nid])
                return
            if ok:
                pg.state = "CREATED"
                pg.bundle_nodes = placed
                self._wake_pg(pg)
                return
            for nid in done:
                self._release_on(nid, pg, [i for i, n in enumerate(placed) if n == nid])
            await asyncio.sleep(0.05)

    def _release_on(self, node_id: bytes, pg: PlacementGroupRecord, indexes: list) -> None:
        node = self.nodes.get(node_id)
        if node is not None and node.alive:
            try:
                node.conn.send(P.ReleaseBundles(pg.pg_id, indexes))
            except Exception:  # noqa: BLE001
                pass

    def _wake_pg(self, pg: PlacementGroupRecord) -> None:
        self._save_pg(pg)
        waiters, pg.waiters = pg.waiters, []
        for fut in waiters:
            if not fut.done():
                fut.set_result(None)

    def _on_remove_pg(self, conn, msg: P.RemovePlacementGroup, rid):
        pg = self.pgs.get(msg.pg_id)
        if pg is None:
            return P.Ack()
        prev = pg.state
        pg.state = "REMOVED"
        if prev == "CREATED":
            nodes = set(pg.bundle_nodes)
            for nid in nodes:
                self._release_on(nid, pg, [i for i, n in enumerate(pg.bundle_nodes) if n == nid])
            for i, nid in enumerate(pg.bundle_nodes):  # optimistic until the node's next heartbeat
                if nid in self.nodes and self.nodes[nid].alive:
                    R.add(self.nodes[nid].available, pg.bundles[i])
        # actors placed in the group die with it
        hexid = pg.pg_id.hex()
        for actor_id, rec in list(self.actors.items()):
            if rec.state != "DEAD" and any(hexid in k for k in rec.spec.resources):
                rec.no_restart = True
                self._kill_everywhere(rec)
                self._actor_dead(actor_id, "Its placement group was removed.")
        self._wake_pg(pg)
        return P.Ack()

    async def _on_get_pg(self, conn, msg: P.GetPlacementGroup, rid):
        pg = self.pgs.get(msg.pg_id)
        if pg is None and msg.name:
            pg = next((p for p in self.pgs.values() if p.name == msg.name and p.namespace == msg.namespace
                       and p.state != "REMOVED"), None)
        if pg is None:
            return P.PlacementGroupInfo(msg.pg_id, "REMOVED", [], "", [], "", "unknown placement group")
        if msg.wait_ready and pg.state == "PENDING":
            fut = asyncio.get_running_loop().create_future()
            pg.waiters.append(fut)
            try:
                await asyncio.wait_for(fut, None if msg.timeout_s < 0 else msg.timeout_s)
            except asyncio.TimeoutError:
                pass
        return pg.info()

    def _on_list_pgs(self, conn, msg, rid):
        return P.ListPlacementGroupsReply([
            {f: getattr(pg.info(), f) for f in P.PlacementGroupInfo._FIELDS} for pg in self.pgs.values()])

    # ------------------------------------------------------------ cluster / jobs
    def _on_cluster_info(self, conn, msg, rid):
        return P.ClusterInfo([
            {"node_id": n.node_id, "address": n.address, "ip": n.ip, "alive": n.alive,
             "total": n.total, "available": n.available, "labels": n.labels,
             "death_cause": n.death_cause, "store_dir": n.store_dir,
             "local_address": n.local_address, "data_address": n.data_address,
             "pending": n.pending}
            for n in self.nodes.values()])

    def _on_register_job(self, conn, msg: P.RegisterJob, rid):
        self.jobs[msg.job_id] = {"driver_address": msg.driver_address, "namespace": msg.namespace,
                                 "entrypoint": msg.entrypoint, "alive": True}
        self._save("jobs", msg.job_id, {k: v for k, v in self.jobs[msg.job_id].items() if k != "alive"})
        conn.on_close.append(lambda c: self.jobs[msg.job_id].update(alive=False))
        return P.RegisterJobReply(msg.job_id)


def new_actor_id() -> bytes:
    return ActorID.from_random()


def expired_nodes(nodes: dict[bytes, NodeRecord], now: float, timeout_s: float) -> list[bytes]:
    """Alive nodes whose last heartbeat is older than timeout_s (pure; tested with plain calls).

    Nodes on a unix socket share the head's machine (a local cluster: the same process), so
    only their connection closing says they died."""
    return [nid for nid, n in nodes.items()
            if n.alive and now - n.last_seen > timeout_s and not n.address.startswith("unix://")]


def raylite_version() -> str:
    from importlib import metadata

    try:
        return metadata.version("raylite")
    except Exception:  # noqa: BLE001  running from a source tree
        return "0+unknown"


def _key(*parts) -> bytes:
    return msgpack.packb(list(parts), use_bin_type=True)


def _unkey(data: bytes) -> list:
    return msgpack.unpackb(data, raw=False)
