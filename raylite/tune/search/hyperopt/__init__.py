"""`ray.tune.search.hyperopt`: Tune's searcher over the hyperopt package's TPE."""

from raylite.tune.search.hyperopt.hyperopt_search import HyperOptSearch

__all__ = ["HyperOptSearch"]
