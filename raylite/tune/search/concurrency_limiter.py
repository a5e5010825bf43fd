"""`ray.tune.search.concurrency_limiter`: where Ray's import path finds ConcurrencyLimiter."""

from raylite.tune.search.searcher import ConcurrencyLimiter

__all__ = ["ConcurrencyLimiter"]
