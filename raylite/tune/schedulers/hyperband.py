"""HyperBand (synchronous): trials are grouped into brackets; in each, every trial runs to
the rung's milestone and pauses; when the whole bracket is there, the best 1/eta continue to
the next milestone (eta times longer) and the rest stop.

Worked example: max_t=9, reduction_factor=3 gives brackets s=2 (9 trials from 1 iteration),
s=1 (5 trials from 3) and s=0 (3 trials at 9). In the first, 9 trials run 1 iteration, the
best 3 then run to 3, and the best 1 of those to 9."""

from __future__ import annotations

import math
from typing import Any

from raylite.tune.experiment.trial import Trial
from raylite.tune.schedulers.trial_scheduler import FIFOScheduler, TrialScheduler, _check_mode


class _Bracket:
    def __init__(self, size: int, milestone: float, max_t: float, eta: float) -> None:
        self.size = size
        self.milestone = milestone
        self.max_t = max_t
        self.eta = eta
        self.live: list[Trial] = []
        self.scores: dict[str, float] = {}
        self.scores_done: set[str] = set()  # trials that left the bracket (ended or failed)

    def full(self) -> bool:
        return len(self.live) + len(self.scores_done) >= self.size


class HyperBandScheduler(FIFOScheduler):
    """Ray's parameters: time_attr, metric, mode, max_t, reduction_factor, stop_last_trials."""

    _supports_buffered_results = False

    def __init__(self, time_attr: str = "training_iteration", metric: str | None = None,
                 mode: str | None = None, max_t: int = 81, reduction_factor: float = 3,
                 stop_last_trials: bool = True) -> None:
        if reduction_factor <= 1:
            raise ValueError(f"reduction_factor must be > 1, got {reduction_factor}.")
        _check_mode(mode)
        self._time_attr, self._metric, self._mode = time_attr, metric, mode
        self._max_t, self._eta = max_t, reduction_factor
        self._stop_last_trials = stop_last_trials
        self._s_max = int(math.log(max_t) / math.log(reduction_factor) + 1e-9)
        self._brackets: list[_Bracket] = []
        self._bracket_of: dict[str, _Bracket] = {}
        self._next_s = self._s_max
        self._promoted: set[str] = set()

    def _op(self) -> float:
        return 1.0 if self._mode == "max" else -1.0

    def _new_bracket(self) -> _Bracket:
        s = self._next_s
        self._next_s = self._s_max if s == 0 else s - 1
        size = math.ceil((self._s_max + 1) / (s + 1) * self._eta ** s)
        milestone = self._max_t * self._eta ** (-s)
        bracket = _Bracket(size, milestone, self._max_t, self._eta)
        self._brackets.append(bracket)
        return bracket

    def on_trial_add(self, tune_controller: Any, trial: Trial) -> None:
        bracket = next((b for b in self._brackets if not b.full()), None) or self._new_bracket()
        bracket.live.append(trial)
        self._bracket_of[trial.trial_id] = bracket

    def on_trial_result(self, tune_controller: Any, trial: Trial, result: dict) -> str:
        bracket = self._bracket_of.get(trial.trial_id)
        if bracket is None or self._time_attr not in result:
            return TrialScheduler.CONTINUE
        t = result[self._time_attr]
        if t >= self._max_t:
            return TrialScheduler.STOP if self._stop_last_trials else TrialScheduler.CONTINUE
        if t < bracket.milestone:
            return TrialScheduler.CONTINUE
        if self._metric in result:
            bracket.scores[trial.trial_id] = self._op() * float(result[self._metric])
        self._promoted.discard(trial.trial_id)
        return TrialScheduler.PAUSE

    def _drop(self, trial: Trial) -> None:
        bracket = self._bracket_of.pop(trial.trial_id, None)
        if bracket is not None and trial in bracket.live:
            bracket.live.remove(trial)
            bracket.scores_done.add(trial.trial_id)
            bracket.scores.pop(trial.trial_id, None)

    def on_trial_complete(self, tune_controller: Any, trial: Trial, result: dict) -> None:
        self._drop(trial)

    def on_trial_error(self, tune_controller: Any, trial: Trial) -> None:
        self._drop(trial)

    def on_trial_remove(self, tune_controller: Any, trial: Trial) -> None:
        self._drop(trial)

    def _halve(self, tune_controller: Any, bracket: _Bracket) -> None:
        """Everyone in the bracket is at the milestone: keep the best 1/eta, stop the rest."""
        ranked = sorted(bracket.live, key=lambda t: bracket.scores.get(t.trial_id, -math.inf),
                        reverse=True)
        keep = max(1, int(len(ranked) / bracket.eta))
        bracket.milestone = min(bracket.milestone * bracket.eta, bracket.max_t)
        for trial in ranked[keep:]:
            tune_controller.stop_trial(trial)
        for trial in ranked[:keep]:
            self._promoted.add(trial.trial_id)
        bracket.scores = {}

    def choose_trial_to_run(self, tune_controller: Any) -> Trial | None:
        for trial in tune_controller.get_trials():
            if trial.status == Trial.PENDING:
                return trial
        searching = not tune_controller.search_alg.is_finished()
        for bracket in self._brackets:
            if not bracket.live or any(t.status != Trial.PAUSED for t in bracket.live):
                continue
            if bracket.full() or not searching:
                if not any(t.trial_id in self._promoted for t in bracket.live):
                    self._halve(tune_controller, bracket)
        for trial in tune_controller.get_trials():
            if trial.status == Trial.PAUSED and trial.trial_id in self._promoted:
                return trial
        return None

    def debug_string(self) -> str:
        return f"Using HyperBand: {len(self._brackets)} brackets"


class HyperBandForBOHB(HyperBandScheduler):
    """HyperBand as BOHB uses it (the same halving here)."""
