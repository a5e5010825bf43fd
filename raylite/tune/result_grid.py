"""`ResultGrid`: what Tuner.fit() returns, one `Result` per trial, with the best-result query
and a dataframe of all trials."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from raylite.train import Result as _TrainResult
from raylite.tune.analysis.experiment_analysis import ExperimentAnalysis, _best_trial
from raylite.tune.error import TuneError
from raylite.tune.experiment.trial import Trial


class Result(_TrainResult):
    """A trial's outcome: metrics (its last result), checkpoint, error, path, config and
    metrics_dataframe (one row per result). The same class as ray.train's Result."""

    def __init__(self, *args: Any, config: dict | None = None, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._config = config

    @property
    def config(self) -> dict | None:  # type: ignore[override]
        return self._config if self._config is not None else super().config


def _result_of(trial: Trial) -> Result:
    error = TuneError(trial.error_msg) if trial.status == Trial.ERROR else None
    history = [{k: v for k, v in r.items()} for r in trial.results]
    return Result(metrics=dict(trial.last_result), checkpoint=trial.checkpoint, error=error,
                  path=trial.path, metrics_history=history,
                  best_checkpoints=list(trial.checkpoints), config=trial.config)


class ResultGrid:
    """The results of every trial of one Tuner.fit()."""

    def __init__(self, experiment_analysis: ExperimentAnalysis) -> None:
        self._analysis = experiment_analysis
        self._results = [_result_of(t) for t in experiment_analysis.trials]

    @property
    def experiment_path(self) -> str:
        return self._analysis.experiment_path

    @property
    def filesystem(self) -> Any:
        return None

    def get_best_result(self, metric: str | None = None, mode: str | None = None,
                        scope: str = "last", filter_nan_and_inf: bool = True) -> Result:
        """The trial with the best `metric` (by its last value, or scope 'all' / 'avg' /
        'last-5-avg' / 'last-10-avg')."""
        if len(self._analysis.trials) == 1:
            return self._results[0]
        metric = metric or self._analysis.default_metric
        mode = mode or self._analysis.default_mode
        if not metric:
            raise ValueError("No metric is provided. Either pass in a `metric` arg to "
                             "`get_best_result()` or specify a metric in the `TuneConfig` of "
                             "your `Tuner`.")
        if not mode:
            raise ValueError("No mode is provided. Either pass in a `mode` arg to "
                             "`get_best_result()` or specify a mode in the `TuneConfig` of your "
                             "`Tuner`.")
        best = _best_trial(self._analysis.trials, metric, mode, scope, filter_nan_and_inf)
        if best is None:
            raise RuntimeError(
                f"No best trial found for the given metric: {metric}. This means that no trial "
                "has reported this metric, or all values reported for this metric are NaN. To "
                "not ignore NaN values, you can set the `filter_nan_and_inf` arg to False.")
        return self._results[self._analysis.trials.index(best)]

    def get_dataframe(self, filter_metric: str | None = None,
                      filter_mode: str | None = None) -> Any:
        """One row per trial (its last result, or its best by filter_metric/filter_mode)."""
        if bool(filter_metric) != bool(filter_mode):
            raise ValueError("Pass both filter_metric and filter_mode, or neither.")
        return self._analysis.dataframe(filter_metric, filter_mode)

    @property
    def errors(self) -> list[BaseException]:
        return [r.error for r in self._results if r.error is not None]

    @property
    def num_errors(self) -> int:
        return len(self.errors)

    @property
    def num_terminated(self) -> int:
        return sum(t.status == Trial.TERMINATED for t in self._analysis.trials)

    def __len__(self) -> int:
        return len(self._results)

    def __getitem__(self, i: int) -> Result:
        return self._results[i]

    def __iter__(self) -> Iterator[Result]:
        return iter(self._results)

    def __repr__(self) -> str:
        return "ResultGrid<[\n  " + ",\n  ".join(repr(r) for r in self._results) + "\n]>"
