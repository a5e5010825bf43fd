"""Pure placement policies: which node gets an actor, a lease, a placement-group bundle.

No sockets and no clock: each function takes a view of the cluster (node id ->
total and available resources) and returns a decision, so it is unit-tested
with plain calls.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from raylite._core import resources as R


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


def capacity_summary(nodes: Sequence[NodeView]) -> str:
    alive = [n for n in nodes if n.alive]
    if not alive:
        return "the cluster has no alive nodes"
    return "; ".join(f"node {n.node_id.hex()[:8]} has {R.describe(_public(n.total))}" for n in alive)


def _public(res: Mapping[str, int]) -> dict[str, int]:
    public = {k: v for k, v in res.items() if "_group_" not in k}
    return public if public or not res else dict(res)


def feasible_nodes(request: Mapping[str, int], nodes: Sequence[NodeView]) -> list[NodeView]:
    return [n for n in nodes if n.alive and R.fits(request, n.total)]


def pick_node(request: Mapping[str, int], nodes: Sequence[NodeView], strategy: Sequence = (),
              *, local_node: bytes | None = None, spread_counter: int = 0) -> NodeView | Infeasible | None:
    """Choose a node for `request`.

    Default: the local node if it has room now, else the alive node with the most
    room now, else (None) wait. "SPREAD": round-robin over nodes with room.
    ["NODE", hex, soft]: that node (soft falls back to default).
    Returns Infeasible when no alive node's *total* could ever fit the request.
    """
    candidates = feasible_nodes(request, nodes)
    if strategy and strategy[0] == "NODE":
        target = bytes.fromhex(strategy[1])
        soft = bool(strategy[2]) if len(strategy) > 2 else False
        for n in candidates:
            if n.node_id == target:
                return n
        if not soft:
            alive = any(n.node_id == target and n.alive for n in nodes)
            why = "cannot fit the request" if alive else "is not alive in this cluster"
            return Infeasible(f"node affinity to node {strategy[1][:8]} (soft=False), but that node {why}")
        strategy = ()
    if not candidates:
        return Infeasible(f"no node can ever fit {R.describe(_public(request))}: {capacity_summary(nodes)}")
    with_room = [n for n in candidates if R.fits(request, n.available)]
    if not with_room:
        return None
    if strategy and strategy[0] == "SPREAD":
        ordered = sorted(with_room, key=lambda n: n.node_id)
        return ordered[spread_counter % len(ordered)]
    if local_node is not None:
        for n in with_room:
            if n.node_id == local_node:
                return n
    return max(with_room, key=lambda n: _headroom(request, n))


def _headroom(request: Mapping[str, int], node: NodeView) -> float:
    keys = list(request) or ["CPU"]
    return sum(node.available.get(k, 0) - request.get(k, 0) for k in keys)


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
        total = {}
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


def place_bundles_totals(bundles, strategy, totals):
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
