"""`Searcher`: the base of every search algorithm that proposes one config at a time
(Optuna, HyperOpt, custom ones), and `ConcurrencyLimiter`, which caps how many of its
suggestions run at once.

Lifecycle of one suggestion: suggest(trial_id) -> config | None (nothing now, ask again later)
| Searcher.FINISHED (no more, ever); then on_trial_result(trial_id, result)* and exactly one
on_trial_complete(trial_id, result, error). Tune drives it through a SearchGenerator.
"""

from __future__ import annotations

import copy
import glob
import logging
import os
import pickle
import uuid
from typing import Any

logger = logging.getLogger(__name__)


def _check_metric_mode(metric: Any, mode: Any) -> None:
    if not metric or not mode:
        return
    if isinstance(mode, str):
        if mode not in ("min", "max"):
            raise ValueError(f"mode must be 'min' or 'max', got {mode!r}.")
    elif isinstance(mode, list):
        if not isinstance(metric, list) or len(metric) != len(mode):
            raise ValueError("A list of modes needs a list of metrics of the same length.")
        bad = [m for m in mode if m not in ("min", "max", "obs")]
        if bad:
            raise ValueError(f"Each mode must be 'min', 'max' or 'obs', got {bad}.")
    else:
        raise ValueError(f"mode must be a string or a list of strings, got {mode!r}.")


class Searcher:
    """Base class for search algorithms that suggest one trial config at a time.

    Subclasses implement `suggest` and `on_trial_complete`; `set_search_properties` lets
    Tune pass the Tuner's metric, mode and param_space (return True if taken)."""

    FINISHED = "FINISHED"
    CKPT_FILE_TMPL = "searcher-state-{}.pkl"

    def __init__(self, metric: str | None = None, mode: str | None = None) -> None:
        _check_metric_mode(metric, mode)
        self._metric = metric
        self._mode = mode

    def set_search_properties(self, metric: str | None, mode: str | None, config: dict,
                              **spec: Any) -> bool:
        """Take the Tuner's metric/mode/param_space; False means 'I keep my own'."""
        return False

    def on_trial_result(self, trial_id: str, result: dict) -> None:
        """An intermediate result of a trial this searcher suggested."""

    def on_trial_complete(self, trial_id: str, result: dict | None = None,
                          error: bool = False) -> None:
        """The trial ended: `result` is its last result; error=True if it failed."""
        raise NotImplementedError

    def suggest(self, trial_id: str) -> dict | None | str:
        """A config for a new trial, None (not now), or Searcher.FINISHED."""
        raise NotImplementedError

    def add_evaluated_point(self, parameters: dict, value: float, error: bool = False,
                            pruned: bool = False,
                            intermediate_values: list[float] | None = None) -> None:
        """Tell the searcher about a point evaluated elsewhere (not every searcher can)."""
        raise NotImplementedError(f"{type(self).__name__} cannot take evaluated points.")

    def add_evaluated_trials(self, trials_or_analysis: Any, metric: str) -> None:
        """Feed past trials (a ResultGrid, ExperimentAnalysis or list of trials) as evaluated."""
        results = _results_of(trials_or_analysis)
        for config, metrics, error in results:
            if metric not in (metrics or {}):
                continue
            self.add_evaluated_point(config, metrics[metric], error=error)

    def save(self, checkpoint_path: str) -> None:
        """Write this searcher's state to a file."""
        raise NotImplementedError

    def restore(self, checkpoint_path: str) -> None:
        """Read the state that `save` wrote."""
        raise NotImplementedError

    def set_max_concurrency(self, max_concurrent: int) -> bool:
        """True if the searcher limits concurrency itself (ConcurrencyLimiter then steps back)."""
        return False

    def get_state(self) -> dict:
        raise NotImplementedError

    def set_state(self, state: dict) -> None:
        raise NotImplementedError

    def save_to_dir(self, checkpoint_dir: str, session_str: str = "default") -> None:
        """Save into an experiment directory (atomically); a searcher without save is skipped."""
        name = self.CKPT_FILE_TMPL.format(session_str)
        tmp = os.path.join(checkpoint_dir, f".{uuid.uuid4()}-tmp-{name}")
        try:
            self.save(tmp)
        except NotImplementedError:
            logger.debug("%s has no save(); its state is not persisted", type(self).__name__)
            return
        if os.path.exists(tmp):
            os.replace(tmp, os.path.join(checkpoint_dir, name))

    def restore_from_dir(self, checkpoint_dir: str) -> None:
        """Restore from the newest searcher state in an experiment directory."""
        files = glob.glob(os.path.join(checkpoint_dir, self.CKPT_FILE_TMPL.format("*")))
        if not files:
            raise RuntimeError(f"No searcher state found in {checkpoint_dir}.")
        self.restore(max(files, key=os.path.getmtime))

    @property
    def metric(self) -> str | None:
        """The metric this searcher optimizes."""
        return self._metric

    @property
    def mode(self) -> str | None:
        """'min' or 'max'."""
        return self._mode


def _results_of(source: Any) -> list[tuple[dict, dict, bool]]:
    """(config, last metrics, errored) of each trial in a ResultGrid/ExperimentAnalysis/list."""
    out = []
    items = getattr(source, "trials", None)
    if items is None:
        items = list(source)
    for item in items:
        config = getattr(item, "config", {}) or {}
        metrics = getattr(item, "last_result", None) or getattr(item, "metrics", None) or {}
        error = bool(getattr(item, "error", None)) or getattr(item, "status", "") == "ERROR"
        out.append((config, metrics, error))
    return out


