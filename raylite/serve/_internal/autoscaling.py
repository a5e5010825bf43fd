"""Ray Serve's request-based autoscaling as a pure policy: metrics in, replica count out.

No I/O and no clock of its own: the controller passes `now` (seconds, any monotonic origin) so
tests drive it with a fake clock. `config` is any object (or dict) with Ray's `AutoscalingConfig`
field names; `None` fields fall back to Ray's defaults and older aliases
(`target_num_ongoing_requests_per_replica`, `upscale_smoothing_factor`,
`downscale_smoothing_factor`, `smoothing_factor`).

How the controller uses it, once per control-loop tick:

    policy = AutoscalingPolicy(deployment_config.autoscaling_config)
    target = policy.initial_replicas()
    ...  # replicas report every metrics_interval_s, handles report their queues
    policy.record_replica_metrics(replica_id, ongoing_requests, now)
    policy.record_handle_metrics(handle_id, queued_requests, now)
    target = policy.decide(target, now, running_replicas=len(running))
"""

from __future__ import annotations

import collections
import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

__all__ = ["AutoscalingPolicy", "desired_replicas", "resolve_config"]


@dataclass(frozen=True)
class _Knobs:
    """The config's values after defaults and aliases: what the policy actually reads."""

    min_replicas: int = 1
    max_replicas: int = 1
    initial_replicas: int | None = None
    target_ongoing_requests: float = 2.0
    upscaling_factor: float = 1.0
    downscaling_factor: float = 1.0
    upscale_delay_s: float = 30.0
    downscale_delay_s: float = 600.0
    downscale_to_zero_delay_s: float | None = None
    metrics_interval_s: float = 10.0
    look_back_period_s: float = 30.0


def _field(config: Any, *names: str) -> Any:
    """The first of `names` that the config sets (not None), else None."""
    for name in names:
        value = config.get(name) if isinstance(config, Mapping) else getattr(config, name, None)
        if value is not None:
            return value
    return None


def resolve_config(config: Any) -> _Knobs:
    """Read Ray's AutoscalingConfig fields (object or dict) into validated knobs; a bad value raises
    ValueError naming the field."""
    if isinstance(config, _Knobs):
        return config
    d = _Knobs()
    values = {
        "min_replicas": _field(config, "min_replicas"),
        "max_replicas": _field(config, "max_replicas"),
        "initial_replicas": _field(config, "initial_replicas"),
        "target_ongoing_requests": _field(config, "target_ongoing_requests",
                                          "target_num_ongoing_requests_per_replica"),
        "upscaling_factor": _field(config, "upscaling_factor", "upscale_smoothing_factor", "smoothing_factor"),
        "downscaling_factor": _field(config, "downscaling_factor", "downscale_smoothing_factor",
                                     "smoothing_factor"),
        "upscale_delay_s": _field(config, "upscale_delay_s"),
        "downscale_delay_s": _field(config, "downscale_delay_s"),
        "downscale_to_zero_delay_s": _field(config, "downscale_to_zero_delay_s"),
        "metrics_interval_s": _field(config, "metrics_interval_s"),
        "look_back_period_s": _field(config, "look_back_period_s"),
    }
    knobs = _Knobs(**{k: (getattr(d, k) if v is None else v) for k, v in values.items()})
    _validate(knobs)
    return knobs


def _validate(k: _Knobs) -> None:
    def bad(field: str, why: str) -> ValueError:
        return ValueError(f"autoscaling_config.{field} {why} (got {getattr(k, field)!r})")

    if not isinstance(k.min_replicas, int) or k.min_replicas < 0:
        raise bad("min_replicas", "must be an integer >= 0")
    if not isinstance(k.max_replicas, int) or k.max_replicas < 1:
        raise bad("max_replicas", "must be an integer >= 1")
    if k.max_replicas < k.min_replicas:
        raise bad("max_replicas", f"must be >= min_replicas ({k.min_replicas})")
    if k.initial_replicas is not None and not (k.min_replicas <= k.initial_replicas <= k.max_replicas):
        raise bad("initial_replicas", f"must lie between min_replicas ({k.min_replicas}) and "
                  f"max_replicas ({k.max_replicas})")
    for name in ("target_ongoing_requests", "upscaling_factor", "downscaling_factor", "look_back_period_s",
                 "metrics_interval_s"):
        if getattr(k, name) <= 0:
            raise bad(name, "must be > 0")
    for name in ("upscale_delay_s", "downscale_delay_s"):
        if getattr(k, name) < 0:
            raise bad(name, "must be >= 0 seconds")


def _clamp(value: int, k: _Knobs) -> int:
    return max(k.min_replicas, min(k.max_replicas, value))


