"""A first-in, first-out queue shared by tasks and actors, kept inside one async actor.

`Queue` mirrors `ray.util.queue.Queue` (and the standard library's `queue.Queue`): the items
live in an `asyncio.Queue` inside a `_QueueActor`, and every method is one actor call. Because
the actor is async, a blocked `get` or `put` parks a coroutine there instead of a thread, so any
number of consumers can wait at once. The `Queue` object itself only holds the actor handle, so
it can be passed to tasks and actors, which then share the same queue.

`Empty` and `Full` subclass the standard library's exceptions: `except queue.Empty` catches
them too, whether they were raised here or inside the actor.
"""

from __future__ import annotations

import asyncio
import queue as _stdlib_queue
from collections.abc import Iterable
from typing import Any

import raylite


class Empty(_stdlib_queue.Empty):
    """Raised by a non-blocking or timed-out `get` when there is nothing to take."""


class Full(_stdlib_queue.Full):
    """Raised by a non-blocking or timed-out `put` when the queue is at `maxsize`."""


class _QueueActor:
    """Holds the items. Every method is `async` so that all of them run on the actor's event
    loop: `asyncio.Queue` is not thread-safe, and sync methods of an async actor may not run on
    the loop's thread."""

    def __init__(self, maxsize: int) -> None:
        self.maxsize = maxsize
        self.queue: asyncio.Queue[Any] = asyncio.Queue(maxsize)

    async def qsize(self) -> int:
        return self.queue.qsize()

    async def empty(self) -> bool:
        return self.queue.empty()

    async def full(self) -> bool:
        return self.queue.full()

    async def ready(self) -> bool:
        return True

    async def put(self, item: Any, timeout: float | None = None) -> None:
        try:
            await asyncio.wait_for(self.queue.put(item), timeout)
        except asyncio.TimeoutError:
            raise Full(f"Queue is still full (maxsize {self.maxsize}) after waiting {timeout} s.")

    async def get(self, timeout: float | None = None) -> Any:
        try:
            return await asyncio.wait_for(self.queue.get(), timeout)
        except asyncio.TimeoutError:
            raise Empty(f"Queue is still empty after waiting {timeout} s.")

    async def put_nowait(self, item: Any) -> None:
        try:
            self.queue.put_nowait(item)
        except asyncio.QueueFull:
            raise Full(f"Queue is full (maxsize {self.maxsize}).")

    async def put_nowait_batch(self, items: list[Any]) -> None:
        # All or nothing: a batch that does not fit adds none of its items.
        if self.maxsize > 0 and len(items) + self.queue.qsize() > self.maxsize:
            raise Full(f"Cannot add {len(items)} items to a queue holding {self.queue.qsize()} "
                       f"items with maxsize {self.maxsize}.")
        for item in items:
            self.queue.put_nowait(item)

    async def get_nowait(self) -> Any:
        try:
            return self.queue.get_nowait()
        except asyncio.QueueEmpty:
            raise Empty("Queue is empty.")

    async def get_nowait_batch(self, num_items: int) -> list[Any]:
        # All or nothing, like put_nowait_batch.
        if num_items > self.queue.qsize():
            raise Empty(f"Cannot get {num_items} items from a queue holding "
                        f"{self.queue.qsize()} items.")
        return [self.queue.get_nowait() for _ in range(num_items)]


def _result(ref: Any) -> Any:
    """The call's value; Empty/Full raised in the actor come out as plain Empty/Full, as the
    standard library raises them, rather than wrapped in the remote-error class."""
    try:
        return raylite.get(ref)
    except (Empty, Full) as err:
        raise _unwrap(err) from None


async def _result_async(ref: Any) -> Any:
    try:
        return await ref
    except (Empty, Full) as err:
        raise _unwrap(err) from None


def _unwrap(err: BaseException) -> BaseException:
    cause = getattr(err, "cause", None)
    return cause if isinstance(cause, (Empty, Full)) else err


def _check_timeout(timeout: float | None) -> None:
    if timeout is not None and timeout < 0:
        raise ValueError("'timeout' must be a non-negative number")


