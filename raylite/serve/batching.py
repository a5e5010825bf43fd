"""`@serve.batch`: gather concurrent calls into one list call (Ray Serve's request batching).

Why: a model scores 16 inputs in about the time it scores one, but requests arrive one at a time.
Each caller passes a single item and awaits a single result; a background task per queue collects
the waiting items and calls the user's function once with lists.

Pure asyncio, no cluster: one queue per (decorated function, instance, event loop), created on the
first call in that loop, so the same class works in a replica, a test's `asyncio.run` and a
notebook. Settings live on the decorated function and are read at every flush, so
`set_max_batch_size` takes effect for queues that already exist.

Lifecycle of one call: QUEUED -> (cancelled: dropped) | IN_BATCH -> DONE (result or the batch's
exception). A batch flushes when `max_batch_size` items wait or `batch_wait_timeout_s` has passed
since the first of them arrived.
"""

from __future__ import annotations

import asyncio
import collections
import functools
import inspect
import logging
import weakref
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass, field
from typing import Any

from raylite.serve import context as serve_context

__all__ = ["batch"]


@dataclass
class _RuntimeSummaryStatistics:
    """Start times (event-loop clock) of the batches a queue is running now, for observing a
    batch handler (Ray's name, returned by `_get_curr_iteration_start_times()`)."""

    start_times: list[float]

    @property
    def min_start_time(self) -> float | None:
        return min(self.start_times) if self.start_times else None

    @property
    def max_start_time(self) -> float | None:
        return max(self.start_times) if self.start_times else None

    @property
    def num_iterations(self) -> int:
        return len(self.start_times)

class _End:
    """Ends one caller's stream. The class itself is the marker: a decorated method travels to a
    replica by value (cloudpickle), taking copies of the plain objects it refers to, but a class
    is pickled by reference, so the marker stays the same object on both sides of the queue."""


_END = _End


@dataclass(eq=False)
class _Settings:
    """Batching knobs shared by every queue of one decorated function (Ray's setters change them).

    Also the key of that function's queues in `_REGISTRIES`: the decorated function's closure
    holds only this plain object, so it pickles (a replica gets the class by value) and the copy
    in the replica starts with no queues of its own."""

    max_batch_size: int
    batch_wait_timeout_s: float
    max_concurrent_batches: int
    batch_size_fn: Callable[[list], int] | None = None  # a batch's size from its items (default: count)

    def size(self, calls: list[_Call]) -> int:
        """The batch size of `calls`: `batch_size_fn` of their first arguments, or how many."""
        if self.batch_size_fn is None:
            return len(calls)
        return int(self.batch_size_fn([c.args[0] if c.args else next(iter(c.kwargs.values()), None)
                                       for c in calls]))


@dataclass(eq=False)
class _Call:
    """One caller's arguments and where its answer goes."""

    args: tuple
    kwargs: dict
    future: asyncio.Future | None = None  # plain functions: the caller's result
    stream: asyncio.Queue | None = None  # generator functions: items, then _END or an exception
    abandoned: bool = False  # a streaming caller stopped listening
    # the caller's request context: the batch function reads all of them with
    # serve.context._get_serve_batch_request_context()
    context: serve_context.RequestContext = field(default_factory=serve_context._get_serve_request_context)

    def shape(self) -> tuple[int, tuple[str, ...]]:
        return len(self.args), tuple(sorted(self.kwargs))

    @property
    def live(self) -> bool:
        if self.future is not None:
            return not self.future.done()
        return not self.abandoned


def _check_max_batch_size(value: Any) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise ValueError(f"max_batch_size must be an integer >= 1, got {value!r}")
    return value


def _check_timeout(value: Any) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or value < 0:
        raise ValueError(f"batch_wait_timeout_s must be a number >= 0 (seconds), got {value!r}")
    return float(value)


def _check_concurrency(value: Any) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise ValueError(f"max_concurrent_batches must be an integer >= 1, got {value!r}")
    return value