def desired_replicas(total_ongoing: float, current_replicas: int, config: Any) -> int:
    """The replica count that brings ongoing requests per replica to `target_ongoing_requests`,
    smoothed by `upscaling_factor`/`downscaling_factor` and clamped to [min_replicas, max_replicas].

    `total_ongoing` counts requests running or queued at the replicas plus those queued at handles;
    `current_replicas` is how many replicas are running. Worked examples (target 2):

    - 3 replicas with 12 ongoing: 4 per replica, twice the target -> 3 * 2 = 6.
    - the same with upscaling_factor 0.5: the error ratio 2 is smoothed to 1 + (2 - 1) * 0.5 = 1.5
      -> ceil(3 * 1.5) = 5; the next ticks close the rest of the gap.
    - 4 replicas with 2 ongoing: ratio 0.25 -> ceil(4 * 0.25) = 1.
    - 4 replicas idle with downscaling_factor 0.1: 1 + (0 - 1) * 0.1 = 0.9 -> ceil(3.6) = 4 would
      never shrink, so a smoothed result stuck at the current count goes one lower: 3.
    - 0 replicas (min_replicas 0) and a request queued at a handle -> 1 (scale from zero); still
      no requests -> 0.
    """
    k = resolve_config(config)
    if current_replicas <= 0:
        wanted = max(1, math.ceil(k.upscaling_factor)) if total_ongoing > 0 else 0
        return _clamp(wanted, k)
    error_ratio = (total_ongoing / current_replicas) / k.target_ongoing_requests
    factor = k.upscaling_factor if error_ratio >= 1 else k.downscaling_factor
    smoothed = 1 + (error_ratio - 1) * factor
    desired = math.ceil(current_replicas * smoothed)
    unsmoothed = math.ceil(current_replicas * error_ratio)
    if unsmoothed < current_replicas and desired >= current_replicas:
        desired = current_replicas - 1  # smoothing must not freeze a shrink forever
    return _clamp(desired, k)


class _Window:
    """Samples of one reporter over the look-back period; the average is its load."""

    def __init__(self) -> None:
        self.samples: collections.deque[tuple[float, float]] = collections.deque()

    def add(self, now: float, value: float) -> None:
        self.samples.append((now, float(value)))

    def prune(self, oldest: float) -> None:
        while self.samples and self.samples[0][0] < oldest:
            self.samples.popleft()

    def average(self) -> float:
        return sum(v for _, v in self.samples) / len(self.samples)


class AutoscalingPolicy:
    """Keeps a deployment's recent metrics and decides its replica count, honouring the
    upscale/downscale delays. One instance per deployment, owned by the controller.

    A decision to scale is taken only after the wish to move in that direction has lasted
    `upscale_delay_s` (up) or `downscale_delay_s` (down; `downscale_to_zero_delay_s` for the last
    replica when set). Scaling up from zero replicas, and moving back inside
    [min_replicas, max_replicas] after a config change, are immediate. With no fresh metrics at
    all the count holds: silence is not the same as idleness.
    """

    def __init__(self, config: Any) -> None:
        self.config = config
        self.knobs = resolve_config(config)
        self._replicas: dict[str, _Window] = {}
        self._handles: dict[str, _Window] = {}
        self._direction = 0  # +1 wants up, -1 wants down, 0 content
        self._since = 0.0  # when the current wish began

    def initial_replicas(self) -> int:
        """The count to start with: `initial_replicas` if set, else `min_replicas`."""
        k = self.knobs
        return k.initial_replicas if k.initial_replicas is not None else k.min_replicas

    def record_replica_metrics(self, replica_id: str, ongoing_requests: float, now: float) -> None:
        """A replica reports how many requests it is running (queued + executing) at `now`."""
        self._replicas.setdefault(replica_id, _Window()).add(now, ongoing_requests)

    def record_handle_metrics(self, handle_id: str, queued_requests: float, now: float) -> None:
        """A handle reports how many requests wait for a replica (these count at zero replicas)."""
        self._handles.setdefault(handle_id, _Window()).add(now, queued_requests)

    def drop_replica(self, replica_id: str) -> None:
        """Forget a replica that stopped."""
        self._replicas.pop(replica_id, None)

    def total_ongoing(self, now: float) -> float | None:
        """Average load over the look-back window, summed over replicas and handles; None when no
        reporter has a sample in the window (stale reporters are dropped)."""
        oldest = now - self.knobs.look_back_period_s
        total, fresh = 0.0, False
        for table in (self._replicas, self._handles):
            for key in list(table):
                window = table[key]
                window.prune(oldest)
                if not window.samples:
                    del table[key]
                    continue
                total += window.average()
                fresh = True
        return total if fresh else None

    def queued_at_handles(self, now: float) -> float:
        """Requests waiting at handles (averaged over the look-back window), summed."""
        oldest = now - self.knobs.look_back_period_s
        total = 0.0
        for window in self._handles.values():
            window.prune(oldest)
            if window.samples:
                total += window.average()
        return total

    def decide(self, current_replicas: int, now: float, running_replicas: int | None = None,
               running_ids: list[str] | None = None) -> int:
        """The replica count to run now: `current_replicas` (the present target) while a delay is
        pending. `running_replicas` (default: `current_replicas`) is how many replicas serve the
        load that the metrics describe; `running_ids` is for custom policies and unused here."""
        k = self.knobs
        bounded = _clamp(current_replicas, k)
        if bounded != current_replicas:
            self._direction = 0
            return bounded
        total = self.total_ongoing(now)
        running = current_replicas if running_replicas is None else running_replicas
        if total is None:
            self._direction = 0
            return current_replicas
        if running <= 0:
            if current_replicas > 0:  # replicas are starting: wait for them
                return current_replicas
            self._direction = 0  # scale from zero at once: a request is waiting
            return desired_replicas(total, 0, k)
        desired = desired_replicas(total, running, k)
        direction = (desired > current_replicas) - (desired < current_replicas)
        if direction == 0:
            self._direction = 0
            return current_replicas
        if direction != self._direction:
            self._direction, self._since = direction, now
        if direction > 0:
            delay = k.upscale_delay_s
        elif desired == 0 and k.downscale_to_zero_delay_s is not None:
            delay = k.downscale_to_zero_delay_s
        else:
            delay = k.downscale_delay_s
        if now - self._since >= delay:
            self._direction = 0
            return desired
        return current_replicas
