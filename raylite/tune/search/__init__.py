"""`ray.tune.search`: the default search (BasicVariantGenerator), the Searcher base class for
one-at-a-time search algorithms, and wrappers (ConcurrencyLimiter, Repeater).

Optional searchers load on first use: `from ray.tune.search.optuna import OptunaSearch`, or
`tune.create_searcher("optuna", ...)`.
"""

from __future__ import annotations

import importlib
import inspect
from typing import Any

from raylite.tune.search.basic_variant import BasicVariantGenerator
from raylite.tune.search.repeater import Repeater
from raylite.tune.search.search_algorithm import SearchAlgorithm
from raylite.tune.search.search_generator import SearchGenerator
from raylite.tune.search.searcher import ConcurrencyLimiter, Searcher
from raylite.tune.search.variant_generator import grid_search

UNRESOLVED_SEARCH_SPACE = (
    "You passed a `{par}` parameter to {cls} that contained unresolved search space "
    "definitions. {cls} should however be instantiated with fully configured search spaces "
    "only. To use Ray Tune's automatic search space conversion, pass the space definition as "
    "part of the `param_space` argument to `tune.Tuner()` instead.")
UNDEFINED_SEARCH_SPACE = (
    "Trying to sample a configuration from {cls}, but no search space has been defined. "
    "Either pass the `{space}` argument when instantiating the search algorithm, or pass a "
    "`param_space` to `tune.Tuner()`.")
UNDEFINED_METRIC_MODE = (
    "Trying to sample a configuration from {cls}, but the `metric` ({metric}) or `mode` "
    "({mode}) parameters have not been set. Either pass these arguments when instantiating "
    "the search algorithm, or pass them to `tune.TuneConfig()`.")

# name -> (module, class): the optional searchers, imported only when asked for
_SEARCHERS = {
    "variant_generator": ("raylite.tune.search.basic_variant", "BasicVariantGenerator"),
    "random": ("raylite.tune.search.basic_variant", "BasicVariantGenerator"),
    "optuna": ("raylite.tune.search.optuna", "OptunaSearch"),
    "hyperopt": ("raylite.tune.search.hyperopt", "HyperOptSearch"),
}


def create_searcher(search_alg: str, **kwargs: Any) -> Any:
    """Build a search algorithm by name ('random', 'optuna', 'hyperopt'); kwargs that its
    constructor does not take are dropped, so one call can serve several searchers."""
    name = search_alg.lower()
    if name not in _SEARCHERS:
        raise ValueError(f"The `search_alg` argument must be one of {sorted(_SEARCHERS)}. "
                         f"Got: {search_alg}")
    module, attr = _SEARCHERS[name]
    cls = getattr(importlib.import_module(module), attr)
    accepted = inspect.signature(cls).parameters
    return cls(**{k: v for k, v in kwargs.items() if k in accepted})


__all__ = [
    "BasicVariantGenerator",
    "ConcurrencyLimiter",
    "Repeater",
    "SearchAlgorithm",
    "SearchGenerator",
    "Searcher",
    "UNDEFINED_METRIC_MODE",
    "UNDEFINED_SEARCH_SPACE",
    "UNRESOLVED_SEARCH_SPACE",
    "create_searcher",
    "grid_search",
]
