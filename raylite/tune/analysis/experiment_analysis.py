"""`ExperimentAnalysis`: the trials of an experiment (finished or restored from its
directory) with the best-trial queries that `tune.run` users call."""

from __future__ import annotations

import math
from numbers import Number
from typing import Any

from raylite.tune.execution.experiment_state import load_state
from raylite.tune.experiment.trial import Trial

_SCOPES = ("all", "last", "avg", "last-5-avg", "last-10-avg")


def _is_finite_number(value: Any) -> bool:
    return isinstance(value, Number) and not isinstance(value, bool) and \
        math.isfinite(float(value))  # type: ignore[arg-type]


def _score(trial: Trial, metric: str, mode: str, scope: str) -> float | None:
    values = [r[metric] for r in trial.results if metric in r]
    if scope == "last":
        values = [trial.last_result[metric]] if metric in trial.last_result else []
    if not values:
        return None
    if scope == "all":
        return max(values) if mode == "max" else min(values)
    if scope == "last":
        return values[-1]
    window = {"avg": len(values), "last-5-avg": 5, "last-10-avg": 10}[scope]
    tail = values[-window:]
    return float(sum(tail) / len(tail))


def _best_trial(trials: list[Trial], metric: str, mode: str, scope: str = "last",
                filter_nan_and_inf: bool = True) -> Trial | None:
    if mode not in ("min", "max"):
        raise ValueError(f"mode must be 'min' or 'max', got {mode!r}.")
    if scope not in _SCOPES:
        raise ValueError(f"scope must be one of {_SCOPES}, got {scope!r}.")
    best, best_score = None, None
    for trial in trials:
        score = _score(trial, metric, mode, scope)
        if score is None or (filter_nan_and_inf and not _is_finite_number(score)):
            continue
        if best_score is None or (score > best_score if mode == "max" else score < best_score):
            best, best_score = trial, score
    return best


def _flatten(d: dict, prefix: str = "") -> dict:
    out: dict = {}
    for key, value in d.items():
        name = f"{prefix}{key}"
        if isinstance(value, dict):
            out.update(_flatten(value, name + "/"))
        else:
            out[name] = value
    return out


class ExperimentAnalysis:
    """The trials of an experiment directory (or of a run just finished)."""

    def __init__(self, experiment_checkpoint_path: str, *, storage_filesystem: Any = None,
                 trials: list[Trial] | None = None, default_metric: str | None = None,
                 default_mode: str | None = None) -> None:
        self.experiment_path = str(experiment_checkpoint_path)
        self.trials = trials if trials is not None else load_state(self.experiment_path)["trials"]
        if default_mode is not None and default_mode not in ("min", "max"):
            raise ValueError(f"default_mode must be 'min' or 'max', got {default_mode!r}.")
        self.default_metric = default_metric
        self.default_mode = default_mode

    # -- picking the best --------------------------------------------------------------------
    def _metric_mode(self, metric: str | None, mode: str | None) -> tuple[str, str]:
        metric = metric or self.default_metric
        mode = mode or self.default_mode
        if not metric or not mode:
            raise ValueError(
                "No metric/mode to rank trials by: pass metric= and mode= here, or set "
                "TuneConfig(metric=..., mode=...) / tune.run(metric=..., mode=...).")
        return metric, mode

    def get_best_trial(self, metric: str | None = None, mode: str | None = None,
                       scope: str = "last", filter_nan_and_inf: bool = True) -> Trial | None:
        metric, mode = self._metric_mode(metric, mode)
        return _best_trial(self.trials, metric, mode, scope, filter_nan_and_inf)

    def get_best_config(self, metric: str | None = None, mode: str | None = None,
                        scope: str = "last") -> dict | None:
        trial = self.get_best_trial(metric, mode, scope)
        return trial.config if trial else None

    def get_best_checkpoint(self, trial: Trial, metric: str | None = None,
                            mode: str | None = None) -> Any:
        metric, mode = self._metric_mode(metric, mode)
        scored = [(c, r[metric]) for c, r in trial.checkpoints if metric in r]
        if not scored:
            return trial.checkpoint
        pick = max if mode == "max" else min
        return pick(scored, key=lambda cs: cs[1])[0]

    @property
    def best_trial(self) -> Trial | None:
        return self.get_best_trial()

    @property
    def best_config(self) -> dict | None:
        return self.get_best_config()

    @property
    def best_checkpoint(self) -> Any:
        trial = self.best_trial
        return self.get_best_checkpoint(trial) if trial else None

    @property
    def best_path(self) -> str | None:
        trial = self.best_trial
        return trial.path if trial else None

    best_logdir = best_path

    @property
    def best_result(self) -> dict | None:
        trial = self.best_trial
        return trial.last_result if trial else None

    @property
    def best_dataframe(self) -> Any:
        trial = self.best_trial
        return self.trial_dataframes.get(trial.path) if trial else None

    @property
    def best_result_df(self) -> Any:
        import pandas

        return pandas.DataFrame([_flatten(self.best_result or {})])

    # -- tables ---------------------------------------------------------------------------------
    @property
    def results(self) -> dict[str, dict]:
        return {t.trial_id: t.last_result for t in self.trials}

    @property
    def results_df(self) -> Any:
        import pandas

        rows = [_flatten(t.last_result) for t in self.trials if t.last_result]
        return pandas.DataFrame(rows).set_index("trial_id") if rows else pandas.DataFrame()

    @property
    def trial_dataframes(self) -> dict[str, Any]:
        import pandas

        return {t.path: pandas.DataFrame([_flatten({k: v for k, v in r.items() if k != "config"})
                                          for r in t.results]) for t in self.trials}

    def dataframe(self, metric: str | None = None, mode: str | None = None) -> Any:
        """One row per trial: its last result (or, with metric/mode, its best one)."""
        import pandas

        rows = []
        for t in self.trials:
            result = t.last_result
            if metric and mode:
                scored = [r for r in t.results if metric in r]
                if scored:
                    pick = max if mode == "max" else min
                    result = pick(scored, key=lambda r: r[metric])
            row = _flatten(dict(result))
            row.setdefault("trial_id", t.trial_id)
            for key, value in _flatten(t.config).items():
                row[f"config/{key}"] = value
            row["logdir"] = t.path
            rows.append(row)
        return pandas.DataFrame(rows)

    def get_all_configs(self, prefix: bool = False) -> dict[str, dict]:
        return {t.path: ({"config": t.config} if prefix else t.config) for t in self.trials}

    def get_trial_checkpoints_paths(self, trial: Trial, metric: str | None = None
                                    ) -> list[tuple[str, Any]]:
        metric = metric or self.default_metric or "training_iteration"
        return [(c.path, r.get(metric)) for c, r in trial.checkpoints]

    def stats(self) -> dict:
        return {"num_trials": len(self.trials)}