class _BatchQueue:
    """Waiting calls of one decorated function for one instance in one event loop, and the task
    that flushes them."""

    def __init__(self, func: Callable[..., Any], owner: Any, settings: _Settings, streaming: bool) -> None:
        self._func = func
        self._owner_ref = None if owner is None else _weak(owner)
        self._settings = settings
        self._streaming = streaming
        self._waiting: collections.deque[_Call] = collections.deque()
        self._arrived = asyncio.Event()
        self._slots = asyncio.Semaphore(settings.max_concurrent_batches)
        self._slot_count = settings.max_concurrent_batches
        self._running: set[asyncio.Task] = set()
        self.batch_starts: dict[asyncio.Task, float] = {}  # running batch -> its start (loop clock)
        self._flusher = asyncio.get_running_loop().create_task(self._flush_loop())
        _warn_if_batches_cannot_fill(func, settings)

    def put(self, call: _Call) -> None:
        self._waiting.append(call)
        self._arrived.set()

    async def _flush_loop(self) -> None:
        while True:
            await self._wait_for_batch()
            calls = self._take_batch()
            if not calls:
                continue
            await self._acquire_slot()
            loop = asyncio.get_running_loop()
            task = loop.create_task(self._run_batch(calls))
            self._running.add(task)
            self.batch_starts[task] = loop.time()
            task.add_done_callback(self._running.discard)
            task.add_done_callback(lambda t: self.batch_starts.pop(t, None))

    async def _wait_for_batch(self) -> None:
        """Return once a batch should flush: full, or the first waiting call is old enough."""
        while not self._waiting:
            self._arrived.clear()
            await self._arrived.wait()
        loop = asyncio.get_running_loop()
        deadline = loop.time() + self._settings.batch_wait_timeout_s
        while self._settings.size(list(self._waiting)) < self._settings.max_batch_size:
            remaining = deadline - loop.time()
            if remaining <= 0:
                return
            self._arrived.clear()
            try:
                await asyncio.wait_for(self._arrived.wait(), remaining)
            except asyncio.TimeoutError:
                return

    def _take_batch(self) -> list[_Call]:
        """Live calls with the same argument shape, oldest first, while the batch's size (a count,
        or `batch_size_fn` of the items) stays within max_batch_size. A single call too big for
        any batch fails with a message saying so."""
        settings = self._settings
        calls: list[_Call] = []
        skipped: list[_Call] = []
        shape = None
        while self._waiting:
            call = self._waiting.popleft()
            if not call.live:
                continue  # cancelled while queued: dropped
            if shape is not None and call.shape() != shape:
                skipped.append(call)  # different arguments: next batch
                continue
            if settings.size([*calls, call]) > settings.max_batch_size:
                if calls:
                    self._waiting.appendleft(call)  # the next batch starts with it
                    break
                _reject(call, RuntimeError(
                    f"an item of @serve.batch function {self._func.__qualname__} has size "
                    f"{settings.size([call])}, more than max_batch_size={settings.max_batch_size}; raise "
                    "max_batch_size or check batch_size_fn"))
                continue
            shape = call.shape()
            calls.append(call)
        self._waiting.extendleft(reversed(skipped))
        return calls

    async def _acquire_slot(self) -> None:
        wanted = self._settings.max_concurrent_batches
        if wanted != self._slot_count:  # the setting changed: a fresh semaphore from now on
            self._slots, self._slot_count = asyncio.Semaphore(wanted), wanted
        await self._slots.acquire()

    def _batched_arguments(self, calls: list[_Call]) -> tuple[list, dict]:
        """[(a1, k=x1), (a2, k=x2)] -> ([[a1, a2]], {k: [x1, x2]}), `self` first for methods."""
        n_args = len(calls[0].args)
        args = [[c.args[i] for c in calls] for i in range(n_args)]
        kwargs = {k: [c.kwargs[k] for c in calls] for k in calls[0].kwargs}
        if self._owner_ref is not None:
            owner = self._owner_ref()
            if owner is None:
                raise RuntimeError(f"the object owning @serve.batch method {self._func.__qualname__} "
                                   "was garbage-collected while calls were queued")
            args.insert(0, owner)
        return args, kwargs

    async def _run_batch(self, calls: list[_Call]) -> None:
        slots = self._slots
        # this task's own context: the batch's requests, and no single current request
        serve_context._serve_batch_request_context.set([c.context for c in calls])
        serve_context._serve_request_context.set(serve_context.RequestContext())
        try:
            if self._streaming:
                await self._run_streaming(calls)
            else:
                await self._run_plain(calls)
        finally:
            slots.release()

    async def _run_plain(self, calls: list[_Call]) -> None:
        futures = [c.future for c in calls]
        try:
            args, kwargs = self._batched_arguments(calls)
            work = asyncio.ensure_future(self._func(*args, **kwargs))
            for fut in futures:  # every caller gone -> stop the batch's work too
                fut.add_done_callback(lambda _f, w=work: _cancel_if_all_done(w, futures))
            results = await work
            _check_length(self._func, len(calls), results, "returned")
        except asyncio.CancelledError:
            if all(f.done() for f in futures):
                return  # callers cancelled: nobody to tell
            _fail_all(futures, asyncio.CancelledError())
            return
        except BaseException as exc:  # noqa: BLE001 - any error reaches every caller of the batch
            _fail_all(futures, exc)
            return
        for fut, value in zip(futures, results):
            if not fut.done():
                fut.set_result(value)

    async def _run_streaming(self, calls: list[_Call]) -> None:
        finished = [False] * len(calls)
        gen = None
        try:
            args, kwargs = self._batched_arguments(calls)
            gen = self._func(*args, **kwargs)
            async for items in gen:
                _check_length(self._func, len(calls), items, "yielded")
                for i, (call, item) in enumerate(zip(calls, items)):
                    if finished[i] or call.abandoned:
                        continue
                    if item is StopIteration or isinstance(item, StopIteration):
                        finished[i] = True  # Ray's convention: this caller's stream is over
                        call.stream.put_nowait(_END)
                    else:
                        call.stream.put_nowait(item)
                if all(c.abandoned or f for c, f in zip(calls, finished)):
                    break  # nobody listens any more
        except BaseException as exc:  # noqa: BLE001 - the error ends every caller's stream
            for call, done in zip(calls, finished):
                if not done:
                    call.stream.put_nowait(exc)
            finished = [True] * len(calls)
            if not isinstance(exc, Exception):
                raise
        finally:
            if gen is not None and hasattr(gen, "aclose"):
                await gen.aclose()
        for call, done in zip(calls, finished):
            if not done:
                call.stream.put_nowait(_END)


