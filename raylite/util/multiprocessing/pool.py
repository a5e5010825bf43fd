"""A `multiprocessing.Pool` whose worker processes are raylite actors.

Code written for the standard library's pool runs unchanged across a cluster: replace
`from multiprocessing import Pool` with `from raylite.util.multiprocessing import Pool`. The
semantics follow the standard library where Ray's `ray.util.multiprocessing.Pool` does:

* The pool holds `processes` actors (default: the cluster's CPU count), each running the
  `initializer(*initargs)` once when it starts, and one chunk of work at a time.
* Work is cut into chunks (`chunksize`, or the standard library's heuristic) that are handed to
  the actors round-robin when submitted; the actors queue them. The iterable is read in full
  when the call is made (also by `imap`), so it must be finite.
* `context` is accepted for the standard library's signature and has no meaning here.
* A failing item raises its own exception (same type, `__cause__` holding the remote traceback),
  from `map`, `get()` or the iterator of `imap`, like the standard library.
* `maxtasksperchild=N`: an actor that has been given N chunks is told to exit once they are done
  and a fresh actor (initializer run again) takes its place.

Lifecycle: RUNNING -> CLOSED (close(): no new work, running work finishes) -> joined, or
RUNNING|CLOSED -> TERMINATED (terminate(): actors killed, unfinished work lost).
"""

from __future__ import annotations

import itertools
import os
import threading
import traceback
from collections import deque
from collections.abc import Callable, Iterable, Sequence
from multiprocessing import TimeoutError
from typing import Any

import raylite
from raylite.api import env_address

_RUNNING, _CLOSED, _TERMINATED = "RUNNING", "CLOSED", "TERMINATED"


class _RemoteTraceback(Exception):
    """The traceback of an exception raised inside a pool actor (the `__cause__` it is raised with)."""

    def __init__(self, tb: str) -> None:
        super().__init__(tb)
        self.tb = tb

    def __str__(self) -> str:
        return self.tb


class _Failure:
    """One item's exception, carried back as a value so the items before it in the chunk survive."""

    __slots__ = ("exc", "tb")

    def __init__(self, exc: BaseException, tb: str) -> None:
        self.exc = exc
        self.tb = tb

    def reraise(self) -> None:
        raise self.exc from _RemoteTraceback(self.tb)


class _PoolWorker:
    """The actor body: runs the initializer once, then chunks of `func` calls."""

    def __init__(self, initializer: Callable[..., Any] | None, initargs: Sequence[Any]) -> None:
        if initializer is not None:
            initializer(*initargs)

    def run_chunk(self, func: Callable[..., Any], items: list[Any], star: bool) -> list[Any]:
        out: list[Any] = []
        for item in items:
            try:
                out.append(func(*item) if star else func(item))
            except Exception as exc:  # handed back to the caller, who re-raises it
                out.append(_Failure(exc, traceback.format_exc()))
        return out

    def pid(self) -> int:
        return os.getpid()


def _check_item(value: Any) -> Any:
    if isinstance(value, _Failure):
        value.reraise()
    return value


