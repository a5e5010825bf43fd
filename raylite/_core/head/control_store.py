"""The head's tables and their transitions, with no I/O: the head's pure part.

Tables: nodes (and their liveness), actors (lifecycle, restarts), named actors by
namespace, placement groups, the key-value store and jobs. Each method takes an
event or a request, changes the tables, and returns what the I/O shell (head.py)
must do about it as a list of small effect objects (send this, persist that,
start that actor there). Time comes from an injected clock, so liveness is tested
by advancing a FakeClock, not by sleeping.

Persisted rows are built here (`Persist`/`Unpersist` effects) and read back by
`restore()`, so the row layout lives next to the records it mirrors.
"""

from __future__ import annotations

import enum
from collections import OrderedDict
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

import msgpack  # type: ignore[import-untyped]

from raylite._core import protocol as P
from raylite._core import resources as R
from raylite._core import scheduling as S
from raylite._core.clock import Clock
from raylite._core.strategy import DEFAULT as DEFAULT_STRATEGY
from raylite._core.strategy import Strategy
from raylite._core.strategy import decode as decode_strategy
from raylite._core.task_spec import TaskSpec

Resources = dict[str, int]  # fixed-point amounts by resource name (resources.py)

# a placement attempt that must wait (no room now, or a node refused) tries again after this
PLACEMENT_RETRY_S = 0.05

# The cluster autoscaler's KV rows (raylite.autoscaler; written through P.PublishAutoscalerView and
# P.RequestResources, the only names for them outside this module): its published view (the node types it
# can launch, as JSON {"node_types": {name: {"resources": {...}}}, ...}) and the standing
# `request_resources()` demand. While a view is published, a request that no node fits now but
# a launchable node type would stays pending instead of failing as infeasible (Ray's behaviour
# with an autoscaler).
AUTOSCALER_NAMESPACE = "__autoscaler__"
AUTOSCALER_VIEW_KEY = b"view"
AUTOSCALER_REQUEST_KEY = b"request_resources"
# an autoscaler republishes its view every round; one not refreshed for this long is gone (it
# crashed or was stopped without withdrawing it), and requests waiting on it fail as infeasible
AUTOSCALER_VIEW_TTL_S = 60.0
# After a node dies, a request only it fitted waits this long for a node that fits to join
# (a restarted machine, a replacement pod) before it fails as unschedulable: a task retried or
# rebuilt after a node loss is not failed in the seconds its replacement takes to start.
NODE_REPLACEMENT_WAIT_S = 60.0


class ActorState(enum.Enum):
    """PENDING -> ALIVE [-> RESTARTING -> ALIVE]* -> DEAD. DEAD is terminal and may be
    reached from any state; RESTARTING happens at most spec.max_restarts times (-1: always)."""

    PENDING = "PENDING"
    ALIVE = "ALIVE"
    RESTARTING = "RESTARTING"
    DEAD = "DEAD"


class PlacementGroupState(enum.Enum):
    """PENDING -> (CREATED | INFEASIBLE); INFEASIBLE -> PENDING retried when a node joins;
    CREATED -> PENDING when a node holding a bundle dies; any -> REMOVED (terminal)."""

    PENDING = "PENDING"
    CREATED = "CREATED"
    INFEASIBLE = "INFEASIBLE"
    REMOVED = "REMOVED"


_LIVE_ACTOR = (ActorState.ALIVE, ActorState.PENDING, ActorState.RESTARTING)
_UNPLACED_PG = (PlacementGroupState.PENDING, PlacementGroupState.INFEASIBLE)


# ------------------------------------------------------------------ records
@dataclass
class NodeRecord:
    """What the head knows of one node now."""

    node_id: bytes
    address: str
    ip: str
    total: Resources
    available: Resources
    labels: dict[str, str]
    store_dir: str
    # the shell's handle of the connection the node registered on; opaque here, compared
    # only by identity so that the close of a stale connection is ignored
    link: Any = None
    alive: bool = True
    last_seen: float = 0.0
    death_cause: str = ""
    local_address: str = ""
    data_address: str = ""
    pending: list[Any] = field(default_factory=list)  # resource demands queued on the node
    stats: dict[str, Any] = field(default_factory=dict)  # latest machine/worker statistics
    idle_since: float | None = None  # monotonic time it last became idle; None while busy
    died_at: float | None = None  # monotonic time the head declared it dead
    # actors sent here (StartActorOn) whose start the node has not answered yet: their resources
    # stay out of `available`, since a load report the node made before the StartActor reached
    # it would hand them out again (two 1-CPU actors on two 1-CPU nodes both landed on one node
    # and the second queued there forever)
    placing: dict[bytes, Resources] = field(default_factory=dict)

    def view(self) -> S.NodeView:
        return S.NodeView(self.node_id, self.total, self.available, self.alive)


@dataclass
class ActorRecord:
    """What the head knows of one actor now; `spec` is what the user asked for."""

    spec: TaskSpec
    state: ActorState = ActorState.PENDING
    address: str = ""
    worker_id: bytes = b""
    node_id: bytes = b""
    pid: int = 0
    num_restarts: int = 0
    death_cause: str = ""
    creation_error: object = None
    no_restart: bool = False
    # a named, non-detached actor that died on its own keeps its name while its creator's
    # handles live, as in Ray; a kill (raylite.kill, or the last handle dropped) or the
    # owner's exit frees it. Not persisted: a restarted head frees such names.
    name_held: bool = False
    # ray.kill(no_restart=False) while the actor was starting: the reason, to stop it (a death
    # that counts against max_restarts, as in Ray) as soon as its process is up. Not persisted.
    kill_on_start: str = ""


