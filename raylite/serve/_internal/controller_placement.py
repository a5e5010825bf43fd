"""Where a replica runs: placement groups, gangs, `max_replicas_per_node`, and replica ranks.

- `placement_group_bundles`: each replica gets its own placement group (removed when the replica
  stops); the replica runs in bundle 0 and its child tasks and actors stay in the group.
- `gang_scheduling_config`: replicas come in gangs of `gang_size` that share one placement group
  (one bundle set per member, PACK or SPREAD); member i runs in its own bundle(s). The gang's
  group is removed when its last member stops. See `Gang`.
- `max_replicas_per_node`: the controller picks the node (fewest replicas of the deployment
  first) and pins the replica there; a deployment that asks for more replicas than the cluster's
  nodes may hold fails with a message saying so, instead of waiting forever.
- ranks: each replica gets the lowest rank in 0..num_replicas-1 that no live replica holds
  (Ray's `ReplicaContext.rank`), plus its node's rank and its rank on that node.
"""

from __future__ import annotations

import asyncio
import uuid
from collections import Counter
from dataclasses import dataclass, field
from typing import Any

from raylite.serve._internal.deployment_state import (
    RUNNING,
    STARTING,
    DeploymentRecord,
    ReplicaRecord,
)


class Unplaceable(RuntimeError):
    """No node of the cluster can ever host the replica."""


@dataclass
class Gang:
    """Replicas that are placed, started and restarted together. ALIVE until a member fails
    (RESTART_GANG: every member stops, the group is removed, a new gang takes its place)."""

    gang_id: str
    size: int
    members: list[str] = field(default_factory=list)  # replica ids, by rank in the gang
    pg: Any = None
    ready: asyncio.Future | None = None
    pg_name: str = ""


def per_replica_resources(target: dict) -> dict[str, float]:
    """The resources one replica's actor asks for (Serve's default: 1 CPU)."""
    opts = dict(target.get("ray_actor_options") or {})
    out = {"CPU": float(opts.get("num_cpus", 1))}
    if opts.get("num_gpus"):
        out["GPU"] = float(opts["num_gpus"])
    if opts.get("memory"):
        out["memory"] = float(opts["memory"])
    for k, v in (opts.get("resources") or {}).items():
        out[k] = float(v)
    return {k: v for k, v in out.items() if v}


def replica_bundles(target: dict) -> list[dict]:
    """The bundles one replica needs in a placement group."""
    bundles = target.get("placement_group_bundles")
    if bundles:
        return [dict(b) for b in bundles]
    return [per_replica_resources(target) or {"CPU": 0.001}]


# ------------------------------------------------------------------ gangs
def new_gang(dep: DeploymentRecord) -> Gang:
    """Reserve a placement group for a new gang (it becomes ready in the background)."""
    from raylite.placement_group import placement_group

    g = dep.config["gang_scheduling_config"]
    gang = Gang(gang_id=uuid.uuid4().hex[:8], size=int(g["gang_size"]))
    gang.pg_name = f"SERVE_GANG::{dep.app_name}#{dep.name}#{gang.gang_id}"
    bundles = replica_bundles(dep.target) * gang.size
    gang.pg = placement_group(bundles, strategy=g.get("gang_placement_strategy", "PACK"), name=gang.pg_name,
                              lifetime="detached")
    gang.ready = asyncio.ensure_future(_await(gang.pg.ready()))
    dep.gangs[gang.gang_id] = gang
    return gang


def gang_context(dep: DeploymentRecord, rec: ReplicaRecord) -> dict | None:
    gang = dep.gangs.get(rec.gang_id)
    if gang is None:
        return None
    return {"gang_id": gang.gang_id, "rank": rec.gang_rank, "world_size": gang.size,
            "member_replica_ids": list(gang.members), "pg_name": gang.pg_name}


def release_gang_if_empty(dep: DeploymentRecord, gang_id: str) -> None:
    gang = dep.gangs.get(gang_id)
    if gang is None:
        return
    if any(r.gang_id == gang_id and r.state in (STARTING, RUNNING) for r in dep.replicas.values()):
        return
    dep.gangs.pop(gang_id, None)
    _remove_pg(gang.pg)


def gang_members(dep: DeploymentRecord, gang_id: str) -> list[ReplicaRecord]:
    return [r for r in dep.replicas.values() if r.gang_id == gang_id and gang_id]


# ------------------------------------------------------------------ scheduling strategy
async def scheduling_strategy(ctrl: Any, dep: DeploymentRecord, rec: ReplicaRecord) -> Any:
    """The `scheduling_strategy` actor option for this replica, or None for Core's default."""
    from raylite.util.scheduling_strategies import (
        NodeAffinitySchedulingStrategy,
        PlacementGroupSchedulingStrategy,
    )

    if rec.gang_id:
        gang = dep.gangs[rec.gang_id]
        await asyncio.shield(gang.ready)
        per = len(replica_bundles(dep.target))
        return PlacementGroupSchedulingStrategy(gang.pg, placement_group_capture_child_tasks=True,
                                                placement_group_bundle_index=rec.gang_rank * per)
    bundles = dep.target.get("placement_group_bundles")
    if bundles:
        from raylite.placement_group import placement_group

        rec.pg = placement_group(bundles, strategy=dep.target.get("placement_group_strategy") or "PACK",
                                 name=f"SERVE_PG::{rec.replica_id}", lifetime="detached")
        await _wait_for_group(ctrl, dep, rec)
        return PlacementGroupSchedulingStrategy(rec.pg, placement_group_capture_child_tasks=True,
                                                placement_group_bundle_index=0)
    limit = dep.target.get("max_replicas_per_node")
    if limit:
        rec.node_id = await _node_with_room(dep, rec, int(limit))
        return NodeAffinitySchedulingStrategy(rec.node_id, soft=False)
    return None


