"""`TuneConfig`: how the search runs (metric, mode, searcher, scheduler, samples, limits)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any


@dataclass
class TuneConfig:
    """Tune's settings for one Tuner.fit(); see Ray's TuneConfig for each field."""

    metric: str | None = None
    mode: str | None = None
    search_alg: Any = None
    scheduler: Any = None
    num_samples: int = 1
    max_concurrent_trials: int | None = None
    time_budget_s: Any = None
    reuse_actors: bool | None = None
    trial_name_creator: Callable[[Any], str] | None = None
    trial_dirname_creator: Callable[[Any], str] | None = None
    chdir_to_trial_dir: Any = "DEPRECATED"

    def __post_init__(self) -> None:
        if self.mode is not None and self.mode not in ("min", "max"):
            raise ValueError(f"TuneConfig(mode={self.mode!r}): use 'min' or 'max'.")
        if not isinstance(self.num_samples, int) or self.num_samples == 0 \
                or self.num_samples < -1:
            raise ValueError(f"TuneConfig(num_samples={self.num_samples!r}): use a positive "
                             "int, or -1 to sample until time_budget_s or the searcher ends.")
        if self.max_concurrent_trials is not None and self.max_concurrent_trials < 1:
            raise ValueError(f"TuneConfig(max_concurrent_trials={self.max_concurrent_trials}): "
                             "use None (no limit) or a positive int.")
        if hasattr(self.time_budget_s, "total_seconds"):
            self.time_budget_s = self.time_budget_s.total_seconds()
