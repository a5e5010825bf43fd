"""An actor call is sent to its actor only once the arguments its caller owns are computed, as
in Ray: one caller's call waiting on a slow argument never holds up another caller's call,
while one caller's calls still run in the order it made them (a later call waits behind an
earlier one whose argument is not ready), and a waiting call can be cancelled."""

from __future__ import annotations

import asyncio

import pytest

import raylite as ray
from raylite.exceptions import GetTimeoutError, TaskCancelledError


@ray.remote(num_cpus=0)
class Gate:
    def __init__(self) -> None:
        self.opened = asyncio.Event()

    async def wait(self) -> None:
        await self.opened.wait()

    async def open(self) -> None:
        self.opened.set()


@ray.remote(num_cpus=0)
class Log:
    def __init__(self) -> None:
        self.seen: list = []

    def add(self, item) -> int:
        self.seen.append(item)
        return len(self.seen)

    def items(self) -> list:
        return list(self.seen)


@ray.remote(num_cpus=0)
def slow_value(gate) -> str:
    ray.get(gate.wait.remote())
    return "slow"


@ray.remote(num_cpus=0)
def other_caller(log) -> int:
    return ray.get(log.add.remote("fast"))


def test_a_call_waiting_for_its_argument_does_not_hold_up_another_caller(cluster):
    gate, log = Gate.remote(), Log.remote()
    held = log.add.remote(slow_value.remote(gate))
    # another process's call runs now, while the first caller's argument is still being made
    assert ray.get(other_caller.remote(log), timeout=60) == 1
    with pytest.raises(GetTimeoutError):
        ray.get(held, timeout=0.2)
    ray.get(gate.open.remote())
    assert ray.get(held, timeout=60) == 2
    assert ray.get(log.items.remote()) == ["fast", "slow"]


def test_one_callers_calls_keep_their_order_behind_a_waiting_argument(cluster):
    gate, log = Gate.remote(), Log.remote()
    first = log.add.remote(slow_value.remote(gate))
    second = log.add.remote("second")
    with pytest.raises(GetTimeoutError):
        ray.get(second, timeout=0.2)
    ray.get(gate.open.remote())
    assert ray.get([first, second], timeout=60) == [1, 2]
    assert ray.get(log.items.remote()) == ["slow", "second"]


def test_a_call_cancelled_while_waiting_for_its_argument_lets_the_next_one_go(cluster):
    gate, log = Gate.remote(), Log.remote()
    first = log.add.remote(slow_value.remote(gate))
    second = log.add.remote("second")
    ray.cancel(first)
    with pytest.raises(TaskCancelledError):
        ray.get(first, timeout=60)
    assert ray.get(second, timeout=60) == 1
    ray.get(gate.open.remote())
    assert ray.get(log.items.remote()) == ["second"]


@ray.remote(num_cpus=0)
class AsyncLog:
    def __init__(self) -> None:
        self.seen: list = []

    async def add(self, item) -> int:
        self.seen.append(item)
        return len(self.seen)

    async def items(self) -> list:
        return list(self.seen)


def test_an_async_actors_calls_do_not_wait_behind_one_whose_argument_is_not_ready(cluster):
    """An async (or threaded) actor does not run calls in order, as in Ray: a caller's later
    call is sent while an earlier one's argument is still being made."""
    gate, log = Gate.remote(), AsyncLog.remote()
    held = log.add.remote(slow_value.remote(gate))
    assert ray.get(log.add.remote("later"), timeout=60) == 1
    ray.get(gate.open.remote())
    assert ray.get(held, timeout=60) == 2
    assert ray.get(log.items.remote()) == ["later", "slow"]
