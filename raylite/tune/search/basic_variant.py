"""`BasicVariantGenerator`: Tune's default search. Each of num_samples draws expands every
grid axis (so 2 grid values x num_samples=3 gives 6 trials) and samples every other domain;
points_to_evaluate come first, each one using up one of the samples."""

from __future__ import annotations

import copy
import itertools
import os
import pickle
from collections.abc import Iterator
from typing import Any

from raylite.tune.search.sample import _as_rng
from raylite.tune.search.search_algorithm import SearchAlgorithm, Suggestion
from raylite.tune.search.variant_generator import (
    _apply_preset,
    _count_variants,
    format_vars,
    generate_variants,
)

_STATE_FILE = "basic-variant-state.pkl"


class BasicVariantGenerator(SearchAlgorithm):
    """Grid expansion plus random sampling of param_space.

    max_concurrent caps running trials (0: no cap); constant_grid_search samples the random
    values once and reuses them for every grid point; random_state seeds the sampling."""

    def __init__(self, points_to_evaluate: list[dict] | None = None, max_concurrent: int = 0,
                 constant_grid_search: bool = False, random_state: Any = None) -> None:
        if points_to_evaluate is not None and not isinstance(points_to_evaluate, list):
            raise TypeError("points_to_evaluate must be a list of config dicts, got "
                            f"{type(points_to_evaluate).__name__}.")
        self._points_to_evaluate = copy.deepcopy(points_to_evaluate or [])
        self.max_concurrent = max_concurrent
        self._constant_grid_search = constant_grid_search
        self._random_state_arg = random_state
        self._random_state = _as_rng(random_state)
        self._spec: dict | None = None
        self._variants: Iterator[dict] | None = None
        self._counter = 0
        self._total_samples = 0
        self._live: set[str] = set()

    @property
    def total_samples(self) -> int:
        return self._total_samples

    def set_max_concurrency(self, max_concurrent: int) -> bool:
        self.max_concurrent = max_concurrent
        return True

    def add_configurations(self, spec: dict) -> None:
        if self._spec is not None:
            raise RuntimeError("BasicVariantGenerator takes one experiment per Tuner.")
        self._spec = copy.deepcopy(spec)
        self._total_samples = _count_variants(self._spec, self._points_to_evaluate)
        self._variants = self._generate()

    def _generate(self) -> Iterator[tuple[dict, dict]]:
        assert self._spec is not None
        config = self._spec.get("config", {})
        num_samples = self._spec.get("num_samples", 1)
        for point in self._points_to_evaluate:
            yield from generate_variants(_apply_preset(config, point),
                                         self._constant_grid_search, self._random_state)
        remaining = num_samples - len(self._points_to_evaluate)
        draws = itertools.count() if num_samples < 0 else range(max(remaining, 0))
        for _ in draws:
            yield from generate_variants(config, self._constant_grid_search,
                                         self._random_state)

    def next_config(self, trial_id: str) -> Suggestion | None:
        if self._finished or self._variants is None:
            return None
        if self.max_concurrent and len(self._live) >= self.max_concurrent:
            return None
        try:
            resolved_vars, config = next(self._variants)  # type: ignore[misc]
        except StopIteration:
            self.set_finished()
            return None
        tag = f"{self._counter}_{format_vars(resolved_vars)}".rstrip("_")
        self._counter += 1
        self._live.add(trial_id)
        return Suggestion(config, tag)

    def on_trial_complete(self, trial_id: str, result: dict | None = None,
                          error: bool = False) -> None:
        self._live.discard(trial_id)

    def __getstate__(self) -> dict:
        state = dict(self.__dict__)
        state["_variants"] = None  # a generator does not pickle: rebuilt in __setstate__
        return state

    def __setstate__(self, state: dict) -> None:
        self.__dict__.update(state)
        if self._spec is not None:
            self._variants = self._generate()
            for _ in range(self._counter):  # skip the variants already handed out
                next(self._variants, None)

    def has_checkpoint(self, dirpath: str) -> bool:
        return os.path.exists(os.path.join(dirpath, _STATE_FILE))

    def save_to_dir(self, dirpath: str, session_str: str = "default") -> None:
        state = {"spec": self._spec, "counter": self._counter, "finished": self._finished,
                 "points": self._points_to_evaluate}
        tmp = os.path.join(dirpath, f".{_STATE_FILE}.tmp")
        with open(tmp, "wb") as f:
            pickle.dump(state, f)
        os.replace(tmp, os.path.join(dirpath, _STATE_FILE))

    def restore_from_dir(self, dirpath: str) -> None:
        """Continue after the variants already handed out (re-drawn, then skipped)."""
        with open(os.path.join(dirpath, _STATE_FILE), "rb") as f:
            state = pickle.load(f)
        self._spec, self._points_to_evaluate = None, state["points"]
        self.add_configurations(state["spec"])
        for _ in range(state["counter"]):
            next(self._variants, None)  # type: ignore[arg-type]
        self._counter = state["counter"]
        self._finished = state["finished"]
