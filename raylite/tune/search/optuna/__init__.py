"""`ray.tune.search.optuna`: Tune's searcher over the optuna package."""

from raylite.tune.search.optuna.optuna_search import OptunaSearch

__all__ = ["OptunaSearch"]
