"""`Repeater`: run each suggestion `repeat` times (e.g. over seeds) and tell the searcher the
mean of the metric over the group, so a noisy objective is judged on its average."""

from __future__ import annotations

import copy
from typing import Any

import numpy as np

from raylite.tune.search.searcher import (
    Searcher,
    _set_search_properties_backwards_compatible,
)

TRIAL_INDEX = "__trial_index__"


class _TrialGroup:
    """The trials that run one suggestion; the first trial's id is the searcher's id for it."""

    def __init__(self, primary_trial_id: str, config: dict, max_trials: int) -> None:
        self.primary_trial_id = primary_trial_id
        self.config = config
        self.max_trials = max_trials
        self._scores: dict[str, float | None] = {primary_trial_id: None}

    def add(self, trial_id: str) -> None:
        self._scores[trial_id] = None

    def full(self) -> bool:
        return len(self._scores) >= self.max_trials

    def count(self) -> int:
        return len(self._scores)

    def report(self, trial_id: str, score: float) -> None:
        self._scores[trial_id] = score

    def finished_reporting(self) -> bool:
        return None not in self._scores.values() and self.full()

    def scores(self) -> list[float | None]:
        return list(self._scores.values())


class Repeater(Searcher):
    """Repeat each of `searcher`'s suggestions `repeat` times; with set_index the config gets
    `__trial_index__` (0..repeat-1). Use num_samples that is a multiple of repeat."""

    def __init__(self, searcher: Searcher, repeat: int = 1, set_index: bool = True) -> None:
        if not isinstance(searcher, Searcher):
            raise TypeError(f"Repeater wraps a Searcher, got {type(searcher).__name__}.")
        if repeat < 1:
            raise ValueError(f"repeat must be at least 1, got {repeat}.")
        self.searcher = searcher
        self.repeat = repeat
        self._set_index = set_index
        self._groups: list[_TrialGroup] = []
        self._trial_id_to_group: dict[str, _TrialGroup] = {}
        self._current_group: _TrialGroup | None = None
        super().__init__(metric=searcher.metric, mode=searcher.mode)

    def suggest(self, trial_id: str) -> dict | None | str:
        group = self._current_group
        if group is None or group.full():
            config = self.searcher.suggest(trial_id)
            if config is None or config == Searcher.FINISHED:
                return config
            group = _TrialGroup(trial_id, copy.deepcopy(config), self.repeat)
            self._groups.append(group)
            self._current_group = group
        else:
            group.add(trial_id)
        self._trial_id_to_group[trial_id] = group
        trial_config = copy.deepcopy(group.config)
        if self._set_index:
            trial_config[TRIAL_INDEX] = group.count() - 1
        return trial_config

    def on_trial_complete(self, trial_id: str, result: dict | None = None,
                          error: bool = False) -> None:
        group = self._trial_id_to_group.get(trial_id)
        if group is None:
            return
        metric = self.searcher.metric
        score = np.nan
        if result is not None and metric in result:
            score = result[metric]
        group.report(trial_id, score)
        if group.finished_reporting():
            mean = float(np.nanmean(np.array(group.scores(), dtype=float)))
            self.searcher.on_trial_complete(group.primary_trial_id,
                                            result={metric: mean}, error=error)

    def set_search_properties(self, metric: str | None, mode: str | None, config: dict,
                              **spec: Any) -> bool:
        taken = _set_search_properties_backwards_compatible(
            self.searcher.set_search_properties, metric, mode, config, **spec)
        self._metric, self._mode = self.searcher.metric, self.searcher.mode
        return taken

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


__all__ = ["Repeater", "TRIAL_INDEX"]
