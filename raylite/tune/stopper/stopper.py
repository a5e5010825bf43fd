"""Stoppers decide, from each result, when a trial (or the whole experiment) is done.

`RunConfig(stop=...)` takes a Stopper, a dict ({"training_iteration": 10}: stop once a
result's value reaches it) or a function (trial_id, result) -> bool."""

from __future__ import annotations

import time
from collections import defaultdict, deque
from collections.abc import Callable
from typing import Any

import numpy as np


class Stopper:
    """Base class: `__call__(trial_id, result) -> bool` stops one trial; `stop_all()` ends
    the experiment."""

    def __call__(self, trial_id: str, result: dict) -> bool:
        raise NotImplementedError

    def stop_all(self) -> bool:
        raise NotImplementedError


class NoopStopper(Stopper):
    def __call__(self, trial_id: str, result: dict) -> bool:
        return False

    def stop_all(self) -> bool:
        return False


class FunctionStopper(Stopper):
    """Wraps a function (trial_id, result) -> bool."""

    def __init__(self, function: Callable[[str, dict], bool]) -> None:
        self._fn = function

    def __call__(self, trial_id: str, result: dict) -> bool:
        return bool(self._fn(trial_id, result))

    def stop_all(self) -> bool:
        return False

    @classmethod
    def is_valid_function(cls, fn: Any) -> bool:
        return callable(fn) and not isinstance(fn, Stopper)


class _DictStopper(Stopper):
    """Stop a trial once result[key] >= value for any key (Ray's dict criteria)."""

    def __init__(self, criteria: dict[str, Any]) -> None:
        self._criteria = dict(criteria)

    def __call__(self, trial_id: str, result: dict) -> bool:
        for key, limit in self._criteria.items():
            if key not in result:
                raise KeyError(
                    f"The stop criterion {key!r} is not in the trial's result (keys: "
                    f"{sorted(result)}). Report it with tune.report({{{key!r}: ...}}), or "
                    "fix the key in RunConfig(stop=...).")
            if result[key] >= limit:
                return True
        return False

    def stop_all(self) -> bool:
        return False


class CombinedStopper(Stopper):
    """Stop when any of the given stoppers says so."""

    def __init__(self, *stoppers: Stopper) -> None:
        self._stoppers = stoppers

    def __call__(self, trial_id: str, result: dict) -> bool:
        return any([s(trial_id, result) for s in self._stoppers])

    def stop_all(self) -> bool:
        return any(s.stop_all() for s in self._stoppers)


class MaximumIterationStopper(Stopper):
    """Stop each trial after max_iter results."""

    def __init__(self, max_iter: int) -> None:
        self._max_iter = max_iter
        self._iter: dict[str, int] = defaultdict(int)

    def __call__(self, trial_id: str, result: dict) -> bool:
        self._iter[trial_id] += 1
        return self._iter[trial_id] >= self._max_iter

    def stop_all(self) -> bool:
        return False


class TrialPlateauStopper(Stopper):
    """Stop a trial whose metric has plateaued: the std of its last num_results values is at
    most std, after grace_period results (and, if metric_threshold is set, once the metric
    is past it in `mode`'s direction)."""

    def __init__(self, metric: str, std: float = 0.01, num_results: int = 4,
                 grace_period: int = 4, metric_threshold: float | None = None,
                 mode: str | None = None) -> None:
        if metric_threshold is not None and mode not in ("min", "max"):
            raise ValueError("TrialPlateauStopper with metric_threshold needs mode='min' or 'max'.")
        self._metric, self._std = metric, std
        self._num_results, self._grace_period = num_results, grace_period
        self._threshold, self._mode = metric_threshold, mode
        self._iter: dict[str, int] = defaultdict(int)
        self._window: dict[str, deque] = defaultdict(lambda: deque(maxlen=self._num_results))

    def __call__(self, trial_id: str, result: dict) -> bool:
        value = result.get(self._metric)
        if value is None:
            return False
        self._iter[trial_id] += 1
        self._window[trial_id].append(value)
        if self._iter[trial_id] < self._grace_period:
            return False
        if len(self._window[trial_id]) < self._num_results:
            return False
        if self._threshold is not None:
            if self._mode == "min" and value > self._threshold:
                return False
            if self._mode == "max" and value < self._threshold:
                return False
        return float(np.std(self._window[trial_id])) <= self._std

    def stop_all(self) -> bool:
        return False


class TimeoutStopper(Stopper):
    """End the experiment after `timeout` seconds (a number or a datetime.timedelta)."""

    def __init__(self, timeout: Any) -> None:
        seconds = timeout.total_seconds() if hasattr(timeout, "total_seconds") else timeout
        if not isinstance(seconds, (int, float)) or seconds <= 0:
            raise ValueError(f"TimeoutStopper needs a positive timeout, got {timeout!r}.")
        self._budget = float(seconds)
        self._start = time.monotonic()

    def __call__(self, trial_id: str, result: dict) -> bool:
        return False

    def stop_all(self) -> bool:
        return time.monotonic() - self._start >= self._budget


class ExperimentPlateauStopper(Stopper):
    """End the experiment once the best `top` trials' metric has plateaued."""

    def __init__(self, metric: str, std: float = 0.001, top: int = 10, mode: str = "min",
                 patience: int = 0) -> None:
        if mode not in ("min", "max"):
            raise ValueError("ExperimentPlateauStopper mode must be 'min' or 'max'.")
        self._metric, self._std, self._top, self._mode = metric, std, top, mode
        self._patience, self._iterations = patience, 0
        self._values: list[float] = []

    def __call__(self, trial_id: str, result: dict) -> bool:
        if self._metric in result:
            self._values.append(float(result[self._metric]))
            best = sorted(self._values, reverse=self._mode == "max")[: self._top]
            if len(best) == self._top and float(np.std(best)) <= self._std:
                self._iterations += 1
            else:
                self._iterations = 0
        return self.stop_all()

    def stop_all(self) -> bool:
        return len(self._values) >= self._top and self._iterations > self._patience


def make_stopper(stop: Any) -> Stopper:
    """RunConfig(stop=...) in any of its forms, as one Stopper."""
    if stop is None:
        return NoopStopper()
    if isinstance(stop, Stopper):
        return stop
    if isinstance(stop, dict):
        return _DictStopper(stop)
    if callable(stop):
        return FunctionStopper(stop)
    if isinstance(stop, (list, tuple)) and all(isinstance(s, Stopper) for s in stop):
        return CombinedStopper(*stop)
    raise ValueError(f"RunConfig(stop=...) takes a dict, a function (trial_id, result) -> bool "
                     f"or a Stopper; got {type(stop).__name__}.")
