"""`ray.tune.schedulers`: when trials continue, pause or stop early."""

from __future__ import annotations

from typing import Any

from raylite.tune.schedulers.async_hyperband import ASHAScheduler, AsyncHyperBandScheduler
from raylite.tune.schedulers.hyperband import HyperBandForBOHB, HyperBandScheduler
from raylite.tune.schedulers.median_stopping_rule import MedianStoppingRule
from raylite.tune.schedulers.pbt import PopulationBasedTraining
from raylite.tune.schedulers.trial_scheduler import FIFOScheduler, TrialScheduler

_BY_NAME = {
    "fifo": FIFOScheduler, "async_hyperband": AsyncHyperBandScheduler,
    "asynchyperband": AsyncHyperBandScheduler, "asha": ASHAScheduler,
    "median_stopping_rule": MedianStoppingRule, "medianstopping": MedianStoppingRule,
    "hyperband": HyperBandScheduler, "hb_bohb": HyperBandForBOHB,
    "pbt": PopulationBasedTraining,
}


def create_scheduler(scheduler: str, **kwargs: Any) -> TrialScheduler:
    """Build a scheduler by name ('asha', 'hyperband', 'median_stopping_rule', 'pbt', 'fifo')."""
    key = scheduler.lower()
    if key not in _BY_NAME:
        raise ValueError(f"The `scheduler` argument must be one of {sorted(_BY_NAME)}. "
                         f"Got: {scheduler}")
    return _BY_NAME[key](**kwargs)


__all__ = ["ASHAScheduler", "AsyncHyperBandScheduler", "FIFOScheduler", "HyperBandForBOHB",
           "HyperBandScheduler", "MedianStoppingRule", "PopulationBasedTraining",
           "TrialScheduler", "create_scheduler"]
