"""Ray Serve's request-based autoscaling as a pure policy: metrics in, replica count out.

No I/O and no clock of its own: the controller passes `now` (seconds) so tests use a fake clock.
`config` is any object with Ray's `AutoscalingConfig` field names.
"""

from __future__ import annotations

from typing import Any, Mapping


def desired_replicas(total_ongoing: float, current_replicas: int, config: Any) -> int:
    """The replica count that brings ongoing requests per replica to `target_ongoing_requests`,
    smoothed by `upscaling_factor`/`downscaling_factor` and clamped to [min_replicas, max_replicas]."""
    raise NotImplementedError


class AutoscalingPolicy:
    """Keeps a deployment's recent metrics and decides its replica count, honouring the
    upscale/downscale delays. One instance per deployment, owned by the controller."""

    def __init__(self, config: Any) -> None:
        self.config = config

    def record_replica_metrics(self, replica_id: str, ongoing_requests: float, now: float) -> None:
        """A replica reports how many requests it is running (queued + executing) at `now`."""
        raise NotImplementedError

    def record_handle_metrics(self, handle_id: str, queued_requests: float, now: float) -> None:
        """A handle reports how many requests wait for a replica (counts at zero replicas)."""
        raise NotImplementedError

    def drop_replica(self, replica_id: str) -> None:
        """Forget a replica that stopped."""
        raise NotImplementedError

    def decide(self, current_replicas: int, now: float) -> int:
        """The replica count to run now (equal to `current_replicas` while a delay is pending)."""
        raise NotImplementedError

    def initial_replicas(self) -> int:
        """The count to start with: `initial_replicas` if set, else `min_replicas`."""
        raise NotImplementedError


def _field(config: Any, name: str, default: Any) -> Any:
    if isinstance(config, Mapping):
        return config.get(name, default)
    return getattr(config, name, default)
