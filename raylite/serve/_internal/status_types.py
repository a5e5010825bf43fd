"""Ray's status shapes (`ray.serve.schema.ServeStatus` and friends): str enums and dataclasses.

`serve.status()` returns these. The enums are `str` subclasses, as in Ray, so code written
either way works: `app.status == "RUNNING"`, `app.status == ApplicationStatus.RUNNING`,
`replica_states.get("RUNNING")` or `replica_states[ReplicaState.RUNNING]`. No pydantic here:
`serve.status()` stays cheap to import.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from enum import Enum
from typing import Any


class ApplicationStatus(str, Enum):
    """NOT_STARTED -> DEPLOYING -> RUNNING [-> UNHEALTHY -> RUNNING]* ; DEPLOYING -> DEPLOY_FAILED;
    any -> DELETING."""

    NOT_STARTED = "NOT_STARTED"
    DEPLOYING = "DEPLOYING"
    DEPLOY_FAILED = "DEPLOY_FAILED"
    RUNNING = "RUNNING"
    UNHEALTHY = "UNHEALTHY"
    DELETING = "DELETING"


class DeploymentStatus(str, Enum):
    UPDATING = "UPDATING"
    HEALTHY = "HEALTHY"
    UNHEALTHY = "UNHEALTHY"
    DEPLOY_FAILED = "DEPLOY_FAILED"
    UPSCALING = "UPSCALING"
    DOWNSCALING = "DOWNSCALING"


class DeploymentStatusTrigger(str, Enum):
    """Why a deployment is in its status."""

    UNSPECIFIED = "UNSPECIFIED"
    CONFIG_UPDATE_STARTED = "CONFIG_UPDATE_STARTED"
    CONFIG_UPDATE_COMPLETED = "CONFIG_UPDATE_COMPLETED"
    UPSCALE_COMPLETED = "UPSCALE_COMPLETED"
    DOWNSCALE_COMPLETED = "DOWNSCALE_COMPLETED"
    AUTOSCALING = "AUTOSCALING"
    REPLICA_STARTUP_FAILED = "REPLICA_STARTUP_FAILED"
    DEPLOYMENT_ACTOR_FAILED = "DEPLOYMENT_ACTOR_FAILED"
    HEALTH_CHECK_FAILED = "HEALTH_CHECK_FAILED"
    INTERNAL_ERROR = "INTERNAL_ERROR"
    DELETING = "DELETING"


class ReplicaState(str, Enum):
    STARTING = "STARTING"
    UPDATING = "UPDATING"
    RECOVERING = "RECOVERING"
    RUNNING = "RUNNING"
    STOPPING = "STOPPING"
    STOPPED = "STOPPED"
    PENDING_MIGRATION = "PENDING_MIGRATION"


class ProxyStatus(str, Enum):
    STARTING = "STARTING"
    HEALTHY = "HEALTHY"
    UNHEALTHY = "UNHEALTHY"
    DRAINING = "DRAINING"
    DRAINED = "DRAINED"


def _enum(kind: type[Enum], value: Any, default: Enum) -> Any:
    try:
        return kind(value)
    except ValueError:
        return default


@dataclass
class DeploymentStatusOverview:
    """One deployment: its status, why, how many replicas are in each state, and a message."""

    status: DeploymentStatus
    status_trigger: DeploymentStatusTrigger
    replica_states: dict[ReplicaState, int]
    message: str = ""


@dataclass
class ApplicationStatusOverview:
    """One application: its status, a message, when it was deployed and its deployments."""

    status: ApplicationStatus
    message: str
    last_deployed_time_s: float
    deployments: dict[str, DeploymentStatusOverview]


@dataclass(eq=True)
class ServeStatus:
    """Serve as a whole: proxy status per node id, applications by name, target capacity."""

    proxies: dict[str, ProxyStatus] = field(default_factory=dict)
    applications: dict[str, ApplicationStatusOverview] = field(default_factory=dict)
    target_capacity: float | None = None

    @classmethod
    def from_dict(cls, d: dict) -> ServeStatus:
        """From the controller's plain-data status (see controller_status.status_dict)."""
        apps = {}
        for name, a in d.get("applications", {}).items():
            deps = {dn: DeploymentStatusOverview(
                status=_enum(DeploymentStatus, dd["status"], DeploymentStatus.UPDATING),
                status_trigger=_enum(DeploymentStatusTrigger, dd.get("status_trigger"),
                                     DeploymentStatusTrigger.UNSPECIFIED),
                replica_states={_enum(ReplicaState, k, k): n for k, n in dd.get("replica_states", {}).items()},
                message=dd.get("message", "")) for dn, dd in a.get("deployments", {}).items()}
            apps[name] = ApplicationStatusOverview(
                status=_enum(ApplicationStatus, a["status"], ApplicationStatus.NOT_STARTED),
                message=a.get("message", ""), last_deployed_time_s=a.get("last_deployed_time_s", 0.0),
                deployments=deps)
        proxies = {node: _enum(ProxyStatus, s, ProxyStatus.UNHEALTHY) for node, s in d.get("proxies", {}).items()}
        return cls(proxies=proxies, applications=apps, target_capacity=d.get("target_capacity"))

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)
