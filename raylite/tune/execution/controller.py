"""The trial controller: every decision of a Tune run, made from events, with no I/O.

The runner (execution/runner.py) feeds it events (a trial reported, finished, failed; time
passed) and carries out the effects it returns (start a trial's actor, let it run on, stop
it, save the experiment). The searcher and scheduler are called from here, so a test can drive
a whole experiment with plain calls and a fake clock.
"""

from __future__ import annotations

import datetime
import os
import socket
from dataclasses import dataclass, field
from typing import Any

from raylite.train import Checkpoint
from raylite.tune.experiment.trial import Trial
from raylite.tune.schedulers.trial_scheduler import TrialScheduler
from raylite.tune.search.search_algorithm import SearchAlgorithm
from raylite.tune.stopper.stopper import Stopper


# -- events (past tense) ----------------------------------------------------------------
@dataclass(frozen=True)
class TrialReported:
    trial_id: str
    metrics: dict
    checkpoint_path: str | None = None
    time_this_iter_s: float = 0.0
    timestamp: float = 0.0


@dataclass(frozen=True)
class TrialFinished:
    trial_id: str


@dataclass(frozen=True)
class TrialFailed:
    trial_id: str
    error: str


@dataclass(frozen=True)
class TimePassed:
    now_s: float


# -- effects (imperative) -----------------------------------------------------------------
@dataclass(frozen=True)
class StartTrial:
    trial: Trial
    checkpoint: Checkpoint | None


@dataclass(frozen=True)
class ContinueTrial:
    trial: Trial


@dataclass(frozen=True)
class StopTrial:
    trial: Trial
    save: bool = False  # pause: a class trainable saves first


@dataclass(frozen=True)
class Notify:
    """Tell callbacks: hook is a Callback method name (on_trial_result, ...)."""

    hook: str
    trial: Trial
    result: dict | None = None


@dataclass(frozen=True)
class SaveExperiment:
    pass


@dataclass(frozen=True)
class DeleteCheckpoints:
    """A trial's checkpoints past CheckpointConfig(num_to_keep=...): remove them from storage."""

    trial: Trial
    checkpoints: tuple[Checkpoint, ...]


Event = TrialReported | TrialFinished | TrialFailed | TimePassed
Effect = StartTrial | ContinueTrial | StopTrial | Notify | SaveExperiment | DeleteCheckpoints


class MetricNotReportedError(ValueError):
    """A trial's results lack the metric that TuneConfig(metric=...) optimizes."""


class TrialUnschedulableError(RuntimeError):
    """A trial asks for more resources than the whole cluster has."""


@dataclass
class ControllerSettings:
    trainable_name: str
    experiment_path: str
    metric: str | None = None
    mode: str | None = None
    max_concurrent_trials: int | None = None
    time_budget_s: float | None = None
    max_failures: int = 0
    fail_fast: bool | str = False
    cluster_resources: dict[str, float] = field(default_factory=dict)
    resources: Any = None  # PlacementGroupFactory of every trial
    trial_dirname_creator: Any = None
    trial_name_creator: Any = None
    id_prefix: str = "00000"
    start_s: float = 0.0
    strict_metric_checking: bool = True
    # RunConfig(checkpoint_config=CheckpointConfig(...)): how many of a trial's checkpoints stay
    checkpoint_num_to_keep: int | None = None
    checkpoint_score_attribute: str | None = None
    checkpoint_score_order: str = "max"