class AsyncResult:
    """The result of `apply_async`/`map_async`/`starmap_async`, shaped like the standard library's.

    A background thread collects the chunks; `callback(result)` or `error_callback(exc)` runs in
    that thread once everything has arrived, as in `multiprocessing`.
    """

    def __init__(self, chunk_refs: list[Any], single: bool,
                 callback: Callable[[Any], Any] | None = None,
                 error_callback: Callable[[BaseException], Any] | None = None) -> None:
        self._refs = chunk_refs
        self._single = single
        self._callback = callback
        self._error_callback = error_callback
        self._done = threading.Event()
        self._value: Any = None
        self._error: BaseException | None = None
        threading.Thread(target=self._collect, name="raylite-pool-result", daemon=True).start()

    def _collect(self) -> None:
        try:
            items = [_check_item(v) for chunk in raylite.get(self._refs) for v in chunk]
            self._value = items[0] if self._single else items
        except BaseException as exc:  # the caller gets it from get(), or the error_callback
            self._error = exc
        self._done.set()
        if self._error is None and self._callback is not None:
            self._callback(self._value)
        elif self._error is not None and self._error_callback is not None:
            self._error_callback(self._error)

    def ready(self) -> bool:
        """Whether the work has finished (successfully or not)."""
        return self._done.is_set()

    def successful(self) -> bool:
        """Whether the work finished without raising; ValueError while it is still running."""
        if not self.ready():
            raise ValueError(f"{self!r} not ready: call successful() once ready() is True")
        return self._error is None

    def wait(self, timeout: float | None = None) -> None:
        """Block until the work has finished, or `timeout` seconds have passed."""
        self._done.wait(timeout)

    def get(self, timeout: float | None = None) -> Any:
        """The result; raises the work's own exception, or multiprocessing.TimeoutError."""
        if not self._done.wait(timeout):
            raise TimeoutError(f"the pool's result was not ready within {timeout} s")
        if self._error is not None:
            raise self._error
        return self._value


class IMapIterator:
    """The iterator `imap`/`imap_unordered` return: as in the standard library, an item that
    raised raises its exception from `next()`, and iterating on yields the items after it;
    `next(timeout)` raises multiprocessing.TimeoutError when the next item is late."""

    def __init__(self, chunk_refs: list[Any], ordered: bool) -> None:
        self._pending = list(chunk_refs)
        self._ordered = ordered
        self._buffer: deque[Any] = deque()

    def __iter__(self) -> IMapIterator:
        return self

    def __next__(self) -> Any:
        return self.next()

    def next(self, timeout: float | None = None) -> Any:
        while not self._buffer:
            if not self._pending:
                raise StopIteration
            if self._ordered:
                ready, _ = raylite.wait(self._pending[:1], num_returns=1, timeout=timeout)
            else:
                ready, _ = raylite.wait(self._pending, num_returns=1, timeout=timeout)
            if not ready:
                raise TimeoutError(f"the next result was not ready within {timeout} s")
            self._pending.remove(ready[0])
            self._buffer.extend(raylite.get(ready[0]))  # a lost chunk raises here, once
        return _check_item(self._buffer.popleft())


