"""Placement groups: reserve bundles of resources across nodes, then run tasks and actors in them."""

from __future__ import annotations

import time
from typing import Any

from raylite import exceptions as E
from raylite._core import resources as R
from raylite._core.ids import PlacementGroupID

VALID_STRATEGIES = ("PACK", "SPREAD", "STRICT_PACK", "STRICT_SPREAD")


class PlacementGroup:
    """A handle to a placement group; `ready()` is an ObjectRef, `wait(timeout_seconds)` a bool."""

    def __init__(self, pg_id: bytes, bundles: list[dict[str, float]], strategy: str = "PACK") -> None:
        self.id = PlacementGroupID(pg_id)
        self.bundle_specs = [dict(b) for b in bundles]
        self.strategy = strategy

    @property
    def bundle_count(self) -> int:
        return len(self.bundle_specs)

    def _info(self, wait: bool, timeout_s: float) -> Any:
        from raylite import api

        return api.ensure_initialized().placement_group_info(bytes(self.id), wait, timeout_s)

    def wait(self, timeout_seconds: float = 30) -> bool:
        """True once every bundle is reserved; False on timeout. Raises if it can never be placed."""
        deadline = time.monotonic() + timeout_seconds
        while True:
            left = deadline - time.monotonic()
            info = self._info(True, max(0.0, min(left, 5.0)))
            if info.state == "CREATED":
                return True
            self._raise_if_never(info)
            if left <= 0:
                return False

    def ready(self) -> Any:
        """An ObjectRef that resolves to this group once it is created (or raises if it never
        can be). Resolved by this process's I/O loop from the head's answers: no worker
        blocks on it, however many groups are waited for."""
        from raylite import api

        client = api.ensure_initialized()
        return client.promise(lambda wanted: self._until_created(client, wanted))

    async def _until_created(self, client: Any, wanted: Any) -> PlacementGroup:
        while True:
            info = await client.placement_group_info_async(bytes(self.id), True, 5.0)
            self._raise_if_never(info)
            if info.state == "CREATED":
                return self
            if not wanted():
                return self  # nobody holds the ref any more: stop asking

    def _raise_if_never(self, info: Any) -> None:
        if info.state == "INFEASIBLE":
            raise E.PlacementGroupSchedulingError(
                f"Placement group {self.id.hex()} cannot be created: {info.error}. Ask for fewer "
                "resources per bundle, fewer bundles, or add nodes.")
        if info.state == "REMOVED":
            raise E.PlacementGroupSchedulingError(f"Placement group {self.id.hex()} was removed.")

    def __reduce__(self):
        return (PlacementGroup, (bytes(self.id), self.bundle_specs, self.strategy))

    def __eq__(self, other: object) -> bool:
        return isinstance(other, PlacementGroup) and other.id == self.id

    def __hash__(self) -> int:
        return hash(self.id)

    def __repr__(self) -> str:
        return f"PlacementGroup({self.id.hex()}, {self.bundle_specs}, {self.strategy})"


def placement_group(bundles: list[dict[str, float]], strategy: str = "PACK", name: str = "",
                    lifetime: str | None = None, _soft_target_node_id: str | None = None,
                    bundle_label_selector: Any = None) -> PlacementGroup:
    from raylite import api

    if strategy not in VALID_STRATEGIES:
        raise ValueError(f"Invalid placement group strategy {strategy!r}; use one of {VALID_STRATEGIES}.")
    if not isinstance(bundles, list) or not bundles:
        raise ValueError("placement_group() needs a non-empty list of bundles, e.g. [{'CPU': 1}].")
    for i, b in enumerate(bundles):
        if not isinstance(b, dict) or not b or any(not isinstance(v, (int, float)) or v < 0 for v in b.values()):
            raise ValueError(f"Bundle {i} ({b!r}) must be a non-empty dict of resource name to a "
                             "non-negative amount, e.g. {'CPU': 1}.")
        if all(v == 0 for v in b.values()):
            raise ValueError(f"Bundle {i} ({b!r}) asks for no resources; give it at least one.")
    if lifetime not in (None, "detached"):
        raise ValueError("lifetime must be None or 'detached'.")
    pg_id = PlacementGroupID.from_random()
    # a named group is awaited (other processes may look it up by name at once); an unnamed one
    # is only sent: no round trip per group (a thousand take milliseconds)
    api.ensure_initialized().create_placement_group(bytes(pg_id), [R.to_fixed(b) for b in bundles], strategy,
                                                    name, lifetime == "detached")
    return PlacementGroup(pg_id, bundles, strategy)


def remove_placement_group(placement_group: PlacementGroup) -> None:
    from raylite import api

    api.ensure_initialized().remove_placement_group(bytes(placement_group.id))


def get_placement_group(placement_group_name: str) -> PlacementGroup:
    from raylite import api

    client = api.ensure_initialized()
    info = client.placement_group_by_name(placement_group_name, client.namespace)
    if info.state == "REMOVED":
        raise ValueError(f"Failed to look up placement group with name {placement_group_name!r}.")
    return PlacementGroup(info.pg_id, [R.from_fixed(b) for b in info.bundles], info.strategy)


def placement_group_table(placement_group: PlacementGroup | None = None) -> dict:
    from raylite import api

    client = api.ensure_initialized()
    groups = client.list_placement_groups()

    def view(g: dict) -> dict:
        return {
            "placement_group_id": g["pg_id"].hex(), "name": g["name"], "strategy": g["strategy"],
            "state": g["state"], "bundles": {i: R.from_fixed(b) for i, b in enumerate(g["bundles"])},
            "bundles_to_node_id": {i: n.hex() for i, n in enumerate(g["bundle_nodes"])},
        }

    if placement_group is not None:
        for g in groups:
            if g["pg_id"] == bytes(placement_group.id):
                return view(g)
        return {}
    return {g["pg_id"].hex(): view(g) for g in groups}


def get_current_placement_group() -> PlacementGroup | None:
    from raylite._core import runtime

    w = runtime.worker()
    if w is None:
        return None
    for k in w.ctx.assigned_resources or {}:
        if "_group_" in k:
            pg_hex = k.rsplit("_", 1)[-1]
            return PlacementGroup(bytes.fromhex(pg_hex), [], "PACK")
    return None


def describe_placement_group_wait(placement_group: PlacementGroup) -> str:
    """What a group that is not yet placed waits for, in one line (its bundles, how many are
    placed, which nodes lack what, or that the cluster can never hold it); "" once placed or
    removed. raylite's own (not Ray's): Serve's status says it for a replica waiting in UPDATING."""
    from raylite import api
    from raylite._core import placement_wait as PW
    from raylite._core import scheduling as S

    client = api.ensure_initialized()
    groups = PW.waiting_groups([g for g in client.list_placement_groups()
                                if g["pg_id"] == bytes(placement_group.id)])
    if not groups:
        return ""
    nodes = [S.NodeView(n["node_id"], n["total"], n["available"])
             for n in client.cluster_info().nodes if n.get("alive")]
    return PW.describe_wait(groups[0], nodes)
