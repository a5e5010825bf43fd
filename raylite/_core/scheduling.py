"""Pure placement policies: which node gets an actor, a lease, a placement-group bundle.

No sockets and no clock: each function takes a view of the cluster (node id ->
total and available resources) and returns a decision, so it is unit-tested
with plain calls.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

from raylite._core import resources as R
from raylite._core.strategy import DEFAULT as DEFAULT_STRATEGY
from raylite._core.strategy import Strategy
from raylite._core.strategy import decode as decode_strategy


@dataclass(frozen=True)
class NodeView:
    node_id: bytes
    total: Mapping[str, int]
    available: Mapping[str, int]
    alive: bool = True


@dataclass(frozen=True)
class Infeasible:
    """No node could ever fit the request; `reason` names the request and capacities."""

    reason: str


def capacity_summary(nodes: Sequence[NodeView], limit: int = 20) -> str:
    """What the alive nodes have, for errors; nodes with the same resources are told once."""
    alive = [n for n in nodes if n.alive]
    if not alive:
        return "the cluster has no alive nodes"
    shapes: dict[str, list[str]] = {}
    for n in alive:
        shapes.setdefault(R.describe(_public(n.total)), []).append(n.node_id.hex()[:8])
    parts = []
    for shape, ids in list(shapes.items())[:limit]:
        who = f"node {ids[0]}" if len(ids) == 1 else f"{len(ids)} nodes ({', '.join(ids[:3])}{', ...' if len(ids) > 3 else ''})"
        parts.append(f"{who} {'has' if len(ids) == 1 else 'have'} {shape}")
    if len(shapes) > limit:
        parts.append(f"and {len(shapes) - limit} more kinds of node")
    return "; ".join(parts)


def never_fits(request: Mapping[str, int], nodes: Sequence[NodeView]) -> str:
    """The reason a request is infeasible, worded alike for tasks and actors."""
    return (f"it requests {R.describe(_public(request))}, which no node of this cluster can ever "
            f"provide ({capacity_summary(nodes)})")


FIX_HINT = "Lower the request (num_cpus/num_gpus/memory/resources) or start a node that has it."


def _public(res: Mapping[str, int]) -> dict[str, int]:
    public = {k: v for k, v in res.items() if "_group_" not in k}
    return public if public or not res else dict(res)


def feasible_nodes(request: Mapping[str, int], nodes: Sequence[NodeView]) -> list[NodeView]:
    return [n for n in nodes if n.alive and R.fits(request, n.total)]


def pick_node(request: Mapping[str, int], nodes: Sequence[NodeView], strategy: Strategy | Sequence[object] = (),
              *, local_node: bytes | None = None, spread_counter: int = 0) -> NodeView | Infeasible | None:
    """Choose a node for `request`.

    Default: the local node if it has room now, else the alive node with the most
    room now, else (None) wait. "SPREAD": round-robin over nodes with room.
    Node affinity (strategy.py): that node (soft falls back to default).
    Returns Infeasible when no alive node's *total* could ever fit the request.
    """
    candidates = feasible_nodes(request, nodes)
    how = decode_strategy(strategy)
    if how.is_node:
        target = how.node_id
        for n in candidates:
            if n.node_id == target:
                return n
        if not how.soft:
            alive = any(n.node_id == target and n.alive for n in nodes)
            why = "cannot fit the request" if alive else "is not alive in this cluster"
            return Infeasible(f"node affinity to node {how.node_id_hex[:8]} (soft=False), but that node {why}")
        how = DEFAULT_STRATEGY
    if not candidates:
        return Infeasible(never_fits(request, nodes))
    with_room = [n for n in candidates if R.fits(request, n.available)]
    if not with_room:
        return None
    if how.is_spread:
        ordered = sorted(with_room, key=lambda n: n.node_id)
        return ordered[spread_counter % len(ordered)]
    if local_node is not None:
        for n in with_room:
            if n.node_id == local_node:
                return n
    return max(with_room, key=lambda n: _headroom(request, n))


def pick_labeled(request: Mapping[str, int], nodes: Sequence[Any], strategy: Sequence[Any],
                 local_node: bytes | None = None) -> Any:
    """A node for a LABELS strategy (raylite._core.labels): the first selector that some alive
    node able to fit `request` matches decides the candidates (later ones are Ray's
    fallback_strategy); among them, those that match the soft selector come first; then the
    local node if it has room, else the one with the most room; else a candidate without room
    (the lease queues there). Infeasible when no selector matches such a node. `nodes` carry
    `labels` (the head's records)."""
    from raylite._core import labels as L

    alive = [n for n in nodes if n.alive and R.fits(request, n.total)]
    selectors, soft = strategy[1], strategy[2] if len(strategy) > 2 else []
    for selector in selectors:
        candidates = [n for n in alive if L.matches(selector, n.labels)]
        if not candidates:
            continue
        preferred = [n for n in candidates if L.matches(soft, n.labels)] if soft else []
        for pool in (preferred, candidates):
            with_room = [n for n in pool if R.fits(request, n.available)]
            if with_room:
                for n in with_room:
                    if n.node_id == local_node:
                        return n
                return max(with_room, key=lambda n: _headroom(request, n))
        return (preferred or candidates)[0]
    wanted = " or ".join(L.describe(sel) for sel in selectors)
    return Infeasible(f"no alive node that can fit {R.describe(_public(request))} has labels matching "
                      f"{wanted}: check the label_selector (or the nodes' labels: `raylite start --labels`)")


class NodeLike(Protocol):
    """What a pick reads of a node (read-only, so a record with dict fields fits)."""

    @property
    def node_id(self) -> bytes: ...
    @property
    def total(self) -> Mapping[str, int]: ...
    @property
    def available(self) -> Mapping[str, int]: ...
    @property
    def alive(self) -> bool: ...


class NodeRing:
    """The alive nodes in join order, with cursors, so that a pick costs O(WINDOW), not O(N).

    A cluster of thousands of nodes cannot afford a scan of every node per lease. Picks walk
    the ring from a cursor instead:
    - SPREAD: each batch (a client's burst of tasks of one shape) has its own cursor and
      walks the ring one node per pick, skipping nodes without room now, so the batch covers
      every node before any gets a second lease; `covered` says it has been round once.
      Picks without a batch (spillback from a node, actors) share one cursor.
    - default: the local node when it has room, else the node with the most room among the
      next WINDOW nodes of a rotating cursor (all of them on a cluster of <= WINDOW nodes).
    At most WINDOW nodes without room are skipped before a pick settles for a feasible node
    without room (the lease queues there), so a full cluster does not cost a full walk per
    pick. Whether any node could ever fit a request shape is cached until nodes change.
    """

    WINDOW = 64
    MAX_BATCHES = 4096

    def __init__(self) -> None:
        self._ids: list[bytes | None] = []  # None: a removed node, dropped at the next compaction
        self._pos: dict[bytes, int] = {}
        self._holes = 0
        self._cursor = 0  # default picks and new batches start here
        self._batches: OrderedDict[bytes, list[int]] = OrderedDict()  # batch -> [cursor, slots left]
        self._feasible: dict[tuple[object, ...], bool] = {}

    def __len__(self) -> int:
        return len(self._pos)

    def add(self, node_id: bytes) -> None:
        if node_id in self._pos:
            return
        self._pos[node_id] = len(self._ids)
        self._ids.append(node_id)
        self._feasible.clear()
        for state in self._batches.values():  # a node joining mid-batch is covered too
            state[1] += 1

    def remove(self, node_id: bytes) -> None:
        i = self._pos.pop(node_id, None)
        if i is None:
            return
        self._ids[i] = None
        self._holes += 1
        self._feasible.clear()
        if self._holes > 16 and self._holes * 2 > len(self._ids):
            self._compact()

    def totals_changed(self) -> None:
        self._feasible.clear()

    def _compact(self) -> None:
        before = [0] * (len(self._ids) + 1)  # survivors before each old index
        for i, nid in enumerate(self._ids):
            before[i + 1] = before[i] + (nid is not None)
        survivors = [nid for nid in self._ids if nid is not None]
        self._ids = [*survivors]
        self._pos = {nid: i for i, nid in enumerate(survivors)}
        self._holes = 0
        n = len(self._ids) or 1
        self._cursor = before[self._cursor % len(before)] % n
        for state in self._batches.values():
            state[0] = before[min(state[0], len(before) - 1)] % n
            state[1] = min(state[1], len(self._ids))

    def feasible(self, request: Mapping[str, int], nodes: Mapping[bytes, NodeLike]) -> bool:
        """Whether any alive node's total could ever fit `request` (cached per shape)."""
        key = tuple(sorted(request.items()))
        known = self._feasible.get(key)
        if known is None:
            known = self._feasible[key] = any(R.fits(request, nodes[nid].total) for nid in self._pos)
        return known

    def pick_spread(self, request: Mapping[str, int], nodes: Mapping[bytes, NodeLike],
                    batch: bytes = b"") -> tuple[bytes | None, bool]:
        """(node id, covered): the batch's next node with room, else a feasible node without
        room (covered then: no node is left that could take a task of the burst now)."""
        state = self._batch(batch)
        fallback: bytes | None = None
        after_fallback = 0
        ids, n = self._ids, len(self._ids)
        for step in range(n):
            i = state[0] % n
            state[0] = i + 1
            if state[1] > 0:
                state[1] -= 1
            nid = ids[i]
            if nid is not None:
                rec = nodes[nid]
                if R.fits(request, rec.total):
                    if R.fits(request, rec.available):
                        return nid, state[1] == 0
                    if fallback is None:
                        fallback, after_fallback = nid, i + 1
            if fallback is not None and step + 1 >= self.WINDOW:
                break
        # no node with room: nothing is left to cover now, the burst may double up; the next
        # pick starts after this one, so picks without room still take the nodes in turn
        if fallback is not None:
            state[0] = after_fallback
        return fallback, True

    def _batch(self, batch: bytes) -> list[int]:
        state = self._batches.get(batch)
        if state is None:
            if not batch:  # the shared cursor of picks without a batch never completes a round
                state = self._batches[b""] = [self._cursor, -1]
            else:
                state = self._batches[batch] = [self._cursor, len(self._ids)]
                self._cursor += 1
                while len(self._batches) > self.MAX_BATCHES:
                    self._batches.popitem(last=False)
        else:
            self._batches.move_to_end(batch)
        return state

    def pick_default(self, request: Mapping[str, int], nodes: Mapping[bytes, NodeLike],
                     local: bytes | None = None) -> bytes | None:
        """The local node if it has room, else the roomiest of the next WINDOW nodes with room
        (walking on past the window until one has room); None when none has room."""
        if local is not None and local in self._pos and R.fits(request, nodes[local].available):
            return local
        ids, n = self._ids, len(self._ids)
        best: bytes | None = None
        best_room = 0.0
        start = self._cursor
        for step in range(n):
            nid = ids[(start + step) % n]
            if nid is not None:
                rec = nodes[nid]
                if R.fits(request, rec.available):
                    room = _headroom(request, rec)
                    if best is None or room > best_room:
                        best, best_room = nid, room
            if best is not None and step + 1 >= self.WINDOW:
                break
        if n:
            self._cursor = (start + 1) % n
        return best

    def next_feasible(self, request: Mapping[str, int], nodes: Mapping[bytes, NodeLike]) -> bytes | None:
        """A node that can ever fit `request`, round-robin (where a lease waits when none has room)."""
        ids, n = self._ids, len(self._ids)
        for step in range(n):
            nid = ids[(self._cursor + step) % n]
            if nid is not None and R.fits(request, nodes[nid].total):
                self._cursor = (self._cursor + step + 1) % n
                return nid
        return None


def _headroom(request: Mapping[str, int], node: Any) -> float:
    keys = list(request) or ["CPU"]
    room: float = sum(node.available.get(k, 0) - request.get(k, 0) for k in keys)
    return room


def place_bundles(bundles: Sequence[Mapping[str, int]], strategy: str,
                  nodes: Sequence[NodeView]) -> list[bytes] | Infeasible | None:
    """Assign each bundle a node per PACK / SPREAD / STRICT_PACK / STRICT_SPREAD.

    Returns the node id per bundle, None if it must wait for resources, or
    Infeasible if the cluster's totals could never hold the group.
    """
    alive = [n for n in nodes if n.alive]
    if strategy not in ("PACK", "SPREAD", "STRICT_PACK", "STRICT_SPREAD"):
        return Infeasible(f"unknown placement strategy {strategy!r}")
    if not _ever_placeable(bundles, strategy, alive):
        total: dict[str, int] = {}
        for b in bundles:
            R.add(total, b)
        return Infeasible(
            f"placement group of {len(bundles)} bundles {[R.describe(b) for b in bundles]} "
            f"with strategy {strategy} can never be placed: {capacity_summary(alive)}")
    avail = {n.node_id: dict(n.available) for n in alive}
    order = sorted(alive, key=lambda n: n.node_id)
    if strategy == "STRICT_PACK":
        need: dict[str, int] = {}
        for b in bundles:
            R.add(need, b)
        for n in order:
            if R.fits(need, avail[n.node_id]):
                return [n.node_id] * len(bundles)
        return None
    result: list[bytes] = []
    used: set[bytes] = set()
    for b in bundles:
        choice = None
        if strategy == "PACK":
            prefer = ([result[-1]] if result else []) + [n.node_id for n in order]
            choice = next((nid for nid in prefer if R.fits(b, avail[nid])), None)
        else:  # SPREAD / STRICT_SPREAD
            fresh = [n.node_id for n in order if n.node_id not in used and R.fits(b, avail[n.node_id])]
            if fresh:
                choice = fresh[0]
            elif strategy == "SPREAD":
                choice = next((n.node_id for n in order if R.fits(b, avail[n.node_id])), None)
        if choice is None:
            return None
        R.subtract(avail[choice], b)
        used.add(choice)
        result.append(choice)
    return result


def _ever_placeable(bundles: Sequence[Mapping[str, int]], strategy: str, alive: Sequence[NodeView]) -> bool:
    totals = [NodeView(n.node_id, n.total, n.total) for n in alive]
    if not totals:
        return False
    if strategy == "STRICT_SPREAD" and len(bundles) > len(totals):
        return False
    for b in bundles:
        if not any(R.fits(b, n.total) for n in totals):
            return False
    if strategy == "STRICT_PACK":
        need: dict[str, int] = {}
        for b in bundles:
            R.add(need, b)
        return any(R.fits(need, n.total) for n in totals)
    placed = place_bundles_totals(bundles, strategy, totals)
    return placed is not None


def place_bundles_totals(bundles: Sequence[Mapping[str, int]], strategy: str, totals: Sequence[NodeView]) -> bool | None:
    avail = {n.node_id: dict(n.total) for n in totals}
    used: set[bytes] = set()
    for b in sorted(bundles, key=lambda x: -sum(x.values())):
        nodes = [n.node_id for n in totals if R.fits(b, avail[n.node_id])
                 and not (strategy == "STRICT_SPREAD" and n.node_id in used)]
        if not nodes:
            return None
        R.subtract(avail[nodes[0]], b)
        used.add(nodes[0])
    return True


def bundle_resource_names(pg_id_hex: str, index: int | None, resource: str) -> str:
    """Name under which a reserved bundle's resource is offered on its node."""
    if index is None or index < 0:
        return f"{resource}_group_{pg_id_hex}"
    return f"{resource}_group_{index}_{pg_id_hex}"


def bundle_request(request: Mapping[str, int], pg_id_hex: str, index: int | None) -> dict[str, int]:
    """Rewrite a plain request to draw from a placement group's bundle."""
    out = {bundle_resource_names(pg_id_hex, index, k): v for k, v in request.items() if v}
    if not out:  # zero-resource tasks still need to land on the group's node
        out[bundle_resource_names(pg_id_hex, index, "bundle")] = 1
    return out
