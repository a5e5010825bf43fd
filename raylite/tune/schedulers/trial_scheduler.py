"""`TrialScheduler`: decides, on each result, whether a trial continues, pauses or stops, and
which waiting trial runs next. `FIFOScheduler` (the default) runs trials in order and never
stops one early.

Hooks receive the controller (for `get_trials()` / `get_live_trials()`) and the Trial record.
"""

from __future__ import annotations

from typing import Any

from raylite.tune.experiment.trial import Trial


class TrialScheduler:
    """Base class; subclasses override on_trial_result and choose_trial_to_run."""

    CONTINUE = "CONTINUE"
    PAUSE = "PAUSE"
    STOP = "STOP"
    NOOP = "NOOP"

    _metric: str | None = None
    _mode: str | None = None
    _supports_buffered_results = True

    @property
    def metric(self) -> str | None:
        return self._metric

    @property
    def supports_buffered_results(self) -> bool:
        return self._supports_buffered_results

    def set_search_properties(self, metric: str | None, mode: str | None,
                              **spec: Any) -> bool:
        """Take the Tuner's metric and mode unless this scheduler was given its own."""
        if self._metric and metric and self._metric != metric:
            return False
        if self._mode and mode and self._mode != mode:
            return False
        if metric:
            self._metric = metric
        if mode:
            self._mode = mode
        return True

    def on_trial_add(self, tune_controller: Any, trial: Trial) -> None:
        pass

    def on_trial_error(self, tune_controller: Any, trial: Trial) -> None:
        pass

    def on_trial_result(self, tune_controller: Any, trial: Trial, result: dict) -> str:
        return TrialScheduler.CONTINUE

    def on_trial_complete(self, tune_controller: Any, trial: Trial, result: dict) -> None:
        pass

    def on_trial_remove(self, tune_controller: Any, trial: Trial) -> None:
        pass

    def choose_trial_to_run(self, tune_controller: Any) -> Trial | None:
        raise NotImplementedError

    def debug_string(self) -> str:
        return f"Using {type(self).__name__}."

    def save(self, checkpoint_path: str) -> None:
        raise NotImplementedError

    def restore(self, checkpoint_path: str) -> None:
        raise NotImplementedError


class FIFOScheduler(TrialScheduler):
    """Run trials in the order they were created; never pause or stop one early."""

    def __init__(self) -> None:
        pass

    def choose_trial_to_run(self, tune_controller: Any) -> Trial | None:
        for trial in tune_controller.get_trials():
            if trial.status == Trial.PENDING:
                return trial
        for trial in tune_controller.get_trials():
            if trial.status == Trial.PAUSED:
                return trial
        return None

    def debug_string(self) -> str:
        return "Using FIFO scheduling algorithm."


def _check_mode(mode: str | None) -> None:
    if mode is not None and mode not in ("min", "max"):
        raise ValueError(f"mode must be 'min' or 'max', got {mode!r}.")
