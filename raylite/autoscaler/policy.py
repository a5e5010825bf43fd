"""The autoscaling policy, pure: demands + the nodes there are + node types -> what to launch
and what to terminate.

No sockets, no clock, no provider: `decide()` takes plain values (idle times are measured by
the head) and returns a `Decision`, so every rule is unit-tested with worked examples:

- every node type keeps at least `min_workers` and never more than `max_workers` nodes;
- demands that the cluster cannot hold now are bin-packed (first fit, largest first) onto the
  free resources of running nodes and the whole of nodes being launched, then onto new nodes of
  the cheapest node type that fits them (cost: the type's `cost`, else its resources' sum);
- `request_resources()` bundles are packed onto the nodes' *totals* (Ray's rule: the cluster
  is sized to hold them at once, whatever runs now);
- a placement group's bundles are packed together: STRICT_PACK as one demand, STRICT_SPREAD one
  bundle per node;
- at most `max(5, upscaling_speed * workers)` nodes are being launched at once;
- a worker idle for `idle_timeout_s` or longer is terminated, longest idle first, unless that
  would take its type below `min_workers` or a demand was packed onto it. The head is never a
  worker here (providers do not list it), and "idle" is the head's verdict: no task, actor,
  placement-group bundle, queued lease or stored object on the node (so nodes holding actors or
  objects in use are never removed);
- a demand that no node type could ever fit is reported with the reason, not launched for.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

Resources = Mapping[str, float]

MIN_CONCURRENT_LAUNCHES = 5
_EPS = 1e-9
# resources a new node brings with it that a demand may name without blocking the fit
_IGNORED = ("node:", "accelerator_type:")


@dataclass(frozen=True)
class NodeType:
    """A kind of worker node the provider can launch (Ray's `available_node_types` entry, or a
    KubeRay worker group)."""

    name: str
    resources: Mapping[str, float]
    min_workers: int = 0
    max_workers: int = 0
    cost: float | None = None

    def price(self) -> float:
        return self.cost if self.cost is not None else float(sum(self.resources.values()))


@dataclass(frozen=True)
class WorkerNode:
    """A worker node the provider knows: `launching` until it joins the cluster, then
    `running` with the head's view of it (free resources, idle seconds)."""

    node_id: str  # the provider's id (a pod name, a host's node)
    node_type: str
    status: str = "running"  # "launching" | "running"
    available: Mapping[str, float] | None = None  # None: launching (all of the type's resources)
    total: Mapping[str, float] | None = None
    idle_s: float = 0.0


@dataclass(frozen=True)
class PlacementGroupDemand:
    bundles: Sequence[Resources]
    strategy: str = "PACK"


@dataclass(frozen=True)
class Demand:
    """What waits for resources (from the head) and what request_resources() asks for."""

    resources: Sequence[Resources] = ()  # pending leases, actors, infeasible-until-a-node-joins
    placement_groups: Sequence[PlacementGroupDemand] = ()
    requested: Sequence[Resources] = ()  # request_resources() bundles
    # nodes the provider does not manage (the head, nodes started by hand) take demands too:
    # (free resources, total resources) of each
    unmanaged: Sequence[tuple[Resources, Resources]] = ()


@dataclass(frozen=True)
class Config:
    node_types: Sequence[NodeType]
    idle_timeout_s: float = 60.0
    upscaling_speed: float = 1.0


@dataclass
class Decision:
    launch: dict[str, int] = field(default_factory=dict)  # node type -> how many more
    terminate: list[str] = field(default_factory=list)  # worker node ids
    infeasible: list[tuple[dict[str, float], str]] = field(default_factory=list)  # (demand, why)
    capped: list[tuple[dict[str, float], str]] = field(default_factory=list)  # fits a type at its max

    def __bool__(self) -> bool:
        return bool(self.launch or self.terminate)


def fits(request: Resources, available: Resources) -> bool:
    return all(v <= available.get(k, 0) + _EPS for k, v in request.items()
               if v and not k.startswith(_IGNORED))


def _take(available: dict[str, float], request: Resources) -> None:
    for k, v in request.items():
        if not k.startswith(_IGNORED):
            available[k] = available.get(k, 0) - v


@dataclass
class _Bin:
    key: str  # a worker's node id, "unmanaged:<i>" (the head ...) or "new:<type>:<n>"
    node_type: str
    free: dict[str, float]
    groups: set[int] = field(default_factory=set)  # STRICT_SPREAD groups that have a bundle here
    used: bool = False


def _units(demand: Demand) -> tuple[list[tuple[dict[str, float], int | None]], list[dict[str, float]]]:
    """(demands to fit on free resources with their STRICT_SPREAD group, request_resources bundles)."""
    units: list[tuple[dict[str, float], int | None]] = [(dict(r), None) for r in demand.resources]
    for i, pg in enumerate(demand.placement_groups):
        if pg.strategy == "STRICT_PACK":
            total: dict[str, float] = {}
            for b in pg.bundles:
                for k, v in b.items():
                    total[k] = total.get(k, 0) + v
            units.append((total, None))
        else:
            group = i if pg.strategy == "STRICT_SPREAD" else None
            units.extend((dict(b), group) for b in pg.bundles)
    return units, [dict(r) for r in demand.requested]


