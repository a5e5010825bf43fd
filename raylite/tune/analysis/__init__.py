"""`ray.tune.analysis`."""

from raylite.tune.analysis.experiment_analysis import ExperimentAnalysis

__all__ = ["ExperimentAnalysis"]
