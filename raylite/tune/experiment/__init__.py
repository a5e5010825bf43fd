"""`ray.tune.experiment`: the Trial record."""

from raylite.tune.experiment.trial import Trial

__all__ = ["Trial"]