class Queue:
    """A FIFO queue that tasks, actors and the driver share.

    Args:
        maxsize: the most items the queue holds; 0 or less means no limit.
        actor_options: options for the actor that holds the items, as for `.options()`
            (for example `{"num_cpus": 0, "name": "jobs"}`).

    Example::

        q = Queue(maxsize=10)
        producer.remote(q)          # calls q.put(...) remotely
        item = q.get(timeout=5)
    """

    def __init__(self, maxsize: int = 0, actor_options: dict[str, Any] | None = None) -> None:
        self.maxsize = maxsize
        self.actor_options = dict(actor_options or {})
        actor_class = raylite.remote(_QueueActor)
        if self.actor_options:
            actor_class = actor_class.options(**self.actor_options)
        self.actor: Any = actor_class.remote(maxsize)

    def __len__(self) -> int:
        return self.size()

    def size(self) -> int:
        """How many items the queue holds now."""
        return _result(self._handle().qsize.remote())

    def qsize(self) -> int:
        """How many items the queue holds now (same as `size`)."""
        return self.size()

    def empty(self) -> bool:
        """Whether the queue holds no items now."""
        return _result(self._handle().empty.remote())

    def full(self) -> bool:
        """Whether the queue holds `maxsize` items now (never true without a limit)."""
        return _result(self._handle().full.remote())

    def put(self, item: Any, block: bool = True, timeout: float | None = None) -> None:
        """Add an item. If the queue is full: wait (up to `timeout` seconds, then raise `Full`)
        when `block`, else raise `Full` at once."""
        if not block:
            _result(self._handle().put_nowait.remote(item))
            return
        _check_timeout(timeout)
        _result(self._handle().put.remote(item, timeout))

    async def put_async(self, item: Any, block: bool = True, timeout: float | None = None) -> None:
        """`put` for asyncio code: waits without blocking the event loop."""
        if not block:
            await _result_async(self._handle().put_nowait.remote(item))
            return
        _check_timeout(timeout)
        await _result_async(self._handle().put.remote(item, timeout))

    def get(self, block: bool = True, timeout: float | None = None) -> Any:
        """Remove and return the oldest item. If the queue is empty: wait (up to `timeout`
        seconds, then raise `Empty`) when `block`, else raise `Empty` at once."""
        if not block:
            return _result(self._handle().get_nowait.remote())
        _check_timeout(timeout)
        return _result(self._handle().get.remote(timeout))

    async def get_async(self, block: bool = True, timeout: float | None = None) -> Any:
        """`get` for asyncio code: waits without blocking the event loop."""
        if not block:
            return await _result_async(self._handle().get_nowait.remote())
        _check_timeout(timeout)
        return await _result_async(self._handle().get.remote(timeout))

    def put_nowait(self, item: Any) -> None:
        """Add an item or raise `Full` at once (same as `put(item, block=False)`)."""
        self.put(item, block=False)

    def put_nowait_batch(self, items: Iterable[Any]) -> None:
        """Add all of `items` in one call, or none of them (raising `Full`) if they do not fit."""
        if not isinstance(items, Iterable):
            raise TypeError("Argument 'items' must be an Iterable")
        _result(self._handle().put_nowait_batch.remote(list(items)))

    def get_nowait(self) -> Any:
        """Take the oldest item or raise `Empty` at once (same as `get(block=False)`)."""
        return self.get(block=False)

    def get_nowait_batch(self, num_items: int) -> list[Any]:
        """Take the `num_items` oldest items in one call, or none (raising `Empty`) if fewer
        are there."""
        if not isinstance(num_items, int) or isinstance(num_items, bool):
            raise TypeError("Argument 'num_items' must be an int")
        if num_items < 0:
            raise ValueError("'num_items' must be nonnegative")
        return _result(self._handle().get_nowait_batch.remote(num_items))

    def shutdown(self, force: bool = False, grace_period_s: int = 5) -> None:
        """Stop the actor holding the items; the queue is unusable afterwards.

        Without `force`, calls this process already made to the queue get up to
        `grace_period_s` seconds to be taken up by the actor first. Callers still blocked in
        `get` or `put` then fail with `ActorDiedError`.
        """
        if self.actor is None:
            return
        if not force:
            raylite.wait([self.actor.ready.remote()], timeout=grace_period_s)
        raylite.kill(self.actor, no_restart=True)
        self.actor = None

    def _handle(self) -> Any:
        if self.actor is None:
            raise RuntimeError("This Queue was shut down; create a new Queue to go on.")
        return self.actor


__all__ = ["Empty", "Full", "Queue"]