async def _wait_for_group(ctrl: Any, dep: DeploymentRecord, rec: ReplicaRecord) -> None:
    """Wait for the replica's placement group. Meanwhile the deployment's message says what the
    group waits for (the bundles, the nodes lacking them); a group that can never be placed
    beside Serve's other replicas raises Unplaceable naming the fix, instead of waiting."""
    from raylite.placement_group import describe_placement_group_wait
    from raylite.serve._internal.controller_status import unplaceable_group_message

    ready = asyncio.ensure_future(_await(rec.pg.ready()))
    polls = 0
    while not ready.done():
        await asyncio.wait([ready], timeout=1.0)
        polls += 1
        if ready.done() or rec.state != STARTING or polls < 2:
            continue
        never = unplaceable_group_message(ctrl, dep)
        if never:
            ready.cancel()
            raise Unplaceable(never)
        try:
            why = await asyncio.to_thread(describe_placement_group_wait, rec.pg)
        except Exception:  # noqa: BLE001 - the message is extra; the wait goes on
            why = ""
        if why and not ready.done():
            dep.message = f"Replica {rec.replica_id} is waiting for its placement group: {why}."
    ready.result()
    if dep.message.startswith(f"Replica {rec.replica_id} is waiting"):
        dep.message = ""


async def _node_with_room(dep: DeploymentRecord, rec: ReplicaRecord, limit: int) -> str:
    """A node holding fewer than `limit` replicas of the deployment (the emptiest first); waits
    while replicas on full nodes stop; raises Unplaceable when the cluster is too small."""
    import raylite

    need = per_replica_resources(dep.target)
    while True:
        nodes = [n for n in raylite.nodes() if n.get("Alive") and _fits(n.get("Resources") or {}, need)]
        counts = Counter(r.node_id or r.info.get("node_id") for r in dep.replicas.values()
                         if r is not rec and r.state in (STARTING, RUNNING, "STOPPING"))
        free = [n["NodeID"] for n in nodes if counts[n["NodeID"]] < limit]
        if free:
            return min(free, key=lambda nid: (counts[nid], nid))
        if len(nodes) * limit < dep.target_replicas:
            raise Unplaceable(
                f"deployment {dep.name!r} (app {dep.app_name!r}) wants {dep.target_replicas} replicas with "
                f"max_replicas_per_node={limit}, but the cluster has {len(nodes)} node(s) that can host one, "
                f"so at most {len(nodes) * limit} fit. Lower num_replicas, raise max_replicas_per_node, or add nodes.")
        await asyncio.sleep(0.2)  # a replica on a full node is stopping


def _fits(total: dict, need: dict) -> bool:
    return all(total.get(k, 0.0) + 1e-9 >= v for k, v in need.items())


def release_replica_pg(rec: ReplicaRecord) -> None:
    if rec.pg is not None:
        _remove_pg(rec.pg)
        rec.pg = None


def _remove_pg(pg: Any) -> None:
    if pg is None:
        return
    from raylite.placement_group import remove_placement_group

    try:
        remove_placement_group(pg)
    except Exception:  # noqa: BLE001 - already gone
        pass


async def _await(ref: Any) -> Any:
    return await ref


# ------------------------------------------------------------------ ranks
def lowest_free_rank(dep: DeploymentRecord) -> int:
    taken = {r.rank for r in dep.replicas.values() if r.state in (STARTING, RUNNING)}
    rank = 0
    while rank in taken:
        rank += 1
    return rank


def rank_info(dep: DeploymentRecord, rec: ReplicaRecord) -> dict:
    """{rank, node_rank, local_rank, world_size} of a replica, from where the live replicas run."""
    live = sorted((r for r in dep.replicas.values() if r.state in (STARTING, RUNNING)), key=lambda r: r.rank)
    node_of = {r.replica_id: (r.info.get("node_id") or r.node_id or "") for r in live}
    node_order: list[str] = []
    for r in live:
        if node_of[r.replica_id] not in node_order:
            node_order.append(node_of[r.replica_id])
    mine = node_of.get(rec.replica_id, rec.info.get("node_id") or rec.node_id or "")
    local = sum(1 for r in live if node_of[r.replica_id] == mine and r.rank < rec.rank)
    return {"rank": rec.rank, "node_rank": node_order.index(mine) if mine in node_order else 0,
            "local_rank": local, "world_size": dep.target_replicas}
