"""Small value types that Serve's public API shares with its controller (Ray's names).

`DeploymentID` and `ReplicaID` name deployments and replicas in autoscaling contexts and
request-router code; `AutoscalingContext` is what a custom autoscaling policy receives. Plain
classes (no pydantic), so the controller can build them on every autoscaling tick cheaply.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from functools import cached_property
from typing import Any

DEFAULT_APP_NAME = "default"


@dataclass(frozen=True)
class DeploymentID:
    """A deployment, named within its application."""

    name: str
    app_name: str = DEFAULT_APP_NAME

    def __str__(self) -> str:
        return f"Deployment(name='{self.name}', app='{self.app_name}')"

    __repr__ = __str__


@dataclass(frozen=True)
class ReplicaID:
    """One replica of a deployment; `unique_id` is unique within the deployment."""

    unique_id: str
    deployment_id: DeploymentID

    @classmethod
    def from_replica_tag(cls, tag: str) -> ReplicaID:
        """From raylite's replica id string `app#deployment#unique`."""
        app, _, rest = tag.partition("#")
        name, _, unique = rest.rpartition("#")
        return cls(unique, DeploymentID(name, app))

    def to_full_id_str(self) -> str:
        d = self.deployment_id
        return f"SERVE_REPLICA::{d.app_name}#{d.name}#{self.unique_id}"

    def __str__(self) -> str:
        d = self.deployment_id
        return f"Replica(id='{self.unique_id}', deployment='{d.name}', app='{d.app_name}')"

    __repr__ = __str__


@dataclass(frozen=True)
class TimeStampedValue:
    """One sample of a metric: wall-clock seconds and the value."""

    timestamp: float
    value: float


TimeSeries = list[TimeStampedValue]


def _lazy(value: Any) -> Any:
    return value() if callable(value) else value


class AutoscalingContext:
    """What a custom autoscaling policy sees on each tick (Ray's fields and names).

    `total_num_requests` counts requests running or queued at replicas plus those queued at
    handles, averaged over `look_back_period_s`. `aggregated_metrics` maps each custom metric
    (from replicas' `record_autoscaling_stats()`) to {ReplicaID: value aggregated over the
    look-back window}; `raw_metrics` keeps the samples. Metrics may be given as callables, which
    run on first access only.
    """

    def __init__(self, deployment_id: DeploymentID, deployment_name: str, app_name: str | None,
                 current_num_replicas: int, target_num_replicas: int, running_replicas: list[ReplicaID],
                 total_num_requests: float | Callable[[], float],
                 total_queued_requests: float | Callable[[], float] | None,
                 aggregated_metrics: Any, raw_metrics: Any, capacity_adjusted_min_replicas: int,
                 capacity_adjusted_max_replicas: int, policy_state: dict[str, Any],
                 last_scale_up_time: float | None, last_scale_down_time: float | None,
                 current_time: float | None, config: Any) -> None:
        self.deployment_id = deployment_id
        self.deployment_name = deployment_name
        self.app_name = app_name
        self.current_num_replicas = current_num_replicas
        self.target_num_replicas = target_num_replicas
        self.running_replicas = running_replicas
        self._total_num_requests = total_num_requests
        self._total_queued_requests = total_queued_requests
        self._aggregated_metrics = aggregated_metrics
        self._raw_metrics = raw_metrics
        self.capacity_adjusted_min_replicas = capacity_adjusted_min_replicas
        self.capacity_adjusted_max_replicas = capacity_adjusted_max_replicas
        self.policy_state = policy_state
        self.last_scale_up_time = last_scale_up_time
        self.last_scale_down_time = last_scale_down_time
        self.current_time = current_time
        self.config = config

    @cached_property
    def total_num_requests(self) -> float:
        return _lazy(self._total_num_requests)

    @cached_property
    def total_queued_requests(self) -> float:
        return _lazy(self._total_queued_requests) or 0.0

    @property
    def total_running_requests(self) -> float:
        return max(0.0, self.total_num_requests - self.total_queued_requests)

    @cached_property
    def aggregated_metrics(self) -> dict[str, dict[ReplicaID, float]]:
        return _lazy(self._aggregated_metrics) or {}

    @cached_property
    def raw_metrics(self) -> dict[str, dict[ReplicaID, TimeSeries]]:
        return _lazy(self._raw_metrics) or {}