def _reject(call: _Call, error: BaseException) -> None:
    if call.future is not None and not call.future.done():
        call.future.set_exception(error)
    elif call.stream is not None:
        call.stream.put_nowait(error)


def _replica_max_ongoing_requests() -> int | None:
    """The replica's `max_ongoing_requests` when running in a Serve replica that exposes it."""
    try:
        from raylite.serve.context import _get_internal_replica_context
    except ImportError:
        return None
    ctx = _get_internal_replica_context()
    config = getattr(ctx, "_deployment_config", None)
    value = config.get("max_ongoing_requests") if isinstance(config, dict) else getattr(
        config, "max_ongoing_requests", None)
    return value if isinstance(value, int) else None


def _warn_if_batches_cannot_fill(func: Callable[..., Any], settings: _Settings) -> None:
    """A replica admits only max_ongoing_requests calls at once, so larger batches never form (as
    Ray, say so once per queue: it is the usual reason batches stay small)."""
    limit = _replica_max_ongoing_requests()
    wanted = settings.max_batch_size * settings.max_concurrent_batches
    if limit is not None and limit < wanted:
        logging.getLogger("raylite.serve").warning(
            "@serve.batch %s: max_batch_size (%d) x max_concurrent_batches (%d) exceeds the deployment's "
            "max_ongoing_requests (%d), so batches will never be full; set "
            "@serve.deployment(max_ongoing_requests=%d) or more.", func.__qualname__,
            settings.max_batch_size, settings.max_concurrent_batches, limit, wanted)


def _cancel_if_all_done(work: asyncio.Future, futures: list[asyncio.Future]) -> None:
    if not work.done() and all(f.done() for f in futures):
        work.cancel()


def _fail_all(futures: list[asyncio.Future], exc: BaseException) -> None:
    for fut in futures:
        if not fut.done():
            fut.set_exception(exc)


def _check_length(func: Callable[..., Any], expected: int, results: Any, verb: str) -> None:
    try:
        got = len(results)
    except TypeError:
        raise TypeError(f"@serve.batch function {func.__qualname__} must {'return' if verb == 'returned' else 'yield'} "
                        f"a list with one item per call; it {verb} {type(results).__name__}") from None
    if got != expected:
        raise ValueError(f"@serve.batch function {func.__qualname__} {verb} {got} items for a batch of "
                         f"{expected} calls; it must {'return' if verb == 'returned' else 'yield'} "
                         "exactly one item per input, in the same order")


