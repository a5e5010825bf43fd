"""Concurrency groups of an actor: each group runs its calls on its own executor.

As in Ray, a threaded actor gives each group (and the default group) its own thread pool,
and an async actor gives each group its own event loop in its own thread, so a call blocked
in one group (a long sync method, a `time.sleep` inside an `async def`) never stalls the calls
of another group, and `threading.local` data set in one group is not seen in another. Calls
named for Ray's system group `_ray_system` (and the compiled-graph setup calls) run in a
group of their own too. Used by worker.py only.
"""

from __future__ import annotations

import asyncio
import threading
from concurrent.futures import ThreadPoolExecutor
from typing import Any

DEFAULT = ""  # the default group: max_concurrency calls at once
SYSTEM = "_ray_system"  # Ray's internal group: system calls that must not wait behind user calls
SYSTEM_CONCURRENCY = 1


def method_group(actor: Any, method_name: str) -> str:
    """The group `@method(concurrency_group=...)` put the method in ("" = default)."""
    fn = getattr(type(actor), method_name, None)
    opts = getattr(fn, "__raylite_method_options__", None) or {}
    return opts.get("concurrency_group") or DEFAULT


class AsyncGroup:
    """One event loop in its own thread, with a bound on the calls it runs at once."""

    def __init__(self, name: str, max_concurrency: int) -> None:
        ready = threading.Event()
        self.loop: asyncio.AbstractEventLoop | None = None
        self.sema: asyncio.Semaphore | None = None

        def run() -> None:
            loop = asyncio.new_event_loop()
            asyncio.set_event_loop(loop)
            self.loop = loop
            self.sema = asyncio.Semaphore(max_concurrency)
            ready.set()
            loop.run_forever()

        threading.Thread(target=run, name=f"actor-asyncio{'-' + name if name else ''}", daemon=True).start()
        ready.wait()


class ConcurrencyGroups:
    """The executors of one actor's groups, made when the actor starts.

    sync actors: a ThreadPoolExecutor per named group, and one for the default group when
    groups are declared or max_concurrency > 1 (otherwise default calls run in order on the
    worker's main thread, `pool(DEFAULT)` is None). async actors: an AsyncGroup per group."""

    def __init__(self, groups: dict[str, int], max_concurrency: int, is_async: bool,
                 default_loop: AsyncGroup | None = None) -> None:
        self.is_async = is_async
        self.sizes = {DEFAULT: max_concurrency, SYSTEM: SYSTEM_CONCURRENCY, **groups}
        self._async: dict[str, AsyncGroup] = {}
        self._pools: dict[str, ThreadPoolExecutor] = {}
        self._lock = threading.Lock()
        if is_async:
            self._async[DEFAULT] = default_loop or AsyncGroup(DEFAULT, max_concurrency)
        elif groups or max_concurrency > 1:
            self._pools[DEFAULT] = ThreadPoolExecutor(max_concurrency, thread_name_prefix="actor")

    def check(self, group: str) -> None:
        if group not in self.sizes:
            declared = ", ".join(repr(g) for g in self.sizes if g not in (DEFAULT, SYSTEM)) or "none"
            raise ValueError(f"concurrency group {group!r} is not defined for this actor (declared: "
                             f"{declared}). Declare it with @remote(concurrency_groups={{{group!r}: N}}).")

    def async_group(self, group: str) -> AsyncGroup:
        """The loop of an async actor's group, started on its first call."""
        self.check(group)
        with self._lock:
            found = self._async.get(group)
            if found is None:
                found = self._async[group] = AsyncGroup(group, self.sizes[group])
            return found

    def pool(self, group: str) -> ThreadPoolExecutor | None:
        """The thread pool of a sync actor's group (None: the default group runs in order on
        the main thread), started on its first call."""
        self.check(group)
        if group == DEFAULT:
            return self._pools.get(DEFAULT)
        with self._lock:
            found = self._pools.get(group)
            if found is None:
                prefix = f"actor-{'system' if group == SYSTEM else group}"
                found = self._pools[group] = ThreadPoolExecutor(self.sizes[group], thread_name_prefix=prefix)
            return found