@dataclass
class PlacementGroupRecord:
    pg_id: bytes
    bundles: list[Resources]
    strategy: str
    name: str
    namespace: str
    detached: bool
    state: PlacementGroupState = PlacementGroupState.PENDING
    bundle_nodes: list[bytes] = field(default_factory=list)  # node id per bundle once CREATED
    error: str = ""
    # bundles still reserved on live nodes after another node of the group died (node id ->
    # bundle indexes): released when the group is removed before it is placed again
    stranded: dict[bytes, list[int]] = field(default_factory=dict)


# ------------------------------------------------------------------ effects
@dataclass(frozen=True)
class Persist:
    table: str
    key: bytes
    value: Any


@dataclass(frozen=True)
class Unpersist:
    table: str
    key: bytes


@dataclass(frozen=True)
class MarkNodeDead:
    """The node was declared dead: log it, tell it (a partitioned node fences itself), cut its link."""

    node_id: bytes
    cause: str


@dataclass(frozen=True)
class Broadcast:
    """Send `msg` to every connected driver and worker."""

    msg: P.Message


@dataclass(frozen=True)
class ScheduleActor:
    """Start (or restart) the actor: the shell runs a placement attempt, `place_actor`."""

    actor_id: bytes


@dataclass(frozen=True)
class StartActorOn:
    """Ask `node_id` to start the actor; report the reply to `actor_start_replied`."""

    actor_id: bytes
    node_id: bytes
    spec: TaskSpec
    resources: Resources


@dataclass(frozen=True)
class ActorChanged:
    """Wake whoever waits on this actor's state (`actor_settled` says if they may go)."""

    actor_id: bytes


@dataclass(frozen=True)
class KillWorkerOn:
    node_id: bytes
    worker_id: bytes
    reason: str


@dataclass(frozen=True)
class PlacePlacementGroup:
    """Run placement attempts for the group (`plan_placement_group`) until one settles it."""

    pg_id: bytes


@dataclass(frozen=True)
class ReserveBundles:
    """Reserve the bundles on their nodes in order, stopping at the first refusal; report
    to `bundles_reserved`. `by_node` maps node id -> [[bundle index, bundle], ...]."""

    pg_id: bytes
    bundle_nodes: list[bytes]
    by_node: dict[bytes, list[list[Any]]]


@dataclass(frozen=True)
class RetryPlacement:
    pg_id: bytes
    delay_s: float


@dataclass(frozen=True)
class ReleaseBundlesOn:
    node_id: bytes
    pg_id: bytes
    indexes: list[int]


@dataclass(frozen=True)
class PlacementGroupChanged:
    pg_id: bytes


Effect = (Persist | Unpersist | MarkNodeDead | Broadcast | ScheduleActor | StartActorOn | ActorChanged
          | KillWorkerOn | PlacePlacementGroup | ReserveBundles | RetryPlacement | ReleaseBundlesOn
          | PlacementGroupChanged)


class NameTakenError(ValueError):
    pass


_HEAD_NODE_RESOURCE = "node:__internal_head__"


def expired_nodes(nodes: Mapping[bytes, NodeRecord], now: float, timeout_s: float) -> list[bytes]:
    """Alive nodes whose last heartbeat is older than timeout_s.

    Nodes on a unix socket share the head's machine (a local cluster: the same process), so
    only their connection closing says they died."""
    return [nid for nid, n in nodes.items()
            if n.alive and now - n.last_seen > timeout_s and not n.address.startswith("unix://")]


