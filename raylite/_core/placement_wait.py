"""What a pending placement group waits for, in words (for `raylite status` and Serve's status).

A group that is not yet placed shows nowhere as a task demand: its bundles wait in the head's
placement-group table. A user looking at a replica stuck in UPDATING needs to see the bundles,
which of them are placed, and for the rest which nodes lack what. Pure: the caller passes the
group's row (ListPlacementGroups' dict) and the alive nodes' totals and availability.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from raylite._core import resources as R
from raylite._core import scheduling as S


def _public(res: Mapping[str, int]) -> dict[str, int]:
    return {k: v for k, v in res.items()
            if "_group_" not in k and not k.startswith("node:") and k != "object_store_memory"}


def waiting_groups(groups: Sequence[Mapping[str, Any]]) -> list[Mapping[str, Any]]:
    """The groups not yet placed (PENDING or INFEASIBLE), in the head's order."""
    return [g for g in groups if g.get("state") in ("PENDING", "INFEASIBLE")]


def describe_wait(group: Mapping[str, Any], nodes: Sequence[S.NodeView]) -> str:
    """One line: the group, its bundles, how many are placed, and what stands in the way.

    Worked example: bundles [{CPU: 1}, {CPU: 1}] (PACK) on two 1-CPU nodes of which one runs a
    1-CPU actor -> "placement group 1a2b3c4d (PACK) waits for 2 bundles [{CPU: 1}, {CPU: 1}],
    0 placed; node aa11bb22 has {CPU: 0} of {CPU: 1} free" (and "can never be placed" where
    the nodes' totals could never hold it)."""
    bundles = [dict(b) for b in group.get("bundles") or []]
    placed_on = list(group.get("bundle_nodes") or [])
    placed = sum(1 for n in placed_on if n)
    pg_id = group.get("pg_id") or b""
    who = (pg_id.hex() if isinstance(pg_id, bytes) else str(pg_id))[:8]
    if group.get("name"):
        who = f"{group['name']!r} ({who})"
    head = (f"placement group {who} ({group.get('strategy', 'PACK')}) waits for {len(bundles)} bundles "
            f"[{', '.join(R.describe(_public(b) or b) for b in bundles)}], {placed} placed")
    alive = [n for n in nodes if n.alive]
    if not S._ever_placeable(bundles, str(group.get("strategy", "PACK")), alive):
        return f"{head}; it can never be placed: {S.capacity_summary(alive)}"
    asked = sorted({k for b in bundles for k in _public(b)})  # the resources that matter here
    lacking = []
    for n in alive:
        short = [b for b in bundles if not R.fits(b, n.available)]
        if short:
            free = {k: n.available.get(k, 0) for k in asked}
            total = {k: n.total.get(k, 0) for k in asked}
            lacking.append(f"node {n.node_id.hex()[:8]} has {R.describe(free)} of {R.describe(total)} free")
    return head + ("; " + "; ".join(lacking) if lacking else "")
