"""ActorPool: spread work over a fixed set of actors, one call in flight per actor.

Semantics follow `ray.util.ActorPool`:

* `submit(fn, value)` calls `fn(actor, value)` on an idle actor, or queues the pair until one
  becomes idle. `fn` must return the ObjectRef of the call it made.
* An actor stays *busy* until its result has been handed to the caller by `get_next` or
  `get_next_unordered`, not merely until the task finished. This is what bounds the work in
  flight to one call per actor and gives `map` its back-pressure.
* `get_next` returns results in submission order; `get_next_unordered` in completion order.
  Once `get_next_unordered` has been used, `get_next` can no longer keep order and refuses.

Lifecycle of one submission: QUEUED -> IN_FLIGHT(actor) -> RETURNED | IGNORED. Only a RETURNED or
IGNORED submission gives its actor back to the idle list (and lets a QUEUED one start).
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable, Iterable, Iterator
from typing import Any

import raylite

_TIMEOUT_MSG = "Timed out waiting for result"


class ActorPool:
    """Run `fn(actor, value)` calls over a fixed set of actors and collect the results.

    Example::

        pool = ActorPool([Doubler.remote(), Doubler.remote()])
        list(pool.map(lambda a, v: a.double.remote(v), [1, 2, 3]))  # [2, 4, 6]
    """

    def __init__(self, actors: list[Any]) -> None:
        # Actors free to take a call; `pop()` takes the most recently freed one, like Ray.
        self._idle_actors: list[Any] = list(actors)
        # key of an in-flight call -> (its submission index, the actor running it)
        self._future_to_actor: dict[Any, tuple[int, Any]] = {}
        # submission index -> the ref (or list of refs) the call returned
        self._index_to_future: dict[int, Any] = {}
        self._next_task_index = 0
        self._next_return_index = 0
        # (fn, value) pairs waiting for an idle actor, oldest first
        self._pending_submits: deque[tuple[Callable[[Any, Any], Any], Any]] = deque()

    # --- bulk helpers -------------------------------------------------------------------------

    def map(self, fn: Callable[[Any, Any], Any], values: Iterable[Any]) -> Iterator[Any]:
        """Apply `fn(actor, v)` to every value; yield the results in the order of `values`.

        Results of earlier submissions that were never collected are dropped first, so the
        iterator yields exactly one result per value given here.
        """
        self._ignore_outstanding()
        for value in values:
            self.submit(fn, value)

        def results() -> Iterator[Any]:
            while self.has_next():
                yield self.get_next()

        return results()

    def map_unordered(self, fn: Callable[[Any, Any], Any], values: Iterable[Any]) -> Iterator[Any]:
        """Like `map`, but yield each result as soon as it is ready (completion order)."""
        self._ignore_outstanding()
        for value in values:
            self.submit(fn, value)

        def results() -> Iterator[Any]:
            while self.has_next():
                yield self.get_next_unordered()

        return results()

    # --- one call at a time -------------------------------------------------------------------

    def submit(self, fn: Callable[[Any, Any], Any], value: Any) -> None:
        """Start `fn(actor, value)` on an idle actor, or queue it until one is free."""
        if not self._idle_actors:
            self._pending_submits.append((fn, value))
            return
        actor = self._idle_actors.pop()
        future = fn(actor, value)
        index = self._next_task_index
        self._next_task_index += 1
        self._future_to_actor[_key(future)] = (index, actor)
        self._index_to_future[index] = future

    def has_next(self) -> bool:
        """Whether any submitted call still has a result to collect."""
        return bool(self._future_to_actor)

    def get_next(self, timeout: float | None = None, ignore_if_timedout: bool = False) -> Any:
        """The result of the oldest uncollected submission (submission order).

        With `timeout`, raise `TimeoutError` if it is not ready in time. With
        `ignore_if_timedout=True` that submission is also given up: its actor returns to the
        pool and its result will never be returned, so the next call moves on to the next one.
        """
        if not self.has_next():
            raise StopIteration("No more results to get")
        if self._next_return_index >= self._next_task_index:
            raise ValueError("It is not allowed to call get_next() after get_next_unordered(): "
                             "the order of the remaining results is already lost.")
        index = self._next_return_index
        future = self._index_to_future[index]
        timed_out = False
        if timeout is not None:
            ready, _ = raylite.wait([_wait_ref(future)], timeout=timeout)
            if not ready:
                if not ignore_if_timedout:
                    raise TimeoutError(_TIMEOUT_MSG)
                timed_out = True
        del self._index_to_future[index]
        self._next_return_index += 1
        _, actor = self._future_to_actor.pop(_key(future))
        self._return_actor(actor)
        if timed_out:
            raise TimeoutError(f"{_TIMEOUT_MSG}. The task {future} has been ignored.")
        return raylite.get(future)

    def get_next_unordered(self, timeout: float | None = None,
                           ignore_if_timedout: bool = False) -> Any:
        """The result of whichever uncollected submission finishes first.

        With `timeout`, raise `TimeoutError` if none is ready in time. With
        `ignore_if_timedout=True` the oldest uncollected submission is given up as well (its
        actor returns to the pool), so repeated calls always make progress.
        """
        if not self.has_next():
            raise StopIteration("No more results to get")
        by_ref = {_wait_ref(key): key for key in self._future_to_actor}
        ready, _ = raylite.wait(list(by_ref), num_returns=1, timeout=timeout)
        if not ready:
            if not ignore_if_timedout:
                raise TimeoutError(_TIMEOUT_MSG)
            oldest = min(self._future_to_actor, key=lambda k: self._future_to_actor[k][0])
            self._release(oldest)
            raise TimeoutError(f"{_TIMEOUT_MSG}. The task {oldest} has been ignored.")
        future = self._release(by_ref[ready[0]])
        return raylite.get(future)

    # --- managing the actors ------------------------------------------------------------------

    def has_free(self) -> bool:
        """Whether an actor is idle and no queued submission is waiting to claim it."""
        return bool(self._idle_actors) and not self._pending_submits

    def pop_idle(self) -> Any | None:
        """Take an idle actor out of the pool (None if there is none free)."""
        if self.has_free():
            return self._idle_actors.pop()
        return None

    def push(self, actor: Any) -> None:
        """Add an actor to the pool; it starts on a queued submission at once if there is one."""
        busy = [a for _, a in self._future_to_actor.values()]
        if actor in self._idle_actors or actor in busy:
            raise ValueError("Actor already belongs to current ActorPool")
        self._return_actor(actor)

    # --- internals ----------------------------------------------------------------------------

    def _return_actor(self, actor: Any) -> None:
        self._idle_actors.append(actor)
        if self._pending_submits:
            self.submit(*self._pending_submits.popleft())

    def _release(self, key: Any) -> Any:
        """Forget the in-flight call `key`, give its actor back; return its future."""
        index, actor = self._future_to_actor.pop(key)
        future = self._index_to_future.pop(index)
        self._next_return_index = max(self._next_return_index, index + 1)
        self._return_actor(actor)
        return future

    def _ignore_outstanding(self) -> None:
        """Give up every uncollected submission (queued ones start, then are given up too).

        The actors still run those calls, but new calls queue behind them on each actor, so
        nothing is lost except results nobody asked for.
        """
        while self._future_to_actor:
            oldest = min(self._future_to_actor, key=lambda k: self._future_to_actor[k][0])
            self._release(oldest)
        self._next_return_index = self._next_task_index


def _key(future: Any) -> Any:
    """A hashable key for what `fn` returned: a ref, or a tuple of refs for num_returns > 1."""
    return tuple(future) if isinstance(future, list) else future


def _wait_ref(future: Any) -> Any:
    """The ref to wait on: all refs of one call are ready together, so the last one will do."""
    if isinstance(future, (list, tuple)):
        return future[-1]
    return future


__all__ = ["ActorPool"]
