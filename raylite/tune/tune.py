"""`tune.run(...)`: the older one-call entry point, built on the Tuner; returns an
ExperimentAnalysis and, by default, raises TuneError if any trial failed."""

from __future__ import annotations

from typing import Any

from raylite.train import CheckpointConfig, FailureConfig, RunConfig
from raylite.tune.analysis.experiment_analysis import ExperimentAnalysis
from raylite.tune.error import TuneError
from raylite.tune.experiment.trial import Trial
from raylite.tune.trainable.util import with_resources
from raylite.tune.tune_config import TuneConfig
from raylite.tune.tuner import Tuner


def run(run_or_experiment: Any, *, name: str | None = None, metric: str | None = None,
        mode: str | None = None, stop: Any = None, time_budget_s: Any = None,
        config: dict | None = None, resources_per_trial: Any = None, num_samples: int = 1,
        storage_path: str | None = None, storage_filesystem: Any = None,
        search_alg: Any = None, scheduler: Any = None, checkpoint_config: Any = None,
        verbose: int | None = None, progress_reporter: Any = None, log_to_file: Any = False,
        trial_name_creator: Any = None, trial_dirname_creator: Any = None,
        sync_config: Any = None, export_formats: Any = None, max_failures: int = 0,
        fail_fast: Any = False, restore: str | None = None, resume: Any = None,
        reuse_actors: bool | None = None, raise_on_failed_trial: bool = True,
        callbacks: list | None = None, max_concurrent_trials: int | None = None,
        keep_checkpoints_num: int | None = None, checkpoint_score_attr: str | None = None,
        checkpoint_freq: int = 0, checkpoint_at_end: bool = False, chdir_to_trial_dir: Any = None,
        local_dir: str | None = None, **kwargs: Any) -> ExperimentAnalysis:
    """Run an experiment; see Ray's tune.run for each argument."""
    if kwargs:
        raise TypeError(f"tune.run() got unexpected arguments {sorted(kwargs)}.")
    trainable = run_or_experiment
    if resources_per_trial is not None:
        trainable = with_resources(trainable, resources_per_trial)
    if checkpoint_config is None:
        checkpoint_config = CheckpointConfig(
            num_to_keep=keep_checkpoints_num, checkpoint_score_attribute=checkpoint_score_attr,
            checkpoint_frequency=checkpoint_freq, checkpoint_at_end=checkpoint_at_end)
    run_config = RunConfig(name=name, storage_path=storage_path or local_dir, stop=stop,
                           callbacks=callbacks, verbose=verbose,
                           checkpoint_config=checkpoint_config,
                           failure_config=FailureConfig(max_failures=max_failures,
                                                        fail_fast=fail_fast))
    tune_config = TuneConfig(metric=metric, mode=mode, search_alg=search_alg,
                             scheduler=scheduler, num_samples=num_samples,
                             max_concurrent_trials=max_concurrent_trials,
                             time_budget_s=time_budget_s,
                             trial_dirname_creator=trial_dirname_creator,
                             trial_name_creator=trial_name_creator)
    if restore is not None:
        tuner = Tuner.restore(restore, trainable, resume_errored=resume == "ERRORED_ONLY")
    else:
        tuner = Tuner(trainable, param_space=config or {}, tune_config=tune_config,
                      run_config=run_config)
    grid = tuner.fit()
    analysis = grid._analysis
    failed = [t for t in analysis.trials if t.status == Trial.ERROR]
    if failed and raise_on_failed_trial:
        raise TuneError(f"Trials did not complete: {failed}")
    return analysis


def run_experiments(*args: Any, **kwargs: Any) -> Any:
    raise NotImplementedError("tune.run_experiments is not in raylite yet: use tune.Tuner.")