class TuneController:
    """Decisions for one experiment; see the module docstring."""

    def __init__(self, settings: ControllerSettings, search_alg: SearchAlgorithm,
                 scheduler: TrialScheduler, stopper: Stopper,
                 trials: list[Trial] | None = None) -> None:
        self.settings = settings
        self.search_alg = search_alg
        self.scheduler = scheduler
        self.stopper = stopper
        self._trials: list[Trial] = list(trials or [])
        self._by_id = {t.trial_id: t for t in self._trials}
        self._next_index = len(self._trials)
        self._stopping_all = False
        self._deferred: list[Effect] = []  # effects of scheduler calls made between events
        self.error: BaseException | None = None

    # -- what schedulers and callbacks read --------------------------------------------------
    def get_trials(self) -> list[Trial]:
        return self._trials

    def get_live_trials(self) -> list[Trial]:
        return [t for t in self._trials if not t.is_finished]

    def get_trial(self, trial_id: str) -> Trial:
        return self._by_id[trial_id]

    def is_finished(self) -> bool:
        if self.error is not None:
            return not any(t.status == Trial.RUNNING for t in self._trials)
        searching = not (self.search_alg.is_finished() or self._stopping_all)
        return not searching and not any(t.status in (Trial.PENDING, Trial.RUNNING, Trial.PAUSED)
                                         for t in self._trials)

    def stop_trial(self, trial: Trial) -> None:
        """For schedulers: end a trial that is not running (HyperBand's halving)."""
        if trial.status in (Trial.PENDING, Trial.PAUSED):
            self._deferred += self._complete(trial, dict(trial.last_result), stop_actor=False)

    # -- starting trials ---------------------------------------------------------------------
    def fill(self) -> list[Effect]:
        """Start waiting trials while concurrency and resources allow; ask the searcher for
        new ones when nothing waits."""
        effects: list[Effect] = self._deferred
        self._deferred = []
        if self.error is not None or self._stopping_all:
            return effects
        while self._room_for_one_more():
            if not any(t.status == Trial.PENDING for t in self._trials):
                if not self._create_trial(effects):
                    if not any(t.status == Trial.PAUSED for t in self._trials):
                        break
            trial = self.scheduler.choose_trial_to_run(self)
            if trial is None or not self._fits(trial):
                break
            effects.append(self._start(trial))
        return effects

    def _running(self) -> list[Trial]:
        return [t for t in self._trials if t.status == Trial.RUNNING]

    def _room_for_one_more(self) -> bool:
        limit = self.settings.max_concurrent_trials
        return not limit or len(self._running()) < limit

    def _fits(self, trial: Trial) -> bool:
        total = self.settings.cluster_resources
        if not total:
            return True
        needed = trial.placement_group_factory.required_resources
        short = {k: v for k, v in needed.items() if v > total.get(k, 0.0) + 1e-9}
        if short:
            have = {k: total.get(k, 0.0) for k in needed}
            raise TrialUnschedulableError(
                f"Trial {trial} needs {needed} but the whole cluster has {have}: it can never "
                "be scheduled. Ask for less (tune.with_resources(trainable, {...}) or the "
                "ScalingConfig), or start a cluster with more resources.")
        used: dict[str, float] = {}
        for running in self._running():
            for k, v in running.placement_group_factory.required_resources.items():
                used[k] = used.get(k, 0.0) + v
        return all(used.get(k, 0.0) + v <= total.get(k, 0.0) + 1e-9 for k, v in needed.items())

    def _create_trial(self, effects: list[Effect]) -> bool:
        if self.search_alg.is_finished():
            return False
        trial_id = f"{self.settings.id_prefix}_{self._next_index:05d}"
        suggestion = self.search_alg.next_config(trial_id)
        if suggestion is None:
            return False
        self._next_index += 1
        resources = self.settings.resources
        if callable(resources):
            resources = resources(suggestion.config)
        trial = Trial(self.settings.trainable_name, trial_id, suggestion.config,
                      experiment_tag=suggestion.tag, resources=resources,
                      max_failures=self.settings.max_failures)
        trial.evaluated_params = _flat_params(suggestion.config)
        if self.settings.trial_name_creator is not None:
            trial.custom_trial_name = str(self.settings.trial_name_creator(trial))
        trial.path = os.path.join(self.settings.experiment_path, self._dirname(trial))
        self._trials.append(trial)
        self._by_id[trial_id] = trial
        self.scheduler.on_trial_add(self, trial)
        effects.append(SaveExperiment())
        return True

    def _dirname(self, trial: Trial) -> str:
        creator = self.settings.trial_dirname_creator
        if creator is not None:
            return str(creator(trial))
        tag = trial.experiment_tag[:100]
        stamp = datetime.datetime.now().strftime("%Y-%m-%d_%H-%M-%S")
        return f"{trial.trainable_name}_{trial.trial_id}_{tag}_{stamp}".replace("/", "_")

    def _start(self, trial: Trial) -> StartTrial:
        checkpoint = trial.restore_from or (trial.checkpoint if trial.num_failures else None)
        if trial.status == Trial.PAUSED and checkpoint is None:
            checkpoint = trial.checkpoint
        trial.restore_from = None
        trial.status = Trial.RUNNING
        trial.iterations_since_restore = 0
        trial.time_since_restore = 0.0
        return StartTrial(trial, checkpoint)

    # -- events ------------------------------------------------------------------------------
    def handle(self, event: Event) -> list[Effect]:
        """The effects of one event; the runner calls fill() after each batch."""
        if isinstance(event, TimePassed):
            return self._on_time(event.now_s)
        trial = self._by_id[event.trial_id]
        if trial.status != Trial.RUNNING:
            return []  # a late message from a trial already stopped
        if isinstance(event, TrialReported):
            return self._on_result(trial, event)
        if isinstance(event, TrialFinished):
            return self._complete(trial, dict(trial.last_result, done=True), stop_actor=True)
        return self._on_failure(trial, event.error)

    def _on_time(self, now_s: float) -> list[Effect]:
        budget = self.settings.time_budget_s
        over = budget is not None and now_s - self.settings.start_s >= budget
        if over or self.stopper.stop_all():
            return self.stop_all()
        return []

    def stop_all(self) -> list[Effect]:
        """End the experiment: no new trials; running ones end as TERMINATED."""
        self._stopping_all = True
        self.search_alg.set_finished()
        effects: list[Effect] = []
        for trial in self._trials:
            if trial.status == Trial.RUNNING:
                effects += self._complete(trial, dict(trial.last_result), stop_actor=True)
            elif trial.status in (Trial.PENDING, Trial.PAUSED):
                trial.status = Trial.TERMINATED
        return effects

    def _augment(self, trial: Trial, event: TrialReported) -> dict:
        trial.iteration += 1
        trial.iterations_since_restore += 1
        trial.time_total_s += event.time_this_iter_s
        trial.time_since_restore += event.time_this_iter_s
        result = dict(event.metrics)
        result.setdefault("training_iteration", trial.iteration)
        stamp = event.timestamp
        result.update(
            trial_id=trial.trial_id, experiment_tag=trial.experiment_tag,
            time_this_iter_s=event.time_this_iter_s, time_total_s=trial.time_total_s,
            timestamp=int(stamp),
            date=datetime.datetime.fromtimestamp(stamp).strftime("%Y-%m-%d_%H-%M-%S"),
            pid=result.get("pid", os.getpid()), hostname=result.get("hostname",
                                                                    socket.gethostname()),
            node_ip=result.get("node_ip", "127.0.0.1"), done=False,
            iterations_since_restore=trial.iterations_since_restore,
            time_since_restore=trial.time_since_restore,
            checkpoint_dir_name=os.path.basename(event.checkpoint_path)
            if event.checkpoint_path else None,
            config=trial.config)
        return result

    def _check_metric(self, trial: Trial, result: dict) -> None:
        metric = self.settings.metric
        if metric and self.settings.strict_metric_checking and metric not in result:
            reported = sorted(k for k in result if k not in _AUTO_KEYS)
            raise MetricNotReportedError(
                f"Trial {trial} reported a result without the metric {metric!r} that "
                f"TuneConfig(metric=...) optimizes; it reported {reported}. Report it with "
                f"tune.report({{{metric!r}: value}}), or set TuneConfig(metric=...) to one of "
                "the reported names.")

    def _on_result(self, trial: Trial, event: TrialReported) -> list[Effect]:
        user_done = event.metrics.get("done") is True
        result = self._augment(trial, event)
        try:
            self._check_metric(trial, result)
            should_stop = self.stopper(trial.trial_id, result) or user_done
        except (MetricNotReportedError, KeyError) as exc:
            self.error = exc
            return self.stop_all()
        if event.checkpoint_path:
            checkpoint = Checkpoint(event.checkpoint_path)
            trial.checkpoint = checkpoint
            trial.num_checkpoints += 1
            trial.checkpoints.append((checkpoint, result))
        trial.update_last_result(result)
        effects: list[Effect] = [Notify("on_trial_result", trial, result)]
        dropped = self._checkpoints_past_limit(trial)
        if dropped:
            effects.append(DeleteCheckpoints(trial, tuple(dropped)))
        self.search_alg.on_trial_result(trial.trial_id, result)
        decision = self.scheduler.on_trial_result(self, trial, result)
        if self.stopper.stop_all():
            return effects + self.stop_all()
        if should_stop or decision == TrialScheduler.STOP:
            result = dict(result, done=should_stop or result.get("done", False))
            trial.last_result = result
            return effects + self._complete(trial, result, stop_actor=True)
        if decision == TrialScheduler.PAUSE:
            trial.status = Trial.PAUSED
            return effects + [StopTrial(trial, save=True), SaveExperiment()]
        return effects + [ContinueTrial(trial)]

    def _checkpoints_past_limit(self, trial: Trial) -> list[Checkpoint]:
        """Take the checkpoints past `checkpoint_num_to_keep` off the trial, as Ray does: the
        best ones by `checkpoint_score_attribute` (the newest without one), and always the
        latest, which a retry or a PBT exploit resumes from."""
        keep = self.settings.checkpoint_num_to_keep
        if keep is None or len(trial.checkpoints) <= keep:
            return []
        attr = self.settings.checkpoint_score_attribute
        if attr is None:
            kept = trial.checkpoints[-keep:]
        else:
            sign = 1.0 if self.settings.checkpoint_score_order == "max" else -1.0

            def score(entry: tuple[Checkpoint, dict]) -> float:
                value = entry[1].get(attr)
                return sign * value if isinstance(value, int | float) else -float("inf")  # unscored go first

            kept = sorted(trial.checkpoints, key=score, reverse=True)[:keep]
        kept_ids = {id(entry) for entry in kept} | {id(trial.checkpoints[-1])}
        dropped = [c for entry in trial.checkpoints if id(entry) not in kept_ids for c in (entry[0],)]
        trial.checkpoints = [entry for entry in trial.checkpoints if id(entry) in kept_ids]
        return dropped

    def _complete(self, trial: Trial, result: dict, stop_actor: bool) -> list[Effect]:
        trial.status = Trial.TERMINATED
        trial.last_result = result
        if trial.results:
            trial.results[-1] = result
        self.search_alg.on_trial_complete(trial.trial_id, result=result)
        self.scheduler.on_trial_complete(self, trial, result)
        effects: list[Effect] = [StopTrial(trial)] if stop_actor else []
        return effects + [Notify("on_trial_complete", trial, result), SaveExperiment()]

    def _on_failure(self, trial: Trial, error: str) -> list[Effect]:
        trial.num_failures += 1
        trial.error_msg = error
        retries = self.settings.max_failures
        if retries == -1 or trial.num_failures <= retries:
            trial.status = Trial.PENDING
            trial.restore_from = trial.checkpoint
            return [StopTrial(trial), Notify("on_trial_recover", trial), SaveExperiment()]
        trial.status = Trial.ERROR
        self.search_alg.on_trial_complete(trial.trial_id, result=None, error=True)
        self.scheduler.on_trial_error(self, trial)
        effects: list[Effect] = [StopTrial(trial), Notify("on_trial_error", trial),
                                 SaveExperiment()]
        if self.settings.fail_fast:
            # Ray: fail_fast=True stops the experiment and fit() returns the ResultGrid with the
            # error in it; only fail_fast="raise" raises from fit()
            if self.settings.fail_fast == "raise":
                self.error = RuntimeError(f"Trial {trial} failed and fail_fast='raise' is set:\n{error}")
            effects += self.stop_all()
        return effects


_AUTO_KEYS = {"trial_id", "experiment_tag", "time_this_iter_s", "time_total_s", "timestamp",
              "date", "pid", "hostname", "node_ip", "done", "iterations_since_restore",
              "time_since_restore", "checkpoint_dir_name", "config", "training_iteration"}


def _flat_params(config: dict, prefix: str = "") -> dict:
    out = {}
    for key, value in config.items():
        name = f"{prefix}{key}"
        if isinstance(value, dict):
            out.update(_flat_params(value, name + "/"))
        else:
            out[name] = value
    return out
