"""`Tuner`: run a trainable over a search space. Builds the search, scheduler and stopper
from TuneConfig/RunConfig, hands them to the trial controller and its runner, and returns a
ResultGrid. `Tuner.restore(path, trainable)` continues a run whose driver stopped or died."""

from __future__ import annotations

import copy
import datetime
import inspect
import os
import uuid
from typing import Any

import raylite
from raylite.train import RunConfig
from raylite.tune import _storage
from raylite.tune.analysis.experiment_analysis import ExperimentAnalysis
from raylite.tune.callback import CallbackList
from raylite.tune.execution.controller import ControllerSettings, TuneController
from raylite.tune.execution.dashboard_feed import feed_for
from raylite.tune.execution.experiment_state import (
    STATE_FILE,
    TUNER_FILE,
    ExperimentWriter,
    load_state,
    load_tuner,
)
from raylite.tune.execution.runner import TrialRunner
from raylite.tune.experiment.trial import Trial
from raylite.tune.progress_reporter import TuneReporter
from raylite.tune.result_grid import ResultGrid
from raylite.tune.schedulers.trial_scheduler import FIFOScheduler, TrialScheduler
from raylite.tune.search.basic_variant import BasicVariantGenerator
from raylite.tune.search.search_algorithm import SearchAlgorithm
from raylite.tune.search.search_generator import SearchGenerator
from raylite.tune.search.searcher import ConcurrencyLimiter, Searcher
from raylite.tune.search.variant_generator import _has_unresolved_values
from raylite.tune.stopper.stopper import make_stopper
from raylite.tune.trainable.trainable import Trainable
from raylite.tune.trainable.util import trial_resources
from raylite.tune.tune_config import TuneConfig


def _default_storage_path() -> str:
    from raylite.api import env_storage_path

    return os.path.expanduser(env_storage_path() or "~/ray_results")


def trainable_name(trainable: Any) -> str:
    if isinstance(trainable, str):
        return trainable
    if hasattr(trainable, "train_loop_per_worker"):
        return type(trainable).__name__
    name = getattr(trainable, "__name__", type(trainable).__name__)
    return "lambda" if name == "<lambda>" else name


def _check_trainable(trainable: Any) -> None:
    if trainable is None:
        raise TypeError("Tuner needs a trainable: a function taking config, a tune.Trainable "
                        "subclass, or a Train trainer such as TorchTrainer(...).")
    if isinstance(trainable, str):
        raise TypeError(f"Trainable {trainable!r} is a registered name; raylite takes the "
                        "function or class itself: pass it to Tuner(...).")
    if inspect.isclass(trainable):
        if not issubclass(trainable, Trainable):
            raise TypeError(f"{trainable.__name__} is a class but not a tune.Trainable: "
                            "subclass ray.tune.Trainable, or pass a function.")
        return
    if hasattr(trainable, "train_loop_per_worker"):
        return
    if not callable(trainable):
        raise TypeError(f"The trainable must be callable, got {type(trainable).__name__}.")


def _build_search(tune_config: TuneConfig, param_space: dict) -> SearchAlgorithm:
    search_alg = tune_config.search_alg
    if search_alg is None:
        search_alg = BasicVariantGenerator(max_concurrent=tune_config.max_concurrent_trials or 0)
    elif isinstance(search_alg, Searcher):
        if tune_config.max_concurrent_trials and not isinstance(search_alg, ConcurrencyLimiter):
            if not search_alg.set_max_concurrency(tune_config.max_concurrent_trials):
                search_alg = ConcurrencyLimiter(search_alg, tune_config.max_concurrent_trials)
        search_alg = SearchGenerator(search_alg)
    elif not isinstance(search_alg, SearchAlgorithm):
        raise TypeError(f"TuneConfig(search_alg=...) takes a Searcher (e.g. OptunaSearch()) or "
                        f"a BasicVariantGenerator, got {type(search_alg).__name__}.")
    taken = search_alg.set_search_properties(tune_config.metric, tune_config.mode,
                                             param_space)
    if not taken and _has_unresolved_values(param_space):
        raise ValueError(
            "You passed a `param_space` parameter to `tune.Tuner()` with unresolved "
            "parameters, but the search algorithm was already instantiated with a search "
            "space. Make sure that `param_space` does not contain any more parameter "
            "definitions - include them in the search algorithm's search space if necessary.")
    search_alg.add_configurations({"config": param_space,
                                   "num_samples": tune_config.num_samples})
    return search_alg


