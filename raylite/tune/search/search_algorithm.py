"""`SearchAlgorithm`: what the trial controller asks for new trial configs.

Two kinds exist: BasicVariantGenerator (grid and random expansion of param_space, all at
once) and SearchGenerator (one Searcher suggestion per trial). The controller calls
set_search_properties, add_configurations once, then next_config(trial_id) until it returns
None; is_finished() says whether None means 'later' or 'never'.
"""

from __future__ import annotations

from typing import Any, NamedTuple


class Suggestion(NamedTuple):
    """A resolved trial config and the tag that names the trial ('lr=0.0100,layers=2')."""

    config: dict
    tag: str


class SearchAlgorithm:
    """Base of the two kinds of search above."""

    _finished = False
    _metric: str | None = None

    def set_search_properties(self, metric: str | None, mode: str | None, config: dict,
                              **spec: Any) -> bool:
        return True

    @property
    def metric(self) -> str | None:
        return self._metric

    def add_configurations(self, spec: dict) -> None:
        """spec: {"config": param_space, "num_samples": n}."""
        raise NotImplementedError

    def next_config(self, trial_id: str) -> Suggestion | None:
        """A config for the trial with this id, or None (later, or never if is_finished())."""
        raise NotImplementedError

    def on_trial_result(self, trial_id: str, result: dict) -> None:
        pass

    def on_trial_complete(self, trial_id: str, result: dict | None = None,
                          error: bool = False) -> None:
        pass

    @property
    def total_samples(self) -> int:
        return 0

    def is_finished(self) -> bool:
        return self._finished

    def set_finished(self) -> None:
        self._finished = True

    def has_checkpoint(self, dirpath: str) -> bool:
        return False

    def save_to_dir(self, dirpath: str, session_str: str = "default") -> None:
        pass

    def restore_from_dir(self, dirpath: str) -> None:
        pass

    def set_max_concurrency(self, max_concurrent: int) -> bool:
        return False
