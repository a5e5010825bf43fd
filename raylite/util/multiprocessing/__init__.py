"""raylite.util.multiprocessing: the standard library's `Pool` API on raylite actors (Ray's name)."""

from multiprocessing import TimeoutError

from raylite.util.multiprocessing.pool import AsyncResult, Pool

__all__ = ["AsyncResult", "Pool", "TimeoutError"]
