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


def plan(dep: DeploymentRecord) -> tuple[int, list[ReplicaRecord]]:
    """How many replicas to start and which to stop to reach the target (rolling update).

    New-version replicas are started up to the target count; an old-version replica is stopped
    each time a new one is running, so capacity never drops below the target during an update.
    """
    live = dep.live()
    new = [r for r in live if r.version == dep.version]
    old = [r for r in live if r.version != dep.version]
    to_start = max(0, dep.target_replicas - len(new))
    new_running = sum(1 for r in new if r.state == RUNNING)
    to_stop: list[ReplicaRecord] = []
    # stop old replicas as new ones become ready, and all of them when the target is met
    n_old_stop = max(0, len(old) + new_running - dep.target_replicas) if old else 0
    old.sort(key=lambda r: (r.state == RUNNING, r.started_at))
    to_stop.extend(old[:n_old_stop])
    if len(new) > dep.target_replicas:
        extra = sorted(new, key=lambda r: (r.state == RUNNING, -r.started_at))
        to_stop.extend(extra[:len(new) - dep.target_replicas])
    return to_start, to_stop


def percentile(sorted_values: list[float], q: float) -> float:
    if not sorted_values:
        return 0.0
    k = (len(sorted_values) - 1) * q
    lo = math.floor(k)
    hi = min(lo + 1, len(sorted_values) - 1)
    return sorted_values[lo] + (sorted_values[hi] - sorted_values[lo]) * (k - lo)
