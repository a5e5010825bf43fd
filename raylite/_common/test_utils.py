"""`ray._common.test_utils`: the helpers Ray 2.60 users' own test suites import.

`wait_for_condition` (the most used: Ray's documentation examples wait with it too),
`async_wait_for_condition`, and two small actors tests coordinate tasks with: `SignalActor`
(tasks wait on it until the test sends the signal) and `Semaphore`; `run_string_as_driver`
runs a script as another driver. A real module, not a name made up in the driver, so a task
that uses one of them unpickles on a worker as it does on Ray.
"""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys

import raylite
from raylite._private.test_utils import async_wait_for_condition, wait_for_condition

__all__ = ["SignalActor", "Semaphore", "async_wait_for_condition", "run_string_as_driver", "wait_for_condition"]


@raylite.remote(num_cpus=0)
class SignalActor:
    """Tasks `await signal.wait.remote()` (or `ray.get` it) until the test calls `send()`;
    `send(clear=True)` releases the waiters of now and re-arms it."""

    def __init__(self) -> None:
        self._event = asyncio.Event()
        self._waiting = 0

    def send(self, clear: bool = False) -> None:
        self._event.set()
        if clear:
            self._event.clear()

    async def wait(self, should_wait: bool = True) -> None:
        if not should_wait:
            return
        self._waiting += 1
        try:
            await self._event.wait()
        finally:
            self._waiting -= 1

    async def cur_num_waiters(self) -> int:
        return self._waiting


@raylite.remote(num_cpus=0)
class Semaphore:
    """An asyncio semaphore as an actor, shared by every task holding its handle."""

    def __init__(self, value: int = 1) -> None:
        self._sema = asyncio.Semaphore(value)

    async def acquire(self) -> None:
        await self._sema.acquire()

    async def release(self) -> None:
        self._sema.release()

    async def locked(self) -> bool:
        return self._sema.locked()


def run_string_as_driver(driver_script: str, env: dict | None = None, encode: str = "utf-8") -> str:
    """Run `driver_script` in a fresh interpreter of this environment and return what it printed
    (stdout and stderr together); raise CalledProcessError, carrying that output, if it failed."""
    proc = subprocess.run([sys.executable, "-"], input=driver_script.encode(encode), stdout=subprocess.PIPE,
                          stderr=subprocess.STDOUT, env=env if env is not None else dict(os.environ), timeout=600)
    out = proc.stdout.decode(encode, errors="replace")
    if proc.returncode:
        raise subprocess.CalledProcessError(proc.returncode, proc.args, out)
    return out