class ControlStore:
    def __init__(self, clock: Clock, node_dead_timeout_s: float) -> None:
        self.clock = clock
        self.node_dead_timeout_s = node_dead_timeout_s
        self.nodes: dict[bytes, NodeRecord] = {}
        self.actors: dict[bytes, ActorRecord] = {}
        self.named: dict[tuple[str, str], bytes] = {}
        self.kv: dict[tuple[str, bytes], bytes] = {}
        self.pgs: dict[bytes, PlacementGroupRecord] = {}
        self.jobs: dict[bytes, dict[str, Any]] = {}
        # alive nodes that can go silent, least recently heard from first: the liveness check
        # reads only the front (the expired ones), never every node
        self._by_last_seen: OrderedDict[bytes, None] = OrderedDict()
        self._restored_heads: list[bytes] = []  # head nodes of the previous head, until resume()
        self.ring = S.NodeRing()  # where picks walk (scheduling.NodeRing)
        self._node_actors: dict[bytes, set[bytes]] = {}  # node id -> actors placed there
        self._launchable: list[Resources] = []  # the autoscaler's node types (AUTOSCALER_VIEW_KEY)
        self._launching = 0  # nodes the autoscaler is launching now
        self._view_at = 0.0  # when the autoscaler last published its view
        self.waiting: dict[int, Resources] = {}  # lease picks that wait for a node to join
        self._next_wait = 0
        self.actors_awaiting_node: set[bytes] = set()  # actors no node fits yet, a node type would

    # ------------------------------------------------------------ nodes
    def register_node(self, node_id: bytes, address: str, ip: str, resources: Mapping[str, int], labels: Mapping[str, str],
                      store_dir: str, link: Any = None, local_address: str = "",
                      data_address: str = "") -> tuple[str, list[Effect]]:
        """Returns ("", effects), or (why it is refused, []) for a node declared dead before."""
        old = self.nodes.get(node_id)
        if old is not None and not old.alive:
            return (f"node {node_id.hex()[:8]} was declared dead ({old.death_cause}); rejoin under a "
                    "new node id"), []
        rec = NodeRecord(node_id, address, ip, dict(resources), dict(resources), dict(labels), store_dir,
                         link, last_seen=self.clock.monotonic(), local_address=local_address,
                         data_address=data_address, idle_since=self.clock.monotonic())
        self.nodes[node_id] = rec
        self._watch(rec)
        awaiting = sorted(self.actors_awaiting_node)
        self.actors_awaiting_node.clear()
        return "", [self._persist_node(rec), *self._retry_unplaced(), *(ScheduleActor(a) for a in awaiting)]

    def _watch(self, rec: NodeRecord) -> None:
        """Track an alive node for the scheduler, and for heartbeat expiry unless it is on a
        unix socket (it shares the head's machine: only its connection closing says it died)."""
        self.ring.add(rec.node_id)
        if not rec.address.startswith("unix://"):
            self._by_last_seen[rec.node_id] = None
            self._by_last_seen.move_to_end(rec.node_id)

    def heartbeat(self, node_id: bytes, available: Mapping[str, int], total: Mapping[str, int] | None,
                  pending: Iterable[Any], stats: Mapping[str, Any] | None = None) -> bool:
        """Record a load report; False tells a node already declared dead to fence itself."""
        rec = self.nodes.get(node_id)
        if rec is not None and rec.alive:
            if stats:
                rec.stats = dict(stats)
            rec.available = _minus_placing(rec, available)
            if total is not None and total != rec.total:
                rec.total = dict(total)
                self.ring.totals_changed()
            rec.pending = list(pending)
            rec.last_seen = self.clock.monotonic()
            self._update_idle(rec)
            if node_id in self._by_last_seen:
                self._by_last_seen.move_to_end(node_id)
        return rec is None or rec.alive

    def _update_idle(self, rec: NodeRecord) -> None:
        """A node is idle when nothing uses it: all its resources free (no task, actor or
        placement-group bundle holds any), nothing queued, no live actor placed there (even a
        zero-CPU one) and no object in its store. The autoscaler removes only idle nodes."""
        busy = (rec.available != rec.total or bool(rec.pending) or bool(self._node_actors.get(rec.node_id))
                or int(rec.stats.get("store_used_bytes", 0) or 0) > 0)
        if busy:
            rec.idle_since = None
        elif rec.idle_since is None:
            rec.idle_since = self.clock.monotonic()

    def idle_s(self, node_id: bytes) -> float:
        """How long the node has been idle (0 while busy or dead)."""
        rec = self.nodes.get(node_id)
        if rec is None or not rec.alive or rec.idle_since is None:
            return 0.0
        return max(0.0, self.clock.monotonic() - rec.idle_since)

    # ------------------------------------------------------------ autoscaler demand
    def launchable_fits(self, request: Mapping[str, int]) -> bool:
        """Whether a node type the autoscaler can launch would fit `request` (node:<ip> and
        placement-group resources aside: a new node has its own)."""
        if not self._autoscaler_alive():
            return False
        need = {k: v for k, v in request.items() if not k.startswith("node:") and "_group_" not in k}
        return any(R.fits(need, shape) for shape in self._launchable)

    def lost_node_fitted(self, request: Mapping[str, int]) -> bool:
        """Whether a node that died less than NODE_REPLACEMENT_WAIT_S ago fitted `request`
        (node:<ip> and placement-group resources aside): its replacement may be starting."""
        need = {k: v for k, v in request.items() if not k.startswith("node:") and "_group_" not in k}
        now = self.clock.monotonic()
        return any(not rec.alive and rec.died_at is not None and now - rec.died_at < NODE_REPLACEMENT_WAIT_S
                   and R.fits(need, rec.total) for rec in self.nodes.values())

    def _autoscaler_alive(self) -> bool:
        return bool(self._launchable) and self.clock.monotonic() - self._view_at <= AUTOSCALER_VIEW_TTL_S

    def wait_for_node(self, request: Mapping[str, int]) -> int:
        """Record a lease pick that waits for a node to join; returns its key for `stop_waiting`."""
        self._next_wait += 1
        self.waiting[self._next_wait] = dict(request)
        return self._next_wait

    def stop_waiting(self, key: int) -> None:
        self.waiting.pop(key, None)

    def demands(self) -> dict[str, Any]:
        """What waits for resources, for the autoscaler: lease picks no node fits yet, actors
        waiting for a node, unplaced placement groups, and the standing request_resources()."""
        pgs = [{"bundles": list(pg.bundles), "strategy": pg.strategy, "pg_id": pg.pg_id.hex()}
               for pg in self.pgs.values() if pg.state in _UNPLACED_PG]
        actors = [dict(self.actors[a].spec.resources) or {"CPU": 10000} for a in sorted(self.actors_awaiting_node)
                  if a in self.actors]
        requested = self.kv.get((AUTOSCALER_NAMESPACE, AUTOSCALER_REQUEST_KEY))
        return {"waiting": list(self.waiting.values()), "actors": actors, "placement_groups": pgs,
                "requested": requested.decode() if requested else ""}

    def _autoscaler_view_changed(self, value: bytes | None) -> None:
        import json

        self._launchable = []
        self._launching = 0
        self._view_at = self.clock.monotonic()
        if not value:
            return
        try:
            view = json.loads(value)
            self._launching = int(view.get("launching") or 0)
            for t in (view.get("node_types") or {}).values():
                self._launchable.append(R.to_fixed({k: float(v) for k, v in (t.get("resources") or {}).items()}))
        except (ValueError, TypeError, AttributeError):
            self._launchable = []

    def link_closed(self, node_id: bytes, link: Any) -> list[Effect]:
        rec = self.nodes.get(node_id)
        if rec is not None and rec.link is link:
            return self.node_lost(node_id, "its connection to the head closed (its processes died)")
        return []

    def grant_fresh_timeout(self) -> None:
        """The shell's liveness loop stalled, so heartbeats that arrived meanwhile are unread:
        give every node a fresh timeout rather than declare them dead."""
        now = self.clock.monotonic()
        for n in self.nodes.values():
            n.last_seen = max(n.last_seen, now)

    def excuse_stall(self, stall_s: float) -> None:
        """The shell's loop could not read heartbeats for `stall_s` seconds (a loaded machine,
        a long request): every node gets that much more time, no more, so a wave of dead
        nodes is still declared dead about `stall_s` late rather than never."""
        for n in self.nodes.values():
            n.last_seen += stall_s

    def expire_silent_nodes(self) -> list[Effect]:
        """Declare dead the nodes silent for longer than the timeout: only the front of the
        least-recently-seen order is read, so the check costs O(expired + 1), not O(nodes)."""
        effects: list[Effect] = []
        timeout_s = self.node_dead_timeout_s
        now = self.clock.monotonic()
        expired = []
        for node_id in self._by_last_seen:
            if now - self.nodes[node_id].last_seen <= timeout_s:
                break
            expired.append(node_id)
        for node_id in expired:
            effects += self.node_lost(node_id, f"no heartbeat for {timeout_s:g}s "
                                      "(its host is down or its network link is cut)")
        return effects

    def node_lost(self, node_id: bytes, cause: str) -> list[Effect]:
        """The node is gone: its actors die or restart, its placement groups are placed again."""
        rec = self.nodes.get(node_id)
        if rec is None or not rec.alive:
            return []
        rec.alive = False
        rec.death_cause = cause
        rec.died_at = self.clock.monotonic()
        rec.available = {}
        rec.pending = []
        self._by_last_seen.pop(node_id, None)
        self.ring.remove(node_id)
        effects: list[Effect] = [self._persist_node(rec), MarkNodeDead(node_id, cause),
                                 Broadcast(P.NodeDied(node_id, rec.address, cause))]
        for actor_id in sorted(self._node_actors.pop(node_id, ())):  # not a walk of every actor
            a = self.actors[actor_id]
            if a.node_id == node_id and a.state in _LIVE_ACTOR:
                effects += self._actor_died(actor_id, f"its node {node_id.hex()[:8]} died ({cause})")
        for pg in self.pgs.values():
            if pg.state is PlacementGroupState.CREATED and node_id in pg.bundle_nodes:
                for i, nid in enumerate(pg.bundle_nodes):
                    if nid != node_id and nid in self.nodes and self.nodes[nid].alive:
                        pg.stranded.setdefault(nid, []).append(i)
                pg.state = PlacementGroupState.PENDING
                pg.bundle_nodes = []
                effects.append(PlacePlacementGroup(pg.pg_id))
        return effects

    def alive_views(self) -> list[S.NodeView]:
        return [n.view() for n in self.nodes.values() if n.alive]

    def pick_node(self, resources: Mapping[str, int], strategy: Strategy | list[Any], requester: bytes,
                  requester_available: Mapping[str, int] | None = None,
                  batch: bytes = b"") -> tuple[NodeRecord | S.Infeasible | None, bool]:
        """Spillback: (the node that should grant a lease its requester cannot or should not,
        whether the SPREAD `batch` has now been offered every node once). None: no node has
        room now and the autoscaler is launching nodes that fit it (wait for one to join).

        `requester_available` is the requester's own, current view of its free resources; it
        replaces the heartbeat copy, so a requester that is full is not picked for its own lease
        while another node has room (it would queue there behind long-lived actors)."""
        if requester_available is not None and requester in self.nodes:
            self.nodes[requester].available = _minus_placing(self.nodes[requester], requester_available)
        choice, covered = self._choose(resources, strategy, requester, batch)
        if isinstance(choice, S.Infeasible):
            return choice, covered
        if choice is None and self._launching and decode_strategy(strategy).is_default and self.launchable_fits(resources):
            return None, covered  # a node is being launched for demands like it: wait for it to join
        if choice is None:  # nobody has room now: queue where it fits, the requester first
            mine = self.nodes.get(requester)
            if mine is not None and mine.alive and R.fits(resources, mine.total):
                choice = mine
            else:
                choice = self.nodes[self.ring.next_feasible(resources, self.nodes)]  # type: ignore[index]
        R.subtract(choice.available, resources)  # optimistic until its next heartbeat
        choice.idle_since = None  # busy from now: the autoscaler must not remove it meanwhile
        return choice, covered

    def _choose(self, resources: Mapping[str, int], strategy: Strategy | list[Any], local: bytes | None = None,
                batch: bytes = b"") -> tuple[NodeRecord | S.Infeasible | None, bool]:
        """One scheduling decision in O(NodeRing.WINDOW): a node, Infeasible, or None (no room
        anywhere now); and whether a SPREAD batch has been round every node."""
        nodes = self.nodes
        how = decode_strategy(strategy)
        if how.is_labels:
            return S.pick_labeled(resources, list(nodes.values()), how.to_wire(), local), True
        if how.is_node:
            rec = nodes.get(how.node_id)
            if rec is not None and rec.alive and R.fits(resources, rec.total):
                return rec, True
            if not how.soft:
                why = "cannot fit the request" if rec is not None and rec.alive else "is not alive in this cluster"
                return S.Infeasible(f"node affinity to node {how.node_id_hex[:8]} (soft=False), but that node "
                                    f"{why}"), True
            how = DEFAULT_STRATEGY
        if not self.ring.feasible(resources, nodes):
            return S.Infeasible(S.never_fits(resources, self.alive_views())), True
        if how.is_spread:
            nid, covered = self.ring.pick_spread(resources, nodes, batch)
            return (nodes[nid] if nid is not None else None), covered
        nid = self.ring.pick_default(resources, nodes, local)
        return (nodes[nid] if nid is not None else None), True

    # ------------------------------------------------------------ actors
    def register_actor(self, spec: TaskSpec, get_if_exists: bool) -> tuple[ActorRecord, bool, list[Effect]]:
        """Returns (record, reused, effects); reused means get_if_exists found a live actor of
        that name. Raises NameTakenError if the name is taken and get_if_exists is False."""
        effects: list[Effect] = []
        if spec.actor_name:
            key = (spec.namespace, spec.actor_name)
            existing = self.named.get(key)
            if existing is not None and self.actors[existing].state is not ActorState.DEAD:
                if get_if_exists:
                    return self.actors[existing], True, []
                raise NameTakenError(f"The name {spec.actor_name!r} (namespace={spec.namespace!r}) is "
                                     "already taken by a live actor. Pick another name, kill the existing "
                                     "actor, or pass get_if_exists=True to reuse it.")
            if existing is not None and self.actors[existing].name_held:
                raise NameTakenError(
                    f"The name {spec.actor_name!r} (namespace={spec.namespace!r}) still belongs to an actor "
                    f"that died ({self.actors[existing].death_cause}) while its creator holds handles to "
                    "it. Drop those handles or call raylite.kill() on one to free the name, or pick another.")
            self.named[key] = spec.actor_id
            effects.append(Persist("named", _key(*key), spec.actor_id))
        rec = ActorRecord(spec, name_held=bool(spec.actor_name) and not spec.detached)
        self.actors[spec.actor_id] = rec
        effects += [self._persist_actor(rec), ScheduleActor(spec.actor_id)]
        return rec, False, effects

    def place_actor(self, actor_id: bytes) -> list[Effect]:
        """One placement attempt for a PENDING/RESTARTING actor: a StartActorOn, or its death
        when no node could ever hold it; [] when it needs none (any more)."""
        rec = self.actors.get(actor_id)
        if rec is None or rec.state not in (ActorState.PENDING, ActorState.RESTARTING):
            return []
        spec = rec.spec
        need = dict(spec.resources)
        # actors without an explicit CPU request need one CPU to be placed, hold none after
        placement_need = need if need.get("CPU") else {**need, "CPU": 10000}
        choice, _ = self._choose(placement_need if spec.resources.get("CPU") is None else need, spec.strategy)
        if isinstance(choice, S.Infeasible) and not spec.resources.get("CPU"):
            choice, _ = self._choose(need, spec.strategy)
        if isinstance(choice, S.Infeasible) and decode_strategy(spec.strategy).is_default and self.launchable_fits(need):
            self.actors_awaiting_node.add(actor_id)  # the autoscaler can add a node that fits it
            return []
        if isinstance(choice, S.Infeasible):
            return self._actor_dead(actor_id, f"The actor {spec.function.qualname} cannot be scheduled: "
                                    f"{choice.reason}. {S.FIX_HINT}", unschedulable=True)
        if choice is None:  # no room right now: queue it on a node that can ever fit it
            choice = self.nodes[self.ring.next_feasible(need, self.nodes)]  # type: ignore[index]
        # optimistic until the node's next heartbeat: actors placed in the same burst must see
        # each other, or they all land on the node that looked emptiest and queue there forever
        R.subtract(self.nodes[choice.node_id].available, need)
        self.nodes[choice.node_id].idle_since = None
        self.nodes[choice.node_id].placing[actor_id] = need
        return [StartActorOn(actor_id, choice.node_id, spec, need)]

    def actor_start_failed(self, actor_id: bytes, node_id: bytes) -> None:
        """The StartActor never got an answer (the node's link broke): the next attempt places anew."""
        node = self.nodes.get(node_id)
        if node is not None:
            node.placing.pop(actor_id, None)

    def actor_start_replied(self, actor_id: bytes, node_id: bytes, reply: P.StartActorReply) -> list[Effect]:
        node = self.nodes.get(node_id)
        if node is not None:
            node.placing.pop(actor_id, None)  # the node's own reports count it from now on
        rec = self.actors.get(actor_id)
        if rec is not None and rec.state is ActorState.DEAD and reply.ok and reply.worker_id:
            # killed while its StartActor was in flight: the process came up anyway and holds the
            # actor's resources on that node until it is stopped
            return [KillWorkerOn(node_id, reply.worker_id, "its actor was killed while it was starting")]
        if rec is None or rec.state is ActorState.DEAD:
            return []
        if reply.ok and rec.kill_on_start:
            # killed while it started: stopped now, before anyone calls it; its exit decides
            # (worker_died) whether it restarts
            reason, rec.kill_on_start = rec.kill_on_start, ""
            rec.worker_id = reply.worker_id
            rec.node_id = node_id
            self._node_actors.setdefault(node_id, set()).add(actor_id)
            return [KillWorkerOn(node_id, reply.worker_id, reason)]
        if reply.ok:
            rec.state = ActorState.ALIVE
            rec.address = reply.address
            rec.worker_id = reply.worker_id
            rec.node_id = node_id
            self._node_actors.setdefault(node_id, set()).add(actor_id)
            rec.pid = reply.pid
            return self._actor_changed(rec)
        if reply.system_error:
            return self._actor_dead(actor_id, reply.system_error)
        rec.creation_error = reply.error
        return self._actor_dead(actor_id, "The actor's constructor (__init__) raised an exception.")

    def actor_settled(self, actor_id: bytes, after_restarts: int) -> bool:
        """True once a waiter for the actor may go: it is DEAD, or ALIVE after more than
        `after_restarts` restarts (an unknown actor counts as settled)."""
        rec = self.actors.get(actor_id)
        return rec is None or rec.state is ActorState.DEAD or (
            rec.state is ActorState.ALIVE and rec.num_restarts > after_restarts)

    def named_actor(self, namespace: str, name: str) -> ActorRecord | None:
        actor_id = self.named.get((namespace, name))
        if actor_id is None or self.actors[actor_id].state is ActorState.DEAD:
            return None
        return self.actors[actor_id]

    def named_actors(self, namespace: str, all_namespaces: bool) -> list[dict[str, str]]:
        return [{"name": name, "namespace": ns} for (ns, name), actor_id in self.named.items()
                if self.actors[actor_id].state is not ActorState.DEAD
                and (all_namespaces or ns == namespace)]

    def kill_actor(self, actor_id: bytes, no_restart: bool, reason: str = "") -> list[Effect]:
        """`reason`: why it ends, as its callers will read it (default: ray.kill())."""
        rec = self.actors.get(actor_id)
        if rec is None:
            return []
        rec.name_held = False  # killed on purpose (or its last handle went): the name is free once dead
        if no_restart:
            rec.no_restart = True
        node = self.nodes.get(rec.node_id)
        if rec.state is ActorState.ALIVE and node is not None and node.alive:
            return [KillWorkerOn(rec.node_id, rec.worker_id, reason or "killed by raylite.kill()")]
        if rec.state in (ActorState.PENDING, ActorState.RESTARTING):
            if no_restart:
                stop = self._kill_everywhere(rec)  # a process started for it, stopped on start
                return stop + self._actor_dead(actor_id, f"The actor was {reason or 'killed by raylite.kill()'} "
                                                         "before it started.")
            # Ray counts this kill as a death: the starting process is stopped once it is up,
            # and the actor restarts if max_restarts allows (actor_start_replied)
            rec.kill_on_start = reason or "killed by raylite.kill()"
        return []

    def worker_died(self, worker_id: bytes, actor_id: bytes, reason: str) -> list[Effect]:
        """A worker exited: its actor (if any) dies or restarts; actors it owned die unless detached."""
        effects: list[Effect] = []
        if actor_id:
            rec = self.actors.get(actor_id)
            if rec is not None and rec.worker_id == worker_id:
                effects += self._actor_died(actor_id, reason)
        for owned_id, rec in list(self.actors.items()):
            if rec.spec.owner_worker_id == worker_id and not rec.spec.detached:
                rec.name_held = False  # its creator's handles are gone with it
            if (rec.spec.owner_worker_id == worker_id and not rec.spec.detached
                    and rec.state is not ActorState.DEAD):
                rec.no_restart = True
                effects += self._kill_everywhere(rec)
                effects += self._actor_dead(owned_id, "The actor's owner (the process that created it) "
                                            "exited, so it was stopped. Use lifetime='detached' to keep an "
                                            "actor alive after its creator exits.")
        return effects

    def _kill_everywhere(self, rec: ActorRecord) -> list[Effect]:
        node = self.nodes.get(rec.node_id)
        if node is not None and node.alive and rec.worker_id:
            return [KillWorkerOn(rec.node_id, rec.worker_id, "owner died")]
        return []

    def _actor_died(self, actor_id: bytes, reason: str) -> list[Effect]:
        """The actor's process is gone: restart it if allowed, else mark it DEAD."""
        rec = self.actors[actor_id]
        if rec.state is ActorState.DEAD:
            return []
        limit = rec.spec.max_restarts
        if not rec.no_restart and (limit == -1 or rec.num_restarts < limit):
            rec.state = ActorState.RESTARTING
            rec.num_restarts += 1
            rec.address = ""
            rec.worker_id = b""
            self._unplace(rec)
            return [self._persist_actor(rec), ScheduleActor(actor_id)]
        return self._actor_dead(actor_id, f"The actor died: {reason}")

    def _unplace(self, rec: ActorRecord) -> None:
        on_node = self._node_actors.get(rec.node_id)
        if on_node is not None:
            on_node.discard(rec.spec.actor_id)
        rec.node_id = b""

    def _actor_dead(self, actor_id: bytes, cause: str, unschedulable: bool = False) -> list[Effect]:
        rec = self.actors[actor_id]
        self.actors_awaiting_node.discard(actor_id)
        on_node = self._node_actors.get(rec.node_id)
        if on_node is not None:
            on_node.discard(actor_id)
        rec.state = ActorState.DEAD
        rec.death_cause = ("UNSCHEDULABLE: " if unschedulable else "") + cause
        rec.address = ""
        return self._actor_changed(rec)

    def _actor_changed(self, rec: ActorRecord) -> list[Effect]:
        return [self._persist_actor(rec), ActorChanged(rec.spec.actor_id)]

    # ------------------------------------------------------------ key-value store
    def kv_put(self, namespace: str, key: bytes, value: bytes, overwrite: bool) -> tuple[bool, list[Effect]]:
        """Returns (whether the key existed before, effects)."""
        existed = (namespace, key) in self.kv
        if overwrite or not existed:
            self.kv[(namespace, key)] = value
            if (namespace, key) == (AUTOSCALER_NAMESPACE, AUTOSCALER_VIEW_KEY):
                self._autoscaler_view_changed(value)
            return existed, [Persist("kv", _key(namespace, key), value)]
        return existed, []

    def kv_get(self, namespace: str, key: bytes) -> bytes | None:
        return self.kv.get((namespace, key))

    def kv_del(self, namespace: str, key: bytes, by_prefix: bool) -> tuple[int, list[Effect]]:
        """Returns (how many keys were deleted, effects)."""
        if by_prefix:
            keys = [k for k in self.kv if k[0] == namespace and k[1].startswith(key)]
        else:
            keys = [(namespace, key)] if (namespace, key) in self.kv else []
        for k in keys:
            del self.kv[k]
            if k == (AUTOSCALER_NAMESPACE, AUTOSCALER_VIEW_KEY):
                self._autoscaler_view_changed(None)
        return len(keys), [Unpersist("kv", _key(*k)) for k in keys]

    def kv_keys(self, namespace: str, prefix: bytes) -> list[bytes]:
        return [k[1] for k in self.kv if k[0] == namespace and k[1].startswith(prefix)]

    # ------------------------------------------------------------ the autoscaler's rows
    def publish_autoscaler_view(self, view: bytes) -> list[Effect]:
        """P.PublishAutoscalerView: store (or, with b"", withdraw) the autoscaler's view."""
        return self._set_autoscaler_row(AUTOSCALER_VIEW_KEY, view)

    def autoscaler_view(self) -> bytes | None:
        return self.kv.get((AUTOSCALER_NAMESPACE, AUTOSCALER_VIEW_KEY))

    def request_resources(self, request: bytes) -> list[Effect]:
        """P.RequestResources: replace (or, with b"", drop) the standing request."""
        return self._set_autoscaler_row(AUTOSCALER_REQUEST_KEY, request)

    def _set_autoscaler_row(self, key: bytes, value: bytes) -> list[Effect]:
        if value:
            return self.kv_put(AUTOSCALER_NAMESPACE, key, value, True)[1]
        return self.kv_del(AUTOSCALER_NAMESPACE, key, False)[1]

    # ------------------------------------------------------------ placement groups
    def create_placement_group(self, pg_id: bytes, bundles: list[Resources], strategy: str, name: str,
                               namespace: str, detached: bool) -> list[Effect]:
        pg = PlacementGroupRecord(pg_id, bundles, strategy, name, namespace, detached)
        self.pgs[pg_id] = pg
        return [*self._persist_pg(pg), PlacePlacementGroup(pg_id)]

    def plan_placement_group(self, pg_id: bytes) -> list[Effect]:
        """One placement attempt: ReserveBundles, a RetryPlacement when nothing fits now, the
        group's INFEASIBLE verdict, or [] when it needs no placement (any more)."""
        pg = self.pgs.get(pg_id)
        if pg is None or pg.state not in _UNPLACED_PG:
            return []
        placed = S.place_bundles(pg.bundles, pg.strategy, self.alive_views())
        if isinstance(placed, S.Infeasible) and all(self.launchable_fits(b) for b in pg.bundles):
            return []  # stays PENDING: the autoscaler can add nodes; a joining node retries it
        if isinstance(placed, S.Infeasible):
            pg.state = PlacementGroupState.INFEASIBLE
            pg.error = placed.reason
            return self._pg_changed(pg)
        if placed is None:
            return [RetryPlacement(pg_id, PLACEMENT_RETRY_S)]
        by_node: dict[bytes, list[list[Any]]] = {}
        for i, nid in enumerate(placed):
            by_node.setdefault(nid, []).append([i, pg.bundles[i]])
            self.nodes[nid].idle_since = None
        return [ReserveBundles(pg_id, placed, by_node)]

    def bundles_reserved(self, plan: ReserveBundles, reserved_on: list[bytes], ok: bool) -> list[Effect]:
        """The shell reserved `plan`'s bundles on the nodes `reserved_on`; ok if on all of them."""
        pg = self.pgs[plan.pg_id]
        release = [ReleaseBundlesOn(nid, pg.pg_id, [i for i, n in enumerate(plan.bundle_nodes) if n == nid])
                   for nid in reserved_on]
        if pg.state is PlacementGroupState.REMOVED:
            return list(release)
        if ok:
            pg.state = PlacementGroupState.CREATED
            pg.bundle_nodes = plan.bundle_nodes
            return self._pg_changed(pg)
        return [*release, RetryPlacement(pg.pg_id, PLACEMENT_RETRY_S)]

    def remove_placement_group(self, pg_id: bytes) -> list[Effect]:
        """Release its bundles; actors placed in the group die with it."""
        pg = self.pgs.get(pg_id)
        if pg is None:
            return []
        effects: list[Effect] = []
        prev = pg.state
        pg.state = PlacementGroupState.REMOVED
        if prev is not PlacementGroupState.CREATED:
            for nid, indexes in pg.stranded.items():
                if nid in self.nodes and self.nodes[nid].alive:
                    effects.append(ReleaseBundlesOn(nid, pg_id, indexes))
                    for i in indexes:
                        R.add(self.nodes[nid].available, pg.bundles[i])
            pg.stranded = {}
        if prev is PlacementGroupState.CREATED:
            for nid in set(pg.bundle_nodes):
                indexes = [i for i, n in enumerate(pg.bundle_nodes) if n == nid]
                if nid in self.nodes and self.nodes[nid].alive:
                    effects.append(ReleaseBundlesOn(nid, pg_id, indexes))
            for i, nid in enumerate(pg.bundle_nodes):  # optimistic until the node's next heartbeat
                if nid in self.nodes and self.nodes[nid].alive:
                    R.add(self.nodes[nid].available, pg.bundles[i])
        hexid = pg_id.hex()
        for actor_id, rec in list(self.actors.items()):
            if rec.state is not ActorState.DEAD and any(hexid in k for k in rec.spec.resources):
                rec.no_restart = True
                rec.name_held = False
                effects += self._kill_everywhere(rec)
                effects += self._actor_dead(actor_id, "Its placement group was removed.")
        return effects + self._pg_changed(pg)

    def find_placement_group(self, pg_id: bytes, name: str, namespace: str) -> PlacementGroupRecord | None:
        pg = self.pgs.get(pg_id)
        if pg is None and name:
            pg = next((p for p in self.pgs.values() if p.name == name and p.namespace == namespace
                       and p.state is not PlacementGroupState.REMOVED), None)
        return pg

    def _pg_changed(self, pg: PlacementGroupRecord) -> list[Effect]:
        return [*self._persist_pg(pg), PlacementGroupChanged(pg.pg_id)]

    def _retry_unplaced(self) -> list[Effect]:
        return [PlacePlacementGroup(pg.pg_id) for pg in self.pgs.values() if pg.state in _UNPLACED_PG]

    # ------------------------------------------------------------ jobs
    def register_job(self, job_id: bytes, driver_address: str, namespace: str, entrypoint: str,
                     start_time_ms: int = 0, submission_id: str = "", pid: int = 0) -> list[Effect]:
        self.jobs[job_id] = {"driver_address": driver_address, "namespace": namespace,
                             "entrypoint": entrypoint, "alive": True, "start_time": start_time_ms,
                             "end_time": 0, "submission_id": submission_id, "pid": pid}
        return [Persist("jobs", job_id, {k: v for k, v in self.jobs[job_id].items() if k != "alive"})]

    def job_ended(self, job_id: bytes, end_time_ms: int = 0) -> list[Effect]:
        job = self.jobs[job_id]
        job.update(alive=False, end_time=end_time_ms)
        return [Persist("jobs", job_id, {k: v for k, v in job.items() if k != "alive"})]

    # ------------------------------------------------------------ persistence
    def _persist_node(self, n: NodeRecord) -> Persist:
        return Persist("nodes", n.node_id, [n.address, n.ip, n.total, n.labels, n.store_dir, n.alive,
                                            n.death_cause, n.local_address, n.data_address])

    def _persist_actor(self, a: ActorRecord) -> Persist:
        return Persist("actors", a.spec.actor_id, [a.spec.to_wire(), a.state.value, a.address, a.worker_id,
                                                   a.node_id, a.pid, a.num_restarts, a.death_cause,
                                                   a.no_restart])

    def _persist_pg(self, pg: PlacementGroupRecord) -> list[Effect]:
        if pg.state is PlacementGroupState.REMOVED:
            return [Unpersist("pgs", pg.pg_id)]
        return [Persist("pgs", pg.pg_id, [pg.bundles, pg.strategy, pg.name, pg.namespace, pg.detached,
                                          pg.state.value, pg.bundle_nodes])]

    def restore(self, load: Callable[[str], Iterable[tuple[bytes, Any]]]) -> None:
        """Reload the tables from persisted rows (`load(table)`); nodes get one dead-timeout
        to reconnect. Call `resume()` once the shell can act on effects."""
        now = self.clock.monotonic()
        for node_id, v in load("nodes"):
            address, ip, total, labels, store_dir, alive, cause, local, data = v
            self.nodes[node_id] = NodeRecord(node_id, address, ip, total, dict(total) if alive else {},
                                             labels, store_dir, None, alive, now, cause, local, data)
            if alive:
                self._watch(self.nodes[node_id])
                if _HEAD_NODE_RESOURCE in total:  # it ran in the head's own process: gone with it
                    self._restored_heads.append(node_id)
        for actor_id, v in load("actors"):
            spec_wire, state, address, worker_id, node_id, pid, restarts, cause, no_restart = v
            self.actors[actor_id] = ActorRecord(TaskSpec.from_wire(spec_wire), ActorState(state), address,
                                                worker_id, node_id, pid, restarts, cause,
                                                no_restart=no_restart)
            if node_id and ActorState(state) in _LIVE_ACTOR:
                self._node_actors.setdefault(node_id, set()).add(actor_id)
        for k, actor_id in load("named"):
            ns, name = _unkey(k)
            if actor_id in self.actors:
                self.named[(ns, name)] = actor_id
        for k, value in load("kv"):
            ns, key = _unkey(k)
            self.kv[(ns, key)] = value
            if (ns, key) == (AUTOSCALER_NAMESPACE, AUTOSCALER_VIEW_KEY):
                self._autoscaler_view_changed(value)
        for pg_id, v in load("pgs"):
            bundles, strategy, name, ns, detached, state, bundle_nodes = v
            self.pgs[pg_id] = PlacementGroupRecord(pg_id, bundles, strategy, name, ns, detached,
                                                   PlacementGroupState(state), bundle_nodes)
        for job_id, v in load("jobs"):
            self.jobs[job_id] = {**v, "alive": False}

    def resume(self) -> list[Effect]:
        """After a restore: the old head node is dead (it lived in the head's process; a
        restarted head pod has a new one), then carry on placing the actors and groups that
        were not placed yet."""
        lost: list[Effect] = []
        for node_id in self._restored_heads:
            lost += self.node_lost(node_id, "the head restarted; this head node ran in its process")
        self._restored_heads = []
        return [*lost, *(ScheduleActor(actor_id) for actor_id, a in self.actors.items()
                  if a.state in (ActorState.PENDING, ActorState.RESTARTING)),
                *self._retry_unplaced()]

    # ------------------------------------------------------------ status
    def snapshot(self) -> dict[str, Any]:
        """Plain dicts of every table, for status pages and tests."""
        return {
            "nodes": [{"node_id": n.node_id.hex(), "address": n.address, "alive": n.alive,
                       "total": dict(n.total), "available": dict(n.available),
                       "death_cause": n.death_cause} for n in self.nodes.values()],
            "actors": [{"actor_id": a.spec.actor_id.hex(), "state": a.state.value,
                        "name": a.spec.actor_name, "namespace": a.spec.namespace,
                        "node_id": a.node_id.hex(), "num_restarts": a.num_restarts,
                        "death_cause": a.death_cause} for a in self.actors.values()],
            "placement_groups": [{"pg_id": pg.pg_id.hex(), "state": pg.state.value, "name": pg.name,
                                  "strategy": pg.strategy, "bundles": list(pg.bundles)}
                                 for pg in self.pgs.values()],
            "jobs": [{"job_id": job_id.hex(), **job} for job_id, job in self.jobs.items()],
            "kv_keys": len(self.kv),
        }


def _minus_placing(rec: NodeRecord, reported: Mapping[str, int]) -> Resources:
    """A node's reported free resources less what actors sent to it and not yet answered hold
    (never below zero: a report may already count one that started)."""
    available = dict(reported)
    for need in rec.placing.values():
        for k, v in need.items():
            available[k] = max(0, available.get(k, 0) - v)
    return available


def _key(*parts: Any) -> bytes:
    packed: bytes = msgpack.packb(list(parts), use_bin_type=True)
    return packed


def _unkey(data: bytes) -> list[Any]:
    parts: list[Any] = msgpack.unpackb(data, raw=False)
    return parts