class Pool:
    """A process pool over raylite actors, with the standard library's `Pool` API.

    `ray_address` names the cluster to connect to when raylite is not initialized yet (else a
    local cluster is started, sized to `processes`). `ray_remote_args` are actor options for the
    pool's actors (default `num_cpus=1`).
    """

    def __init__(self, processes: int | None = None,
                 initializer: Callable[..., Any] | None = None,
                 initargs: Iterable[Any] | None = None,
                 maxtasksperchild: int | None = None,
                 context: Any = None,
                 ray_address: str | None = None,
                 ray_remote_args: dict[str, Any] | None = None) -> None:
        if processes is not None and processes < 1:
            raise ValueError(f"Pool(processes={processes}): the number of processes must be at least 1")
        if maxtasksperchild is not None and (not isinstance(maxtasksperchild, int) or maxtasksperchild < 1):
            raise ValueError(f"Pool(maxtasksperchild={maxtasksperchild!r}): give a positive int, or None "
                             "for actors that live as long as the pool")
        if initializer is not None and not callable(initializer):
            raise TypeError(f"Pool(initializer={initializer!r}): initializer must be callable")
        self._connect(ray_address, processes)
        self._processes = processes if processes is not None else self._cluster_cpus()
        self._initializer = initializer
        self._initargs = tuple(initargs or ())
        self._maxtasks = maxtasksperchild
        self._remote_args = {"num_cpus": 1, **(ray_remote_args or {})}
        self._check_fits()
        self._actor_class = raylite.remote(_PoolWorker).options(**self._remote_args)
        self._lock = threading.Lock()
        self._state = _RUNNING
        self._actors = [self._new_actor() for _ in range(self._processes)]
        self._given = [0] * self._processes  # chunks handed to each slot's current actor
        self._retired: list[Any] = []  # actors told to exit after their queued chunks
        self._next_slot = itertools.count()
        self._outstanding: list[Any] = []  # every chunk ref not yet known finished (for join)

    # --- set-up -------------------------------------------------------------------------------

    @staticmethod
    def _connect(ray_address: str | None, processes: int | None) -> None:
        if raylite.is_initialized():
            return
        address = ray_address or env_address(("RAY_ADDRESS", "RAYLITE_ADDRESS"))
        if address:
            raylite.init(address=address)
        else:
            raylite.init(num_cpus=processes)

    @staticmethod
    def _cluster_cpus() -> int:
        return max(1, int(raylite.cluster_resources().get("CPU", 1)))

    def _check_fits(self) -> None:
        per_actor = float(self._remote_args.get("num_cpus") or 0)
        total = raylite.cluster_resources().get("CPU", 0)
        if per_actor and self._processes * per_actor > total:
            raise ValueError(
                f"Pool(processes={self._processes}) needs {self._processes * per_actor:g} CPUs "
                f"(num_cpus={per_actor:g} per process) but the cluster has {total:g}: ask for fewer "
                "processes, or pass ray_remote_args={'num_cpus': <less>}")

    def _new_actor(self) -> Any:
        return self._actor_class.remote(self._initializer, self._initargs)

    # --- submission ---------------------------------------------------------------------------

    def _check_running(self) -> None:
        if self._state != _RUNNING:
            raise ValueError(f"Pool not running (it is {self._state.lower()}): create a new Pool")

    def _submit_chunk(self, func_ref: Any, items: list[Any], star: bool) -> Any:
        with self._lock:
            slot = next(self._next_slot) % self._processes
            ref = self._actors[slot].run_chunk.remote(func_ref, items, star)
            self._given[slot] += 1
            if self._maxtasks is not None and self._given[slot] >= self._maxtasks:
                old = self._actors[slot]
                old.__ray_terminate__.remote()  # runs after the chunks already queued on it
                self._retired.append(old)
                self._actors[slot] = self._new_actor()
                self._given[slot] = 0
            self._outstanding.append(ref)
            if len(self._outstanding) >= 1024:  # forget finished chunks so a long-lived pool stays small
                _, self._outstanding = raylite.wait(self._outstanding, num_returns=len(self._outstanding),
                                                    timeout=0)
            return ref

    def _chunksize(self, items: Sequence[Any], chunksize: int | None) -> int:
        if chunksize is not None:
            if chunksize < 1:
                raise ValueError(f"chunksize={chunksize}: give a positive int")
            return chunksize
        size, extra = divmod(len(items), self._processes * 4)  # the standard library's heuristic
        return max(1, size + bool(extra))

    def _submit_all(self, func: Callable[..., Any], iterable: Iterable[Any], chunksize: int | None,
                    star: bool) -> list[Any]:
        self._check_running()
        if not callable(func):
            raise TypeError(f"{func!r} is not callable")
        items = list(iterable)
        size = self._chunksize(items, chunksize)
        func_ref = raylite.put(func)  # shipped once, not once per chunk
        return [self._submit_chunk(func_ref, items[i:i + size], star) for i in range(0, len(items), size)]

    # --- the standard library's API -----------------------------------------------------------

    def apply(self, func: Callable[..., Any], args: Sequence[Any] = (), kwds: dict[str, Any] | None = None) -> Any:
        """`func(*args, **kwds)` on one of the pool's actors; blocks for the result."""
        return self.apply_async(func, args, kwds).get()

    def apply_async(self, func: Callable[..., Any], args: Sequence[Any] = (),
                    kwds: dict[str, Any] | None = None,
                    callback: Callable[[Any], Any] | None = None,
                    error_callback: Callable[[BaseException], Any] | None = None) -> AsyncResult:
        """`func(*args, **kwds)` on one of the pool's actors; returns an AsyncResult at once."""
        kwargs = dict(kwds or {})
        call = _Call(func, kwargs) if kwargs else func
        refs = self._submit_all(call, [tuple(args)], 1, star=True)
        return AsyncResult(refs, single=True, callback=callback, error_callback=error_callback)

    def map(self, func: Callable[[Any], Any], iterable: Iterable[Any], chunksize: int | None = None) -> list[Any]:
        """`[func(x) for x in iterable]`, computed by the pool's actors."""
        return self.map_async(func, iterable, chunksize).get()

    def map_async(self, func: Callable[[Any], Any], iterable: Iterable[Any], chunksize: int | None = None,
                  callback: Callable[[Any], Any] | None = None,
                  error_callback: Callable[[BaseException], Any] | None = None) -> AsyncResult:
        """Like `map`, returning an AsyncResult at once."""
        return AsyncResult(self._submit_all(func, iterable, chunksize, star=False), single=False,
                           callback=callback, error_callback=error_callback)

    def starmap(self, func: Callable[..., Any], iterable: Iterable[Sequence[Any]],
                chunksize: int | None = None) -> list[Any]:
        """`[func(*args) for args in iterable]`, computed by the pool's actors."""
        return self.starmap_async(func, iterable, chunksize).get()

    def starmap_async(self, func: Callable[..., Any], iterable: Iterable[Sequence[Any]],
                      chunksize: int | None = None,
                      callback: Callable[[Any], Any] | None = None,
                      error_callback: Callable[[BaseException], Any] | None = None) -> AsyncResult:
        """Like `starmap`, returning an AsyncResult at once."""
        items = [tuple(args) for args in iterable]
        return AsyncResult(self._submit_all(func, items, chunksize, star=True), single=False,
                           callback=callback, error_callback=error_callback)

    def imap(self, func: Callable[[Any], Any], iterable: Iterable[Any], chunksize: int = 1) -> IMapIterator:
        """Results of `func` over `iterable` in order, each yielded as soon as it (and all before it) is ready."""
        return IMapIterator(self._submit_all(func, iterable, chunksize, star=False), ordered=True)

    def imap_unordered(self, func: Callable[[Any], Any], iterable: Iterable[Any],
                       chunksize: int = 1) -> IMapIterator:
        """Results of `func` over `iterable` in the order their chunks finish."""
        return IMapIterator(self._submit_all(func, iterable, chunksize, star=False), ordered=False)

    # --- lifecycle ----------------------------------------------------------------------------

    def close(self) -> None:
        """Take no more work; work already submitted still runs (then call join())."""
        if self._state == _RUNNING:
            self._state = _CLOSED

    def terminate(self) -> None:
        """Kill the pool's actors at once; unfinished work is lost."""
        self._state = _TERMINATED
        with self._lock:
            actors, self._actors, retired, self._retired = self._actors, [], self._retired, []
            self._outstanding = []
        for actor in (*actors, *retired):
            try:
                raylite.kill(actor)
            except Exception:  # noqa: BLE001 - a retired actor may have exited already
                pass

    def join(self) -> None:
        """Wait for submitted work to finish and the actors to exit; needs close() or terminate() first."""
        if self._state == _RUNNING:
            raise ValueError("Pool is still running: call close() or terminate() before join()")
        if self._state == _CLOSED:
            with self._lock:
                refs, self._outstanding = self._outstanding, []
            if refs:
                raylite.wait(refs, num_returns=len(refs))
            self.terminate()

    def __enter__(self) -> Pool:
        self._check_running()
        return self

    def __exit__(self, *exc_info: Any) -> None:
        self.terminate()  # as the standard library's pool does on leaving `with`

    def __reduce__(self) -> Any:
        raise NotImplementedError("a Pool cannot be passed to tasks or actors; create it where it is used")


class _Call:
    """`func` with keyword arguments bound, so an apply_async call travels as one picklable callable."""

    def __init__(self, func: Callable[..., Any], kwargs: dict[str, Any]) -> None:
        self.func = func
        self.kwargs = kwargs

    def __call__(self, *args: Any) -> Any:
        return self.func(*args, **self.kwargs)
