"""User callbacks from ``RunConfig(callbacks=[...])``, called on the driver.

Two shapes are accepted, so code written for either Ray API runs unchanged:

- Ray Train's ``UserCallback``: ``after_report(run_context, metrics, checkpoint)``
  after each report (``metrics[i]`` is rank i's dict; ``{}`` for a rank that has
  not made that report yet, since raylite's ``report`` is not a barrier) and
  ``after_exception(run_context, worker_exceptions)`` after a worker failure.
- Ray Tune's ``Callback`` (what ``RunConfig(callbacks=...)`` took in Ray's older
  Train): ``setup``, ``on_trial_start``, ``on_trial_result(iteration, trials,
  trial, result)``, ``on_checkpoint``, ``on_trial_recover``, ``on_trial_error``,
  ``on_trial_complete`` and ``on_experiment_end``; the whole run is one "trial".

Hooks a callback lacks are skipped. A callback that raises ends the run: ``fit()``
raises its exception (the workers are stopped first), as in Ray.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from raylite.train.checkpoint import Checkpoint

_TRAIN_HOOKS = ("after_report", "after_exception")
_TUNE_HOOKS = (
    "setup", "on_trial_start", "on_trial_result", "on_checkpoint", "on_trial_recover",
    "on_trial_error", "on_trial_complete", "on_experiment_end", "on_trial_save",
)


class UserCallback:
    """Base for driver-side callbacks (Ray's ``ray.train.UserCallback``); override what you need."""

    def after_report(
        self, run_context: TrainRunContext, metrics: list[dict[str, Any]], checkpoint: Checkpoint | None
    ) -> None:
        """Called after each report, with every rank's metrics and the persisted checkpoint (or None)."""

    def after_exception(self, run_context: TrainRunContext, worker_exceptions: dict[int, Exception]) -> None:
        """Called after a worker failed, with its exception by world rank."""


@dataclass(frozen=True)
class TrainRunContext:
    """What a callback can ask about the run (Ray's ``TrainRunContext``)."""

    run_config: Any
    train_loop_config: dict[str, Any] | None = None
    scaling_config: Any = None
    datasets: dict[str, Any] = field(default_factory=dict)

    def get_run_config(self) -> Any:
        return self.run_config

    def get_train_loop_config(self) -> dict[str, Any] | None:
        return self.train_loop_config

    def get_scaling_config(self) -> Any:
        return self.scaling_config


class TrialView:
    """The whole run seen as one Tune trial, for Tune-shaped callbacks."""

    def __init__(self, trial_id: str, config: dict[str, Any] | None, path: str) -> None:
        self.trial_id = trial_id
        self.trial_name = trial_id
        self.experiment_tag = trial_id
        self.config = dict(config or {})
        self.path = self.local_path = path
        self.status = "PENDING"
        self.last_result: dict[str, Any] = {}
        self.checkpoint: Checkpoint | None = None
        self.num_failures = 0

    def __str__(self) -> str:
        return self.trial_id

    def __repr__(self) -> str:
        return f"TrialView({self.trial_id!r}, status={self.status})"


class CallbackFailed(Exception):
    """Internal: a user callback raised; the controller ends the run with ``__cause__``."""


def validate_callbacks(callbacks: Sequence[Any] | None) -> list[Any]:
    """The callbacks as a list; anything with none of the known hooks is a TypeError now."""
    out = list(callbacks or [])
    for cb in out:
        if not any(callable(getattr(cb, h, None)) for h in _TRAIN_HOOKS + _TUNE_HOOKS):
            raise TypeError(
                f"RunConfig(callbacks=[...]) got {cb!r}, which has none of the callback hooks. "
                "Subclass raylite.train.UserCallback and override after_report / after_exception, "
                "or define Tune-style hooks such as on_trial_result(iteration, trials, trial, result)."
            )
    return out


class CallbackDispatcher:
    """Calls each callback's hooks at the run's events; one per ``fit()``."""

    def __init__(self, callbacks: Sequence[Any], run_context: TrainRunContext, trial: TrialView) -> None:
        self._callbacks = list(callbacks)
        self._context = run_context
        self._trial = trial
        self._iteration = 0

    def _call(self, hook: str, *args: Any, **kwargs: Any) -> None:
        for cb in self._callbacks:
            fn = getattr(cb, hook, None)
            if not callable(fn):
                continue
            try:
                fn(*args, **kwargs)
            except Exception as e:  # noqa: BLE001 - re-raised by the controller as the run's error
                raise CallbackFailed(f"{type(cb).__name__}.{hook} raised {type(e).__name__}: {e}") from e

    def _tune(self, hook: str, **kwargs: Any) -> None:
        self._call(hook, iteration=self._iteration, trials=[self._trial], trial=self._trial, **kwargs)

    def started(self, attempt: int) -> None:
        if attempt == 1:
            self._call("setup", stop=None, num_samples=1, total_num_samples=1)
            self._trial.status = "RUNNING"
            self._tune("on_trial_start")
        else:
            self._trial.status = "RUNNING"
            self._tune("on_trial_recover")

    def reported(self, rank_metrics: list[dict[str, Any]], result: dict[str, Any],
                 checkpoint: Checkpoint | None) -> None:
        self._iteration += 1
        self._trial.last_result = dict(result)
        self._call("after_report", self._context, rank_metrics, checkpoint)
        self._tune("on_trial_result", result=dict(result))
        if checkpoint is not None:
            self._trial.checkpoint = checkpoint
            self._tune("on_checkpoint", checkpoint=checkpoint)

    def worker_failed(self, rank: int, exception: BaseException | None, description: str) -> None:
        self._trial.num_failures += 1
        exc = exception if isinstance(exception, Exception) else RuntimeError(description)
        self._call("after_exception", self._context, {rank: exc})

    def ended(self, errored: bool) -> None:
        self._trial.status = "ERROR" if errored else "TERMINATED"
        self._tune("on_trial_error" if errored else "on_trial_complete")
        self._call("on_experiment_end", trials=[self._trial])
