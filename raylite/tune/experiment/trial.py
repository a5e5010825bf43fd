"""`Trial`: the record of one configuration's run, as the controller sees it.

Lifecycle: PENDING -> RUNNING [-> PAUSED -> PENDING -> RUNNING]* -> TERMINATED | ERROR.
A failed trial with retries left goes back to PENDING (restored from its last checkpoint);
TERMINATED and ERROR are final. Only the controller changes a Trial.
"""

from __future__ import annotations

import math
from numbers import Number
from typing import Any

from raylite.train import Checkpoint
from raylite.tune.execution.placement_groups import PlacementGroupFactory


class Trial:
    """One trial: its config, resources, status, results so far and latest checkpoint."""

    PENDING = "PENDING"
    RUNNING = "RUNNING"
    PAUSED = "PAUSED"
    TERMINATED = "TERMINATED"
    ERROR = "ERROR"

    def __init__(self, trainable_name: str, trial_id: str, config: dict,
                 experiment_tag: str = "", resources: PlacementGroupFactory | None = None,
                 path: str = "", evaluated_params: dict | None = None,
                 max_failures: int = 0) -> None:
        self.trainable_name = trainable_name
        self.trial_id = trial_id
        self.config = config
        self.experiment_tag = experiment_tag
        self.placement_group_factory = resources or PlacementGroupFactory([{"CPU": 1}])
        self.path = path  # the trial's directory (local path or URI)
        self.evaluated_params = evaluated_params or {}
        self.max_failures = max_failures
        self.custom_trial_name: str | None = None  # set from TuneConfig.trial_name_creator
        self.status = Trial.PENDING
        self.last_result: dict[str, Any] = {}
        self.metric_analysis: dict[str, dict[str, float]] = {}
        self.results: list[dict[str, Any]] = []  # every result, oldest first
        self.checkpoint: Checkpoint | None = None  # the latest reported checkpoint
        self.checkpoints: list[tuple[Checkpoint, dict]] = []
        self.restore_from: Checkpoint | None = None  # set for the next start (retry, PBT)
        self.error_msg: str | None = None
        self.num_failures = 0
        self.num_checkpoints = 0
        self.time_total_s = 0.0
        self.iteration = 0
        self.iterations_since_restore = 0
        self.time_since_restore = 0.0

    # -- Ray's names --------------------------------------------------------------------
    @property
    def local_path(self) -> str:
        return self.path

    @property
    def storage_path(self) -> str:
        return self.path

    @property
    def error_file(self) -> str | None:
        return f"{self.path}/error.txt" if self.error_msg else None

    @property
    def is_finished(self) -> bool:
        return self.status in (Trial.TERMINATED, Trial.ERROR)

    def set_config(self, config: dict) -> None:
        self.config = config

    def set_experiment_tag(self, experiment_tag: str) -> None:
        self.experiment_tag = experiment_tag

    def update_last_result(self, result: dict) -> None:
        """Record a result and keep min/max/last/avg of each numeric metric (schedulers read them)."""
        self.last_result = result
        self.results.append(result)
        for key, value in result.items():
            if not isinstance(value, Number) or isinstance(value, bool):
                continue
            value = float(value)  # type: ignore[arg-type]
            if math.isnan(value):
                continue
            seen = self.metric_analysis.get(key)
            if seen is None:
                self.metric_analysis[key] = {"max": value, "min": value, "avg": value,
                                             "last": value, "count": 1.0}
                continue
            count = seen["count"] + 1
            seen.update(max=max(seen["max"], value), min=min(seen["min"], value), last=value,
                        avg=seen["avg"] + (value - seen["avg"]) / count, count=count)

    def __str__(self) -> str:
        """The trial's name: TuneConfig(trial_name_creator=...)'s, else `<trainable>_<id>`."""
        custom = getattr(self, "custom_trial_name", None)  # absent from older experiment states
        return custom if custom else f"{self.trainable_name}_{self.trial_id}"

    def __repr__(self) -> str:
        return str(self)