def _weak(obj: Any) -> Callable[[], Any]:
    try:
        return weakref.ref(obj)
    except TypeError:  # no __weakref__ slot: keep it alive instead
        return lambda: obj


@dataclass
class _QueueRegistry:
    """Where a decorated function's queues live: per owner (weakly), then per loop (weakly)."""

    by_owner: weakref.WeakKeyDictionary = field(default_factory=weakref.WeakKeyDictionary)
    strong_owner: dict = field(default_factory=dict)  # owners that refuse weak references
    for_function: weakref.WeakKeyDictionary = field(default_factory=weakref.WeakKeyDictionary)

    def per_loop(self, owner: Any) -> weakref.WeakKeyDictionary:
        if owner is None:
            return self.for_function
        try:
            return self.by_owner.setdefault(owner, weakref.WeakKeyDictionary())
        except TypeError:
            return self.strong_owner.setdefault(id(owner), weakref.WeakKeyDictionary())


_REGISTRIES: weakref.WeakKeyDictionary[_Settings, _QueueRegistry] = weakref.WeakKeyDictionary()


def _registry(settings: _Settings) -> _QueueRegistry:
    registry = _REGISTRIES.get(settings)
    if registry is None:
        registry = _REGISTRIES[settings] = _QueueRegistry()
    return registry


def _enqueue(func: Callable[..., Any], settings: _Settings, streaming: bool, wrapper: Callable[..., Any],
             call: _Call) -> None:
    """Put `call` on the queue of its owner (instance or function) in the running loop."""
    owner = _owner_of_call(call.args, wrapper)
    if owner is not None:
        call.args = call.args[1:]
    per_loop = _registry(settings).per_loop(owner)
    loop = asyncio.get_running_loop()
    queue = per_loop.get(loop)
    if queue is None:
        queue = per_loop[loop] = _BatchQueue(func, owner, settings, streaming)
    queue.put(call)


def defined_as_method(func: Callable[..., Any]) -> bool:
    """Whether `func` was written in a class body with `self` first (`Class.method`, not a
    function): then the first argument of every call is the instance, also through super()."""
    parts = getattr(func, "__qualname__", "").split(".")
    if len(parts) < 2 or parts[-2] == "<locals>":
        return False
    try:
        params = list(inspect.signature(func).parameters)
    except (TypeError, ValueError):
        return False
    return bool(params) and params[0] == "self"


def _owner_of_call(args: tuple, wrapper: Callable[..., Any]) -> Any:
    """The instance when the wrapper was called as a method (`self.f(x)`), else None."""
    if not args:
        return None
    if getattr(wrapper, "_serve_is_method", False):
        return args[0]
    bound = getattr(type(args[0]), wrapper.__name__, None)
    if bound is wrapper or getattr(bound, "__func__", None) is wrapper:
        return args[0]
    return None


