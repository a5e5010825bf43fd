"""Population Based Training: every perturbation_interval (in time_attr units), a trial in
the bottom quantile_fraction of the population copies a top-quantile trial's checkpoint
(exploit) and continues with that trial's hyperparameters mutated (explore).

Exploit works through checkpoints: the trial is paused and restarted from the donor's latest
checkpoint with the new config, so function trainables must report checkpoints and resume
from `tune.get_checkpoint()` (class trainables: save_checkpoint/load_checkpoint)."""

from __future__ import annotations

import copy
import math
import random
from collections.abc import Callable
from typing import Any

from raylite.tune.experiment.trial import Trial
from raylite.tune.schedulers.trial_scheduler import FIFOScheduler, TrialScheduler, _check_mode
from raylite.tune.search.sample import Categorical, Domain, Function


class _TrialState:
    def __init__(self, trial: Trial) -> None:
        self.orig_tag = trial.experiment_tag
        self.last_score: float | None = None
        self.last_checkpoint: Any = None
        self.last_perturbation_time = 0.0
        self.last_train_time = 0.0
        self.last_result: dict | None = None


def _explore(config: dict, mutations: dict, resample_probability: float,
             perturbation_factors: tuple[float, float],
             custom_explore_fn: Callable[[dict], dict] | None) -> dict:
    new = copy.deepcopy(config)
    for key, spec in mutations.items():
        if isinstance(spec, dict):
            new[key] = _explore(config.get(key, {}), spec, resample_probability,
                                perturbation_factors, None)
            continue
        current = config.get(key)
        if isinstance(spec, Categorical):
            spec = spec.categories
        if isinstance(spec, (list, tuple)):
            values = list(spec)
            if random.random() < resample_probability or current not in values:
                new[key] = random.choice(values)
            else:
                i = values.index(current) + random.choice([-1, 1])
                new[key] = values[min(max(i, 0), len(values) - 1)]
        elif isinstance(spec, (Domain, Function)) or callable(spec):
            draw = spec.sample if isinstance(spec, Domain) else spec
            if random.random() < resample_probability or current is None:
                new[key] = draw()
            else:
                factor = random.choice(list(perturbation_factors))
                value = current * factor
                new[key] = int(value) if isinstance(current, int) else value
        else:
            raise TypeError(f"hyperparam_mutations[{key!r}] must be a list, a tune search "
                            f"space (tune.uniform(...), ...) or a function; got {spec!r}.")
    if custom_explore_fn is not None:
        new = custom_explore_fn(new)
        if new is None:
            raise ValueError("custom_explore_fn must return the new config.")
    return new


class PopulationBasedTraining(FIFOScheduler):
    """Ray's parameters and defaults; see the module docstring."""

    def __init__(self, time_attr: str = "time_total_s", metric: str | None = None,
                 mode: str | None = None, perturbation_interval: float = 60.0,
                 burn_in_period: float = 0.0, hyperparam_mutations: dict | None = None,
                 quantile_fraction: float = 0.25, resample_probability: float = 0.25,
                 perturbation_factors: tuple[float, float] = (1.2, 0.8),
                 custom_explore_fn: Callable[[dict], dict] | None = None,
                 log_config: bool = True, require_attrs: bool = True,
                 synch: bool = False) -> None:
        if not hyperparam_mutations and not custom_explore_fn:
            raise ValueError("PopulationBasedTraining needs hyperparam_mutations or "
                             "custom_explore_fn: something to explore with.")
        if not 0 <= quantile_fraction <= 0.5:
            raise ValueError(f"quantile_fraction must be in [0, 0.5], got {quantile_fraction}.")
        if perturbation_interval <= 0:
            raise ValueError(f"perturbation_interval must be positive, got "
                             f"{perturbation_interval}.")
        _check_mode(mode)
        self._time_attr, self._metric, self._mode = time_attr, metric, mode
        self._perturbation_interval = perturbation_interval
        self._burn_in_period = burn_in_period
        self._hyperparam_mutations = hyperparam_mutations or {}
        self._quantile_fraction = quantile_fraction
        self._resample_probability = resample_probability
        self._perturbation_factors = perturbation_factors
        self._custom_explore_fn = custom_explore_fn
        self._require_attrs = require_attrs
        self._synch = synch
        self._trial_state: dict[str, _TrialState] = {}
        self._num_perturbations = 0
        self._num_checkpoints = 0
        self.exploits: list[tuple[str, str]] = []  # (trial, donor) ids, oldest first

    def on_trial_add(self, tune_controller: Any, trial: Trial) -> None:
        self._trial_state[trial.trial_id] = _TrialState(trial)

    def on_trial_result(self, tune_controller: Any, trial: Trial, result: dict) -> str:
        if self._time_attr not in result or self._metric not in result:
            if self._require_attrs:
                missing = [k for k in (self._time_attr, self._metric) if k not in result]
                raise ValueError(f"PopulationBasedTraining needs {missing} in every result of "
                                 f"trial {trial}; report them, or pass require_attrs=False.")
            return TrialScheduler.CONTINUE
        state = self._trial_state.setdefault(trial.trial_id, _TrialState(trial))
        now = result[self._time_attr]
        score = float(result[self._metric]) * (1.0 if self._mode == "max" else -1.0)
        state.last_score, state.last_result = score, result
        state.last_checkpoint = trial.checkpoint
        if now < self._burn_in_period or \
                now - state.last_perturbation_time < self._perturbation_interval:
            return TrialScheduler.CONTINUE
        state.last_perturbation_time = now
        lower, upper = self._quantiles()
        if trial.trial_id not in lower:
            return TrialScheduler.CONTINUE
        donors = [tid for tid in upper if self._trial_state[tid].last_checkpoint is not None]
        if not donors:
            return TrialScheduler.CONTINUE
        donor_id = random.choice(donors)
        donor = tune_controller.get_trial(donor_id)
        donor_state = self._trial_state[donor_id]
        new_config = _explore(donor.config, self._hyperparam_mutations,
                              self._resample_probability, self._perturbation_factors,
                              self._custom_explore_fn)
        trial.set_config(new_config)
        trial.restore_from = donor_state.last_checkpoint
        trial.set_experiment_tag(f"{state.orig_tag}@perturbed[{donor_id}]")
        state.last_perturbation_time = now
        self._num_perturbations += 1
        self.exploits.append((trial.trial_id, donor_id))
        return TrialScheduler.PAUSE

    def _quantiles(self) -> tuple[list[str], list[str]]:
        scored = sorted((s.last_score, tid) for tid, s in self._trial_state.items()
                        if s.last_score is not None)
        if len(scored) <= 1:
            return [], []
        n = math.ceil(len(scored) * self._quantile_fraction)
        n = min(n, len(scored) // 2)
        if n == 0:
            return [], []
        return [tid for _, tid in scored[:n]], [tid for _, tid in scored[-n:]]

    def on_trial_complete(self, tune_controller: Any, trial: Trial, result: dict) -> None:
        state = self._trial_state.get(trial.trial_id)
        if state is not None and self._metric in result:
            state.last_score = float(result[self._metric]) * (1.0 if self._mode == "max"
                                                               else -1.0)

    def choose_trial_to_run(self, tune_controller: Any) -> Trial | None:
        for status in (Trial.PENDING, Trial.PAUSED):
            candidates = [t for t in tune_controller.get_trials() if t.status == status]
            if candidates:
                return min(candidates, key=lambda t: t.last_result.get(self._time_attr, 0))
        return None

    def debug_string(self) -> str:
        return f"PopulationBasedTraining: {self._num_perturbations} perturbs"
