"""raylite.tune: Ray Tune's API (hyperparameter search) on raylite's public Core and Train APIs.

`from ray import tune` gives this module through compat/ray. The search-space functions are
imported at once (they are small); the Tuner, schedulers and the rest load on first use.
"""

from __future__ import annotations

import importlib
from typing import Any

from raylite.tune.search.sample import (
    choice,
    lograndint,
    loguniform,
    qlograndint,
    qloguniform,
    qrandint,
    qrandn,
    quniform,
    randint,
    randn,
    sample_from,
    uniform,
)
from raylite.tune.search.variant_generator import grid_search

# public name -> module that defines it, imported on first use
_LAZY = {
    "Searcher": "raylite.tune.search",
    "create_searcher": "raylite.tune.search",
    "create_scheduler": "raylite.tune.schedulers",
    "Tuner": "raylite.tune.tuner",
    "TuneConfig": "raylite.tune.tune_config",
    "ResultGrid": "raylite.tune.result_grid",
    "Result": "raylite.tune.result_grid",
    "ExperimentAnalysis": "raylite.tune.analysis",
    "run": "raylite.tune.tune",
    "run_experiments": "raylite.tune.tune",
    "Trainable": "raylite.tune.trainable",
    "with_parameters": "raylite.tune.trainable",
    "with_resources": "raylite.tune.trainable",
    "report": "raylite.tune.trainable",
    "get_checkpoint": "raylite.tune.trainable",
    "get_context": "raylite.tune.trainable",
    "TuneContext": "raylite.tune.trainable",
    "PlacementGroupFactory": "raylite.tune.execution.placement_groups",
    "Callback": "raylite.tune.callback",
    "Stopper": "raylite.tune.stopper",
    "TuneError": "raylite.tune.error",
    "Trial": "raylite.tune.experiment",
    "ProgressReporter": "raylite.tune.progress_reporter",
    "CLIReporter": "raylite.tune.progress_reporter",
    "JupyterNotebookReporter": "raylite.tune.progress_reporter",
    # Train's configs and Checkpoint, as Ray re-exports them under ray.tune
    "RunConfig": "raylite.train",
    "CheckpointConfig": "raylite.train",
    "FailureConfig": "raylite.train",
    "SyncConfig": "raylite.train",
    "Checkpoint": "raylite.train",
}
_SUBMODULES = ("search", "schedulers", "stopper", "utils", "callback", "experiment", "result",
               "logger", "progress_reporter", "result_grid", "trainable", "tuner", "execution",
               "analysis", "integration", "registry", "error", "tune_config", "impl")

__all__ = [
    "choice", "grid_search", "lograndint", "loguniform", "qlograndint", "qloguniform",
    "qrandint", "qrandn", "quniform", "randint", "randn", "sample_from", "uniform",
    *_LAZY,
]


def __getattr__(name: str) -> Any:
    module = _LAZY.get(name)
    if module is not None:
        value = getattr(importlib.import_module(module), name)
        globals()[name] = value
        return value
    if name in _SUBMODULES:
        return importlib.import_module(f"{__name__}.{name}")
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(__all__))
