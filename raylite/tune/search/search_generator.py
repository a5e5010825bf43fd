"""`SearchGenerator`: turn a Searcher's one-at-a-time suggestions into trials, num_samples of
them (or unbounded with num_samples=-1, until the searcher says FINISHED)."""

from __future__ import annotations

import copy
import os
import pickle
from typing import Any

from raylite.tune.search.search_algorithm import SearchAlgorithm, Suggestion
from raylite.tune.search.searcher import Searcher, _set_search_properties_backwards_compatible
from raylite.tune.search.variant_generator import (
    _has_unresolved_values,
    _resolve_nested_dict,
    format_vars,
    generate_variants,
)
from raylite.tune.utils.util import merge_dicts

_STATE_FILE = "search-generator-state.pkl"


class SearchGenerator(SearchAlgorithm):
    """Ask `searcher` for each new trial's config."""

    def __init__(self, searcher: Searcher) -> None:
        if not isinstance(searcher, Searcher):
            raise TypeError(f"SearchGenerator wraps a Searcher, got {type(searcher).__name__}.")
        self.searcher = searcher
        self._config: dict = {}
        self._total_samples: int | None = None
        self._counter = 0

    @property
    def metric(self) -> str | None:
        return self.searcher.metric

    def set_search_properties(self, metric: str | None, mode: str | None, config: dict,
                              **spec: Any) -> bool:
        return _set_search_properties_backwards_compatible(
            self.searcher.set_search_properties, metric, mode, config, **spec)

    def set_max_concurrency(self, max_concurrent: int) -> bool:
        return self.searcher.set_max_concurrency(max_concurrent)

    @property
    def total_samples(self) -> int:
        return self._total_samples or 0

    def add_configurations(self, spec: dict) -> None:
        if self._total_samples is not None:
            raise RuntimeError("A SearchGenerator takes one experiment.")
        self._config = copy.deepcopy(spec.get("config", {}))
        self._total_samples = spec.get("num_samples", 1)

    def next_config(self, trial_id: str) -> Suggestion | None:
        if self._finished:
            return None
        total = self._total_samples if self._total_samples is not None else 1
        if total >= 0 and self._counter >= total:
            self.set_finished()
            return None
        suggested = self.searcher.suggest(trial_id)
        if suggested == Searcher.FINISHED:
            self.set_finished()
            return None
        if suggested is None:
            return None
        if not isinstance(suggested, dict):
            raise TypeError(f"{type(self.searcher).__name__}.suggest() returned "
                            f"{suggested!r}; it must return a dict, None or Searcher.FINISHED.")
        config = merge_dicts(self._config, copy.deepcopy(suggested))
        if _has_unresolved_values(config):
            # the searcher filled in part of the space: sample what it left
            _, config = next(generate_variants(config))
        self._counter += 1
        tag = f"{self._counter}_{format_vars(_resolve_nested_dict(suggested))}".rstrip("_")
        return Suggestion(config, tag)

    def on_trial_result(self, trial_id: str, result: dict) -> None:
        self.searcher.on_trial_result(trial_id, result)

    def on_trial_complete(self, trial_id: str, result: dict | None = None,
                          error: bool = False) -> None:
        self.searcher.on_trial_complete(trial_id, result=result, error=error)

    def has_checkpoint(self, dirpath: str) -> bool:
        return os.path.exists(os.path.join(dirpath, _STATE_FILE))

    def save_to_dir(self, dirpath: str, session_str: str = "default") -> None:
        self.searcher.save_to_dir(dirpath, session_str)
        state = {"counter": self._counter, "total": self._total_samples,
                 "finished": self._finished, "config": self._config}
        tmp = os.path.join(dirpath, f".{_STATE_FILE}.tmp")
        with open(tmp, "wb") as f:
            pickle.dump(state, f)
        os.replace(tmp, os.path.join(dirpath, _STATE_FILE))

    def restore_from_dir(self, dirpath: str) -> None:
        with open(os.path.join(dirpath, _STATE_FILE), "rb") as f:
            state = pickle.load(f)
        self._counter, self._total_samples = state["counter"], state["total"]
        self._finished, self._config = state["finished"], state["config"]
        try:
            self.searcher.restore_from_dir(dirpath)
        except (RuntimeError, NotImplementedError):
            pass  # a searcher without saved state starts afresh
