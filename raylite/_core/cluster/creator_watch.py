"""Stop a local cluster's daemon when the driver *process* that started it exits.

A local cluster must live exactly as long as its driver process. Linux's parent-death
signal (PR_SET_PDEATHSIG) cannot say that: it fires when the *thread* that forked the
child exits, so a cluster that a driver thread started (the first `ray.get` in a worker
thread, or Ray Data's prefetch thread auto-initializing) died with that thread. Instead
the daemon watches the process itself: a pidfd (Linux 5.3+) becomes readable when the
process exits, however it exits (SIGKILL included); elsewhere the daemon polls its parent
process id, which changes only when the whole parent process is gone.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
from collections.abc import Callable

_POLL_INTERVAL_S = 0.5


def creator_alive(creator_pid: int) -> bool:
    """True while the process that started this daemon still runs (and is still our parent)."""
    return os.getppid() == creator_pid


def watch_creator(loop: asyncio.AbstractEventLoop, creator_pid: int, on_exit: Callable[[], None]) -> None:
    """Call `on_exit()` on `loop` once the creator process has exited (at once if it already has)."""
    if not creator_alive(creator_pid):
        loop.call_soon(on_exit)
        return
    fd = -1
    with contextlib.suppress(AttributeError, OSError):
        fd = os.pidfd_open(creator_pid)
    if fd >= 0 and creator_alive(creator_pid):  # the pidfd names our creator, not a reused pid
        def _readable() -> None:
            loop.remove_reader(fd)
            os.close(fd)
            on_exit()

        try:
            loop.add_reader(fd, _readable)
            return
        except (NotImplementedError, OSError):
            os.close(fd)
    elif fd >= 0:
        os.close(fd)
        loop.call_soon(on_exit)
        return
    loop.create_task(_poll(creator_pid, on_exit))


async def _poll(creator_pid: int, on_exit: Callable[[], None]) -> None:
    while creator_alive(creator_pid):
        await asyncio.sleep(_POLL_INTERVAL_S)
    on_exit()
