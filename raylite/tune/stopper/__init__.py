"""`ray.tune.stopper`: when trials and experiments stop."""

from raylite.tune.stopper.stopper import (
    CombinedStopper,
    ExperimentPlateauStopper,
    FunctionStopper,
    MaximumIterationStopper,
    NoopStopper,
    Stopper,
    TimeoutStopper,
    TrialPlateauStopper,
)

__all__ = ["CombinedStopper", "ExperimentPlateauStopper", "FunctionStopper",
           "MaximumIterationStopper", "NoopStopper", "Stopper", "TimeoutStopper",
           "TrialPlateauStopper"]
