"""`ray.util.as_completed` and `ray.util.map_unordered`: results in the order they finish.

Why: `ray.get(refs)` waits for the slowest task before the first result is usable, and
`ray.get` in a loop waits in submission order. These yield each chunk as soon as `ray.wait`
says it is ready, which is Ray's recommended pattern (ray-get-loop) as a function.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Sequence
from typing import Any

import raylite

DEFAULT_CHUNK_SIZE = 10


def _check(chunk_size: int, kwargs: dict) -> None:
    if chunk_size < 1:
        raise ValueError("`chunk_size` must be >= 1")
    if "num_returns" in kwargs:
        raise ValueError("Use the `chunk_size` argument instead of `num_returns`.")


def as_completed(refs: Sequence[Any], *, chunk_size: int = DEFAULT_CHUNK_SIZE, yield_obj_refs: bool = False,
                 **kwargs: Any) -> Iterator[Any]:
    """Yield the values of `refs` (or the refs, with `yield_obj_refs`) in chunks of up to
    `chunk_size` as they become ready; `kwargs` go to `ray.wait` (timeout, fetch_local)."""
    _check(chunk_size, kwargs)
    pending = list(refs)
    while pending:
        ready, pending = raylite.wait(pending, num_returns=min(chunk_size, len(pending)), **kwargs)
        if yield_obj_refs:
            yield from ready
        else:
            yield from raylite.get(ready)


def map_unordered(fn: Any, items: Iterable[Any], *, backpressure_size: int | None = 100,
                  chunk_size: int = DEFAULT_CHUNK_SIZE, yield_obj_refs: bool = False, **kwargs: Any) -> Iterator[Any]:
    """Run `fn.remote(item)` for each item, at most `backpressure_size` in flight (None: no
    limit), and yield the results in the order they finish."""
    _check(chunk_size, kwargs)
    if backpressure_size is not None and backpressure_size < 1:
        raise ValueError("`backpressure_size` must be >= 1 (or None for no limit)")
    pending: list[Any] = []
    for item in items:
        pending.append(fn.remote(item))
        if backpressure_size is not None and len(pending) >= backpressure_size:
            ready, pending = raylite.wait(pending, num_returns=min(chunk_size, len(pending)), **kwargs)
            yield from (ready if yield_obj_refs else raylite.get(ready))
    yield from as_completed(pending, chunk_size=chunk_size, yield_obj_refs=yield_obj_refs, **kwargs)
