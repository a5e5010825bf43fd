"""Records the controller keeps: what each deployment should be (target) and what runs (replicas).

Pure data plus small pure decisions (how many replicas to start/stop for a rolling update), so
the reconciliation rules can be read and unit-tested without a cluster.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

# replica states (Ray's ReplicaState names)
STARTING = "STARTING"
RUNNING = "RUNNING"
STOPPING = "STOPPING"
UNHEALTHY = "UNHEALTHY"

# deployment statuses (Ray's DeploymentStatus)
D_UPDATING = "UPDATING"
D_HEALTHY = "HEALTHY"
D_UNHEALTHY = "UNHEALTHY"
D_DEPLOY_FAILED = "DEPLOY_FAILED"
D_UPSCALING = "UPSCALING"
D_DOWNSCALING = "DOWNSCALING"

# application statuses (Ray's ApplicationStatus)
A_NOT_STARTED = "NOT_STARTED"
A_DEPLOYING = "DEPLOYING"
A_DEPLOY_FAILED = "DEPLOY_FAILED"
A_RUNNING = "RUNNING"
A_UNHEALTHY = "UNHEALTHY"
A_DELETING = "DELETING"


@dataclass
class ReplicaRecord:
    replica_id: str
    actor_name: str
    version: str
    state: str = STARTING
    info: dict = field(default_factory=dict)
    started_at: float = 0.0
    health_failures: int = 0
    last_health: float = 0.0
    user_config_version: int = 0
    ongoing: float = 0.0
    model_ids: list = field(default_factory=list)
    actor: Any = None
    polling: bool = False
    node_id: str = ""  # where it was placed (known before it runs when Serve picks the node)
    gang_id: str = ""  # gang-scheduled deployments: the gang this replica belongs to
    gang_rank: int = 0
    rank: int = 0  # Ray's replica rank: 0..num_replicas-1 within the deployment
    rank_sent: dict = field(default_factory=dict)  # the rank info the replica was last told
    pg: Any = None  # its own placement group (placement_group_bundles), removed when it stops

    def public(self) -> dict:
        out = dict(self.info)
        out["model_ids"] = list(self.model_ids)
        return out


@dataclass
class DeploymentRecord:
    app_name: str
    name: str
    target: dict
    replicas: dict[str, ReplicaRecord] = field(default_factory=dict)
    status: str = D_UPDATING
    message: str = ""
    target_replicas: int = 1
    user_config_version: int = 0
    failures: int = 0
    autoscaler: Any = None
    next_index: int = 0
    gangs: dict = field(default_factory=dict)  # gang id -> controller_placement.Gang
    actors: Any = None  # controller_actors.DeploymentActors when the deployment has deployment_actors

    @property
    def config(self) -> dict:
        return self.target["config"]

    @property
    def version(self) -> str:
        return self.target["version"]

    def live(self) -> list[ReplicaRecord]:
        return [r for r in self.replicas.values() if r.state in (STARTING, RUNNING)]

    def running(self) -> list[ReplicaRecord]:
        return [r for r in self.replicas.values() if r.state == RUNNING]


def gang_size(dep: DeploymentRecord) -> int:
    g = dep.config.get("gang_scheduling_config")
    return int(g["gang_size"]) if g else 1


def _round_up(n: int, size: int) -> int:
    return -(-n // size) * size


def _whole_gangs(candidates: list[ReplicaRecord], n: int, dep: DeploymentRecord) -> list[ReplicaRecord]:
    """Up to `n` of `candidates` (in order), taking whole gangs: a gang's members go together."""
    if gang_size(dep) == 1:
        return candidates[:n]
    out: list[ReplicaRecord] = []
    seen: set[str] = set()
    for r in candidates:
        if r.gang_id in seen:
            continue
        members = [m for m in dep.replicas.values() if m.gang_id == r.gang_id and m.state in (STARTING, RUNNING)]
        if len(out) + len(members) > n:
            break
        seen.add(r.gang_id)
        out.extend(members)
    return out


def plan(dep: DeploymentRecord) -> tuple[int, list[ReplicaRecord]]:
    """How many replicas to start and which to stop to reach the target (rolling update), as Ray.

    Without surge (`max_surge_percent` 0, the default) an update never runs more replicas than
    the target, so it fits a cluster with no spare room: it stops a batch of old-version replicas
    (`rolling_update_percentage` of the target, at least one; fewer while replacements are still
    on their way) and starts new ones in their place. With `max_surge_percent` p, up to p% of the
    target in new replicas start first, and an old replica stops each time a new one runs.
    Gang-scheduled deployments start and stop whole gangs.

    Worked example (target 4, no surge, 4 old running): batch = max(int(0.2 * 4), 1) = 1; stop 1
    old, start 1 new; when it runs, the next old one goes.
    """
    live = dep.live()
    new = [r for r in live if r.version == dep.version]
    old = [r for r in live if r.version != dep.version]
    old_stopping = [r for r in dep.replicas.values() if r.state == STOPPING and r.version != dep.version]
    target = dep.target_replicas
    gang = gang_size(dep)
    cfg = dep.config
    surge = _round_up(-(-int(cfg.get("max_surge_percent", 0) or 0) * target // 100), gang) if target else 0
    # old replicas go first when stopping: those still starting, then the oldest
    old.sort(key=lambda r: (r.state == RUNNING, r.started_at))
    to_stop: list[ReplicaRecord] = []
    new_running = sum(1 for r in new if r.state == RUNNING)
    if old and target > 0:
        if surge > 0:
            n = max(0, len(old) + new_running - target)
            to_stop = _whole_gangs(old, n, dep)
        elif target >= len(old) + len(old_stopping):  # a scale-down during an update finishes first
            batch = max(int(float(cfg.get("rolling_update_percentage", 0.2)) * target), 1)
            if gang > 1:
                batch = _round_up(max(batch, gang), gang)
            pending = target - new_running - len(old)
            to_stop = _whole_gangs(old, max(batch - pending, 0), dep)
    stopping = {id(r) for r in to_stop}
    remaining = [r for r in live if id(r) not in stopping]
    room = target + (surge if any(r.version != dep.version for r in remaining) else 0)
    to_start = max(0, min(target - len(new), room - len(remaining)))
    to_start -= to_start % gang
    excess = len(remaining) - room
    if excess > 0:  # scale down: old first, then replicas still starting, the newest first
        extra = sorted(remaining, key=lambda r: (r.version == dep.version, r.state == RUNNING, -r.started_at))
        to_stop.extend(_whole_gangs(extra, _round_up(excess, gang), dep))
    return to_start, to_stop


def percentile(sorted_values: list[float], q: float) -> float:
    if not sorted_values:
        return 0.0
    k = (len(sorted_values) - 1) * q
    lo = math.floor(k)
    hi = min(lo + 1, len(sorted_values) - 1)
    return sorted_values[lo] + (sorted_values[hi] - sorted_values[lo]) * (k - lo)