def _size(r: Resources) -> float:
    return float(sum(v for k, v in r.items() if not k.startswith(_IGNORED)))


def decide(config: Config, workers: Sequence[WorkerNode], demand: Demand) -> Decision:
    """One round of the policy; see the module docstring for the rules."""
    types = {t.name: t for t in config.node_types}
    decision = Decision()
    count = {name: 0 for name in types}
    for w in workers:
        if w.node_type in count:
            count[w.node_type] += 1
    launching = sum(1 for w in workers if w.status == "launching")
    running = sum(1 for w in workers if w.status == "running")
    budget = max(MIN_CONCURRENT_LAUNCHES, math.ceil(config.upscaling_speed * running)) - launching

    # min_workers first
    for t in config.node_types:
        short = t.min_workers - count[t.name]
        if short > 0:
            decision.launch[t.name] = short
            count[t.name] += short

    def existing_bins(use_totals: bool) -> list[_Bin]:
        bins = []
        for i, (free, total) in enumerate(demand.unmanaged):
            bins.append(_Bin(f"unmanaged:{i}", "", dict(total if use_totals else free)))
        for w in workers:
            t = types.get(w.node_type)
            if w.status == "launching" or w.available is None:
                free = dict(t.resources) if t else {}
            else:
                free = dict((w.total if use_totals else w.available) or {})
            bins.append(_Bin(w.node_id, w.node_type, free))
        for name, n in decision.launch.items():
            bins.extend(_Bin(f"new:{name}:{i}", name, dict(types[name].resources)) for i in range(n))
        return bins

    new_bins: list[_Bin] = []
    used_nodes: set[str] = set()

    def place(request: dict[str, float], group: int | None, bins: list[_Bin]) -> bool:
        for b in (*bins, *new_bins):
            if (group is None or group not in b.groups) and fits(request, b.free):
                _take(b.free, request)
                if group is not None:
                    b.groups.add(group)
                b.used = True
                if not b.key.startswith("new:"):
                    used_nodes.add(b.key)
                return True
        return False

    def launch_for(request: dict[str, float], group: int | None) -> None:
        fitting = [t for t in config.node_types if fits(request, t.resources)]
        if not fitting:
            have = "; ".join(f"{t.name} has {_describe(t.resources)}" for t in config.node_types) or "none"
            decision.infeasible.append((request, f"no node type can ever fit {_describe(request)} "
                                        f"(node types: {have})"))
            return
        room = [t for t in fitting if count[t.name] < t.max_workers]
        if not room:
            decision.capped.append((request, "every node type that fits "
                                    f"{_describe(request)} is at its max_workers "
                                    f"({', '.join(f'{t.name}: {t.max_workers}' for t in fitting)})"))
            return
        if sum(decision.launch.values()) >= max(budget, 0):
            decision.capped.append((request, "waiting for launching nodes to join (upscaling_speed)"))
            return
        t = min(room, key=lambda t: (t.price(), t.name))
        b = _Bin(f"new:{t.name}:{count[t.name]}", t.name, dict(t.resources))
        new_bins.append(b)
        count[t.name] += 1
        decision.launch[t.name] = decision.launch.get(t.name, 0) + 1
        place(request, group, [])

    units, requested = _units(demand)
    live = existing_bins(use_totals=False)
    for request, group in sorted(units, key=lambda u: -_size(u[0])):
        if not place(request, group, live):
            launch_for(request, group)
    # request_resources(): against totals, with what the rounds above launch counted in
    totals = existing_bins(use_totals=True)
    for b in new_bins:
        totals.append(_Bin(b.key, b.node_type, dict(types[b.node_type].resources)))
    new_bins.clear()
    for request in sorted(requested, key=lambda r: -_size(r)):
        if not place(request, None, totals):
            launch_for(request, None)

    decision.terminate = _idle_to_terminate(config, workers, types, used_nodes, decision)
    return decision


def _idle_to_terminate(config: Config, workers: Sequence[WorkerNode], types: Mapping[str, NodeType],
                       used_nodes: set[str], decision: Decision) -> list[str]:
    left = {name: 0 for name in types}
    for w in workers:
        if w.node_type in left:
            left[w.node_type] += 1
    out = []
    idle = [w for w in workers if w.status == "running" and w.idle_s >= config.idle_timeout_s
            and w.node_id not in used_nodes]
    for w in sorted(idle, key=lambda w: (-w.idle_s, w.node_id)):
        t = types.get(w.node_type)
        if t is not None and left[w.node_type] - 1 < t.min_workers:
            continue
        if decision.launch.get(w.node_type):
            continue  # never launch and remove nodes of one type in the same round
        out.append(w.node_id)
        if t is not None:
            left[w.node_type] -= 1
    return out


def _describe(r: Resources) -> str:
    return "{" + ", ".join(f"{k}: {v:g}" for k, v in sorted(r.items()) if v) + "}"