def _build_scheduler(tune_config: TuneConfig) -> TrialScheduler:
    scheduler = tune_config.scheduler or FIFOScheduler()
    if not isinstance(scheduler, TrialScheduler):
        raise TypeError(f"TuneConfig(scheduler=...) takes a TrialScheduler (e.g. "
                        f"ASHAScheduler()), got {type(scheduler).__name__}.")
    if not scheduler.set_search_properties(tune_config.metric, tune_config.mode):
        raise ValueError(
            "You passed a `metric` or `mode` argument to `tune.TuneConfig()`, but the scheduler "
            "you are using was already instantiated with their own `metric` and `mode` "
            "parameters. Either remove the arguments from your scheduler or from "
            "`tune.TuneConfig()` respectively.")
    needs_metric = not isinstance(scheduler, FIFOScheduler)
    if needs_metric and (scheduler.metric is None or getattr(scheduler, "_mode", None) is None):
        raise ValueError(
            f"{type(scheduler).__name__} needs a metric and a mode to compare trials: pass "
            "TuneConfig(metric='your_metric', mode='min' or 'max'), or give them to the "
            "scheduler.")
    return scheduler


class Tuner:
    """Tune a trainable: `Tuner(trainable, param_space=..., tune_config=..., run_config=...)`."""

    def __init__(self, trainable: Any = None, *, param_space: dict | None = None,
                 tune_config: TuneConfig | None = None, run_config: RunConfig | None = None,
                 _tuner_kwargs: dict | None = None, _tuner_internal: Any = None,
                 _entrypoint: Any = None) -> None:
        if _tuner_internal is not None:
            self.__dict__.update(_tuner_internal)
            return
        _check_trainable(trainable)
        if param_space is not None and not isinstance(param_space, dict):
            raise TypeError(f"param_space must be a dict, got {type(param_space).__name__}.")
        if tune_config is not None and not isinstance(tune_config, TuneConfig):
            raise TypeError(f"tune_config must be a tune.TuneConfig, got "
                            f"{type(tune_config).__name__}.")
        if run_config is None and hasattr(trainable, "train_loop_per_worker"):
            run_config = copy.copy(trainable.run_config)
        if run_config is not None and not isinstance(run_config, RunConfig):
            raise TypeError(f"run_config must be a tune.RunConfig, got "
                            f"{type(run_config).__name__}.")
        self._trainable = trainable
        self._param_space = dict(param_space or {})
        self._tune_config = tune_config or TuneConfig()
        self._run_config = run_config or RunConfig()
        self._tuner_kwargs = dict(_tuner_kwargs or {})
        self._restored: dict | None = None
        self._result_grid: ResultGrid | None = None

    # -- running -------------------------------------------------------------------------------
    def fit(self) -> ResultGrid:
        """Run every trial to the end; trial errors are in the ResultGrid (result.error)."""
        if not raylite.is_initialized():
            raylite.init()
        tc, rc = self._tune_config, self._run_config
        name = rc.name or f"{trainable_name(self._trainable)}_" \
            f"{datetime.datetime.now():%Y-%m-%d_%H-%M-%S}"
        storage = rc.storage_path or _default_storage_path()
        experiment_path = _storage.join(storage, name)
        controller = self._controller(experiment_path)
        writer = ExperimentWriter(experiment_path)
        if self._restored is None:
            writer.write_tuner({"trainable_name": trainable_name(self._trainable),
                                "param_space": self._param_space, "tune_config": tc,
                                "run_config": rc})
        reporter = TuneReporter(name, experiment_path, rc.verbose if rc.verbose is not None
                                else 1, metric=tc.metric)
        callbacks = CallbackList(list(rc.callbacks or []))
        total = controller.search_alg.total_samples
        callbacks.call("setup", stop=rc.stop, num_samples=tc.num_samples,
                       total_num_samples=total)
        reporter.start(controller.search_alg, controller.scheduler, total or tc.num_samples)
        reuse = tc.reuse_actors
        if reuse is None:  # Ray's default: reuse for function trainables
            reuse = not inspect.isclass(self._trainable)
        runner = TrialRunner(controller, self._trainable, writer, reporter, callbacks, name,
                             rc.checkpoint_config, reuse_actors=bool(reuse),
                             feed=feed_for(name, controller, experiment_path))
        runner.run()
        reporter.end(controller.get_trials())
        if controller.error is not None:
            raise controller.error
        analysis = ExperimentAnalysis(experiment_path, trials=controller.get_trials(),
                                      default_metric=tc.metric, default_mode=tc.mode)
        self._result_grid = ResultGrid(analysis)
        return self._result_grid

    def _controller(self, experiment_path: str) -> TuneController:
        tc, rc = self._tune_config, self._run_config
        failure = rc.failure_config
        cluster = {k: float(v) for k, v in raylite.cluster_resources().items()
                   if k in ("CPU", "GPU", "memory") or not k.startswith("node:")}
        trainable = self._trainable
        settings = ControllerSettings(
            trainable_name=trainable_name(trainable), experiment_path=experiment_path,
            metric=tc.metric, mode=tc.mode, max_concurrent_trials=tc.max_concurrent_trials,
            time_budget_s=tc.time_budget_s,
            max_failures=failure.max_failures if failure else 0,
            fail_fast=failure.fail_fast if failure else False,
            cluster_resources=cluster,
            resources=lambda config: trial_resources(trainable, config),
            trial_dirname_creator=tc.trial_dirname_creator,
            trial_name_creator=tc.trial_name_creator,
            checkpoint_num_to_keep=getattr(rc.checkpoint_config, "num_to_keep", None),
            checkpoint_score_attribute=getattr(rc.checkpoint_config, "checkpoint_score_attribute", None),
            checkpoint_score_order=getattr(rc.checkpoint_config, "checkpoint_score_order", "max") or "max",
            id_prefix=uuid.uuid4().hex[:5])
        if self._restored is not None:
            state = self._restored
            settings.id_prefix = state.get("id_prefix", settings.id_prefix)
            search_alg = state.get("search_alg") or _build_search(tc, self._param_space)
            scheduler = state.get("scheduler") or _build_scheduler(tc)
            stopper = state.get("stopper") or make_stopper(rc.stop)
            return TuneController(settings, search_alg, scheduler, stopper, state["trials"])
        return TuneController(settings, _build_search(tc, self._param_space),
                              _build_scheduler(tc), make_stopper(rc.stop))

    def get_results(self) -> ResultGrid:
        """The ResultGrid of the last fit() (or of the restored experiment's trials)."""
        if self._result_grid is not None:
            return self._result_grid
        if self._restored is not None:
            tc = self._tune_config
            return ResultGrid(ExperimentAnalysis(self._restored["path"],
                                                 trials=self._restored["trials"],
                                                 default_metric=tc.metric,
                                                 default_mode=tc.mode))
        raise RuntimeError("get_results() has nothing to return yet: call fit() first.")

    # -- restoring -------------------------------------------------------------------------------
    @classmethod
    def can_restore(cls, path: str | os.PathLike, storage_filesystem: Any = None) -> bool:
        """Whether `path` holds an experiment that Tuner.restore can continue."""
        path = os.fspath(path)
        return _storage.exists(_storage.join(path, STATE_FILE)) and \
            _storage.exists(_storage.join(path, TUNER_FILE))

    @classmethod
    def restore(cls, path: str | os.PathLike, trainable: Any, resume_unfinished: bool = True,
                resume_errored: bool = False, restart_errored: bool = False,
                param_space: dict | None = None, storage_filesystem: Any = None,
                _resume_config: Any = None) -> Tuner:
        """Continue the experiment at `path`: unfinished trials resume from their last
        checkpoint; errored ones stay errored unless resume_errored (from the checkpoint) or
        restart_errored (from scratch)."""
        path = os.fspath(path)
        if not cls.can_restore(path):
            raise ValueError(f"No Tune experiment to restore at {path}: it has no "
                             f"{STATE_FILE}/{TUNER_FILE}. Pass the experiment's directory "
                             "(storage_path/name).")
        _check_trainable(trainable)
        saved = load_tuner(path)
        state = load_state(path)
        for trial in state["trials"]:
            _reset_for_resume(trial, resume_unfinished, resume_errored, restart_errored)
        state["path"] = path
        run_config = copy.copy(saved["run_config"])
        storage, name = os.path.split(path.rstrip("/"))
        run_config.storage_path, run_config.name = storage, name
        tuner = cls(trainable, param_space=param_space or saved["param_space"],
                    tune_config=saved["tune_config"], run_config=run_config)
        tuner._restored = state
        return tuner


def _reset_for_resume(trial: Trial, resume_unfinished: bool, resume_errored: bool,
                      restart_errored: bool) -> None:
    if trial.status in (Trial.RUNNING, Trial.PAUSED, Trial.PENDING):
        if resume_unfinished:
            trial.status = Trial.PENDING
            trial.restore_from = trial.checkpoint
        else:
            trial.status = Trial.TERMINATED
    elif trial.status == Trial.ERROR:
        if restart_errored:
            trial.status = Trial.PENDING
            trial.checkpoint, trial.restore_from = None, None
            trial.results, trial.last_result, trial.checkpoints = [], {}, []
            trial.iteration, trial.time_total_s, trial.num_failures = 0, 0.0, 0
            trial.error_msg = None
        elif resume_errored:
            trial.status = Trial.PENDING
            trial.restore_from = trial.checkpoint
            trial.num_failures = 0
            trial.error_msg = None