def _decorate(func: Callable[..., Any], settings: _Settings) -> Callable[..., Any]:
    streaming = inspect.isasyncgenfunction(func)
    if not streaming and not inspect.iscoroutinefunction(func):
        raise TypeError(f"@serve.batch needs an 'async def' function or method (or an async generator "
                        f"for streaming); {getattr(func, '__qualname__', func)!r} is not. Make it async.")
    if streaming:
        @functools.wraps(func)
        async def wrapper(*args: Any, **kwargs: Any) -> AsyncIterator[Any]:
            call = _Call(args, kwargs, stream=asyncio.Queue())
            _enqueue(func, settings, streaming, wrapper, call)
            try:
                while True:
                    item = await call.stream.get()
                    if item is _END:
                        return
                    if isinstance(item, BaseException):
                        raise item
                    yield item
            finally:
                call.abandoned = True
    else:
        @functools.wraps(func)
        async def wrapper(*args: Any, **kwargs: Any) -> Any:
            call = _Call(args, kwargs, future=asyncio.get_running_loop().create_future())
            _enqueue(func, settings, streaming, wrapper, call)
            return await call.future  # cancelling the caller cancels the future: the call is dropped

    def set_max_batch_size(new_max_batch_size: int) -> None:
        """Change the largest batch from now on (Ray's name; e.g. from `reconfigure`)."""
        settings.max_batch_size = _check_max_batch_size(new_max_batch_size)

    def set_batch_wait_timeout_s(new_batch_wait_timeout_s: float) -> None:
        """Change how long the first waiting call may wait for company (Ray's name)."""
        settings.batch_wait_timeout_s = _check_timeout(new_batch_wait_timeout_s)

    def set_max_concurrent_batches(new_max_concurrent_batches: int) -> None:
        settings.max_concurrent_batches = _check_concurrency(new_max_concurrent_batches)

    def queues_here() -> list[_BatchQueue]:
        """This function's queues in the running event loop (one per instance, usually one)."""
        loop = asyncio.get_running_loop()
        registry = _registry(settings)
        maps = [registry.for_function, *registry.by_owner.values(), *registry.strong_owner.values()]
        return [q for m in maps for lp, q in list(m.items()) if lp is loop]

    def _get_curr_iteration_start_times() -> _RuntimeSummaryStatistics:
        """When the batches running now started (Ray's observability helper)."""
        return _RuntimeSummaryStatistics([t for q in queues_here() for t in q.batch_starts.values()])

    async def _is_batching_task_alive() -> bool:
        """Whether the task that forms batches runs (a queue not made yet counts as alive: it
        starts with the first call)."""
        return all(not q._flusher.done() for q in queues_here())

    async def _get_handling_task_stack() -> str | None:
        import io

        queues = queues_here()
        if not queues:
            return None
        out = io.StringIO()
        queues[0]._flusher.print_stack(file=out)
        return out.getvalue()

    wrapper._get_curr_iteration_start_times = _get_curr_iteration_start_times
    wrapper._is_batching_task_alive = _is_batching_task_alive
    wrapper._get_handling_task_stack = _get_handling_task_stack
    wrapper._serve_is_method = defined_as_method(func)
    wrapper.set_max_batch_size = set_max_batch_size
    wrapper.set_batch_wait_timeout_s = set_batch_wait_timeout_s
    wrapper.set_max_concurrent_batches = set_max_concurrent_batches
    wrapper._get_max_batch_size = lambda: settings.max_batch_size
    wrapper._get_batch_wait_timeout_s = lambda: settings.batch_wait_timeout_s
    wrapper._get_max_concurrent_batches = lambda: settings.max_concurrent_batches
    wrapper._serve_batch_settings = settings
    return wrapper


def batch(_func: Callable[..., Any] | None = None, /, max_batch_size: int = 10,
          batch_wait_timeout_s: float = 0.01, max_concurrent_batches: int = 1,
          batch_size_fn: Callable[[list], int] | None = None) -> Any:
    """Batch concurrent calls of an async function or method.

    Each caller passes one item (per argument) and awaits one result; the decorated function gets
    a list per argument and must return a list of the same length, in order (or, as an async
    generator, yield such lists; each caller then gets an async generator of its items, and a
    `StopIteration` in a yielded list ends that caller's stream). An exception reaches every caller
    of that batch. A caller cancelled while waiting is left out of the batch.

    A batch is flushed when `max_batch_size` items wait or `batch_wait_timeout_s` seconds have
    passed since the first of them arrived. With `batch_size_fn`, a batch's size is that function
    of its items (say, the total tokens of a list of texts) instead of their count. Usable bare
    (`@serve.batch`) or with arguments. The decorated callable has `set_max_batch_size(n)` and
    `set_batch_wait_timeout_s(s)`:

        @serve.batch(max_batch_size=8, batch_wait_timeout_s=0.05)
        async def __call__(self, texts: list[str]) -> list[int]:
            return [len(t) for t in texts]
    """
    if batch_size_fn is not None and not callable(batch_size_fn):
        raise TypeError(f"batch_size_fn must be a callable or None (a function of a list of items "
                        f"returning an int), got {type(batch_size_fn).__name__}")
    settings = _Settings(_check_max_batch_size(max_batch_size), _check_timeout(batch_wait_timeout_s),
                         _check_concurrency(max_concurrent_batches), batch_size_fn)
    if _func is not None:
        if not callable(_func):
            raise TypeError(f"@serve.batch got {_func!r}; pass settings by keyword: "
                            "@serve.batch(max_batch_size=8, batch_wait_timeout_s=0.05)")
        return _decorate(_func, settings)
    return lambda func: _decorate(func, settings)