def _set_search_properties_backwards_compatible(func: Any, metric: str | None,
                                                mode: str | None, config: dict,
                                                **spec: Any) -> bool:
    """Call set_search_properties; older custom searchers take no **spec."""
    try:
        return func(metric, mode, config, **spec)
    except TypeError as exc:
        if "unexpected keyword argument" not in str(exc):
            raise
        logger.warning("Update your Searcher's signature to set_search_properties(metric, "
                       "mode, config, **spec) -> bool.")
        return func(metric, mode, config)


class ConcurrencyLimiter(Searcher):
    """Let at most `max_concurrent` of the wrapped searcher's suggestions run at once.

    batch=True holds results back until every live trial of the batch is done, then passes
    them all on (for searchers that update once per batch)."""

    def __init__(self, searcher: Searcher, max_concurrent: int, batch: bool = False) -> None:
        if not isinstance(max_concurrent, int) or isinstance(max_concurrent, bool) \
                or max_concurrent <= 0:
            raise ValueError(f"max_concurrent must be a positive int, got {max_concurrent!r}.")
        if not isinstance(searcher, Searcher):
            raise RuntimeError(
                f"ConcurrencyLimiter wraps a Searcher; got {type(searcher).__name__}. For the "
                "default search, pass max_concurrent to BasicVariantGenerator or "
                "TuneConfig(max_concurrent_trials=...) instead.")
        self.searcher = searcher
        self.max_concurrent = max_concurrent
        self.batch = batch
        self.live_trials: set[str] = set()
        self.num_unfinished_live_trials = 0
        self.cached_results: dict[str, tuple[dict | None, bool]] = {}
        self._limit_concurrency = True
        self._set_searcher_max_concurrency()
        super().__init__(metric=searcher.metric, mode=searcher.mode)

    def _set_searcher_max_concurrency(self) -> None:
        self._limit_concurrency = not self.searcher.set_max_concurrency(self.max_concurrent)

    def set_max_concurrency(self, max_concurrent: int) -> bool:
        self.max_concurrent = max_concurrent
        return True

    def set_search_properties(self, metric: str | None, mode: str | None, config: dict,
                              **spec: Any) -> bool:
        self._set_searcher_max_concurrency()
        taken = _set_search_properties_backwards_compatible(
            self.searcher.set_search_properties, metric, mode, config, **spec)
        self._metric, self._mode = self.searcher.metric, self.searcher.mode
        return taken

    def suggest(self, trial_id: str) -> dict | None | str:
        if not self._limit_concurrency:
            return self.searcher.suggest(trial_id)
        if trial_id in self.live_trials:
            raise ValueError(f"Trial id {trial_id} was already suggested: ids must be unique.")
        if len(self.live_trials) >= self.max_concurrent:
            return None
        suggestion = self.searcher.suggest(trial_id)
        if suggestion not in (None, Searcher.FINISHED):
            self.live_trials.add(trial_id)
            self.num_unfinished_live_trials += 1
        return suggestion

    def on_trial_complete(self, trial_id: str, result: dict | None = None,
                          error: bool = False) -> None:
        if not self._limit_concurrency:
            self.searcher.on_trial_complete(trial_id, result=result, error=error)
            return
        if trial_id not in self.live_trials:
            return
        if not self.batch:
            self.searcher.on_trial_complete(trial_id, result=result, error=error)
            self.live_trials.remove(trial_id)
            self.num_unfinished_live_trials -= 1
            return
        self.cached_results[trial_id] = (result, error)
        self.num_unfinished_live_trials -= 1
        if self.num_unfinished_live_trials > 0:
            return
        for cached_id, (cached_result, cached_error) in self.cached_results.items():
            self.searcher.on_trial_complete(cached_id, result=cached_result, error=cached_error)
            self.live_trials.discard(cached_id)
        self.cached_results = {}
        self.num_unfinished_live_trials = 0

    def on_trial_result(self, trial_id: str, result: dict) -> None:
        self.searcher.on_trial_result(trial_id, result)

    def add_evaluated_point(self, parameters: dict, value: float, error: bool = False,
                            pruned: bool = False,
                            intermediate_values: list[float] | None = None) -> None:
        self.searcher.add_evaluated_point(parameters, value, error, pruned, intermediate_values)

    def get_state(self) -> dict:
        state = dict(self.__dict__)
        del state["searcher"]
        return copy.deepcopy(state)

    def set_state(self, state: dict) -> None:
        self.__dict__.update(state)

    def save(self, checkpoint_path: str) -> None:
        self.searcher.save(checkpoint_path)

    def restore(self, checkpoint_path: str) -> None:
        self.searcher.restore(checkpoint_path)

    def save_to_dir(self, checkpoint_dir: str, session_str: str = "default") -> None:
        self.searcher.save_to_dir(checkpoint_dir, session_str)
        with open(os.path.join(checkpoint_dir, "concurrency-limiter-state.pkl"), "wb") as f:
            pickle.dump(self.get_state(), f)

    def restore_from_dir(self, checkpoint_dir: str) -> None:
        self.searcher.restore_from_dir(checkpoint_dir)
        path = os.path.join(checkpoint_dir, "concurrency-limiter-state.pkl")
        if os.path.exists(path):
            with open(path, "rb") as f:
                self.set_state(pickle.load(f))
