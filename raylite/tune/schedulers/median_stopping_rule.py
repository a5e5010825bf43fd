"""MedianStoppingRule: stop a trial whose best result so far is worse than the median of the
other trials' running averages at the same point in time (after grace_period)."""

from __future__ import annotations

from typing import Any

import numpy as np

from raylite.tune.experiment.trial import Trial
from raylite.tune.schedulers.trial_scheduler import FIFOScheduler, TrialScheduler, _check_mode


class MedianStoppingRule(FIFOScheduler):
    """Ray's parameters: time_attr, metric, mode, grace_period, min_samples_required,
    min_time_slice, hard_stop (False: pause instead of stop)."""

    def __init__(self, time_attr: str = "time_total_s", metric: str | None = None,
                 mode: str | None = None, grace_period: float = 60.0,
                 min_samples_required: int = 3, min_time_slice: float = 0,
                 hard_stop: bool = True) -> None:
        _check_mode(mode)
        self._time_attr, self._metric, self._mode = time_attr, metric, mode
        self._grace_period = grace_period
        self._min_samples_required = min_samples_required
        self._min_time_slice = min_time_slice
        self._hard_stop = hard_stop
        self._history: dict[str, list[tuple[float, float]]] = {}  # trial -> (time, score)
        self._stopped: set[str] = set()

    def _op(self) -> float:
        return 1.0 if self._mode == "max" else -1.0

    def on_trial_result(self, tune_controller: Any, trial: Trial, result: dict) -> str:
        if self._time_attr not in result or self._metric not in result:
            return TrialScheduler.CONTINUE
        now = float(result[self._time_attr])
        self._history.setdefault(trial.trial_id, []).append(
            (now, self._op() * float(result[self._metric])))
        if now < self._grace_period:
            return TrialScheduler.CONTINUE
        others = [self._running_mean(tid, now) for tid in self._history if tid != trial.trial_id]
        others = [v for v in others if v is not None]
        if len(others) < self._min_samples_required:
            return TrialScheduler.CONTINUE
        best = max(score for _, score in self._history[trial.trial_id])
        if best < float(np.median(others)):
            self._stopped.add(trial.trial_id)
            return TrialScheduler.STOP if self._hard_stop else TrialScheduler.PAUSE
        return TrialScheduler.CONTINUE

    def _running_mean(self, trial_id: str, now: float) -> float | None:
        scores = [s for t, s in self._history[trial_id] if t <= now]
        return float(np.mean(scores)) if scores else None

    def debug_string(self) -> str:
        return f"Using MedianStoppingRule: num_stopped={len(self._stopped)}."
