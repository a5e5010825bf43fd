"""ASHA (asynchronous successive halving): each trial meets rungs at grace_period * rf^k
iterations; arriving at a rung below the top 1/rf of what that rung has seen stops it.
Nothing waits for other trials, so it suits many concurrent trials.

Worked example: grace_period=1, reduction_factor=2, max_t=8 gives rungs at 1, 2, 4. The
third trial to reach iteration 2 with a worse metric than the 50th percentile of the first
two stops there; trials reaching max_t stop (stop_last_trials)."""

from __future__ import annotations

from typing import Any

import numpy as np

from raylite.tune.experiment.trial import Trial
from raylite.tune.schedulers.trial_scheduler import FIFOScheduler, TrialScheduler, _check_mode


class _Bracket:
    def __init__(self, min_t: float, max_t: float, reduction_factor: float, s: int,
                 stop_last_trials: bool = True) -> None:
        self.rf = reduction_factor
        count = int(np.log(max_t / min_t) / np.log(reduction_factor) - s + 1)
        self._rungs = [(min_t * reduction_factor ** (k + s), {}) for k in reversed(range(count))]
        self._max_t = max_t
        self._stop_last_trials = stop_last_trials

    def cutoff(self, recorded: dict) -> float | None:
        if not recorded:
            return None
        return float(np.nanpercentile(list(recorded.values()), (1 - 1 / self.rf) * 100))

    def on_result(self, trial_id: str, t: float, score: float | None) -> str:
        if t >= self._max_t and self._stop_last_trials:
            return TrialScheduler.STOP
        for milestone, recorded in self._rungs:
            if t < milestone or trial_id in recorded:
                continue
            cutoff = self.cutoff(recorded)
            action = TrialScheduler.CONTINUE
            if cutoff is not None and score is not None and score < cutoff:
                action = TrialScheduler.STOP
            if score is not None:
                recorded[trial_id] = score
            return action
        return TrialScheduler.CONTINUE

    def debug_str(self) -> str:
        return " | ".join(f"Iter {m:.3f}: {self.cutoff(r)}" for m, r in self._rungs)


class AsyncHyperBandScheduler(FIFOScheduler):
    """ASHA; see the module docstring. Ray's parameters and defaults."""

    def __init__(self, time_attr: str = "training_iteration", metric: str | None = None,
                 mode: str | None = None, max_t: float = 100, grace_period: float = 1,
                 reduction_factor: float = 4, brackets: int = 1,
                 stop_last_trials: bool = True) -> None:
        if grace_period <= 0:
            raise ValueError(f"grace_period must be positive, got {grace_period}.")
        if reduction_factor <= 1:
            raise ValueError(f"reduction_factor must be > 1, got {reduction_factor}.")
        if brackets < 1:
            raise ValueError(f"brackets must be >= 1, got {brackets}.")
        if max_t < grace_period:
            raise ValueError(f"max_t ({max_t}) must be at least grace_period ({grace_period}).")
        _check_mode(mode)
        self._time_attr = time_attr
        self._metric, self._mode = metric, mode
        self._max_t, self._grace_period = max_t, grace_period
        self._reduction_factor = reduction_factor
        self._stop_last_trials = stop_last_trials
        self._brackets = [_Bracket(grace_period, max_t, reduction_factor, s, stop_last_trials)
                          for s in range(brackets)]
        self._trial_info: dict[str, _Bracket] = {}
        self._num_stopped = 0
        self._rng = np.random.default_rng()

    def _op(self) -> float:
        return 1.0 if self._mode == "max" else -1.0

    def on_trial_add(self, tune_controller: Any, trial: Trial) -> None:
        if not self._metric or not self._mode:
            raise ValueError(f"{type(self).__name__} needs metric and mode: pass them to it or "
                             "to TuneConfig(metric=..., mode=...).")
        sizes = np.array([len(b._rungs) for b in self._brackets], dtype=float)
        probs = np.exp(sizes - sizes.max())
        index = int(self._rng.choice(len(self._brackets), p=probs / probs.sum()))
        self._trial_info[trial.trial_id] = self._brackets[index]

    def on_trial_result(self, tune_controller: Any, trial: Trial, result: dict) -> str:
        if self._time_attr not in result or self._metric not in result:
            return TrialScheduler.CONTINUE
        bracket = self._trial_info.get(trial.trial_id)
        if bracket is None:
            return TrialScheduler.CONTINUE
        score = result[self._metric]
        score = None if score is None else self._op() * float(score)
        action = bracket.on_result(trial.trial_id, result[self._time_attr], score)
        if action == TrialScheduler.STOP:
            self._num_stopped += 1
        return action

    def on_trial_complete(self, tune_controller: Any, trial: Trial, result: dict) -> None:
        bracket = self._trial_info.pop(trial.trial_id, None)
        if bracket is not None and self._time_attr in result and self._metric in result:
            bracket.on_result(trial.trial_id, result[self._time_attr],
                              self._op() * float(result[self._metric]))

    def on_trial_remove(self, tune_controller: Any, trial: Trial) -> None:
        self._trial_info.pop(trial.trial_id, None)

    def debug_string(self) -> str:
        lines = [f"Using AsyncHyperBand: num_stopped={self._num_stopped}"]
        lines += [f"Bracket: {b.debug_str()}" for b in self._brackets]
        return "\n".join(lines)


ASHAScheduler = AsyncHyperBandScheduler
