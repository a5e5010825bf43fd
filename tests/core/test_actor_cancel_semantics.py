"""`ray.cancel` of actor calls, as Ray defines it: an async actor's call is cancelled the asyncio
way (CancelledError inside it, at once); a running call of a sync or threaded actor is not
interrupted (the actor's state would be left half-changed) but sees `is_canceled()`, and its
caller gets TaskCancelledError; `recursive=True` reaches the actor calls a call made. Each call
knows its own task id, also when an async or threaded actor runs several at once."""

from __future__ import annotations

import asyncio
import time

import pytest

import raylite as ray
from tests.conftest import wait_for


@ray.remote
class Gate:
    def __init__(self) -> None:
        self.opened = asyncio.Event()
        self.waiters = 0

    async def wait(self) -> None:
        self.waiters += 1
        await self.opened.wait()

    async def open(self) -> None:
        self.opened.set()

    async def count(self) -> int:
        return self.waiters


@ray.remote
class AsyncWorker:
    def __init__(self) -> None:
        self.saw_cancel = False
        self.started = 0

    async def long(self) -> str:
        self.started += 1
        try:
            await asyncio.sleep(60)
        except asyncio.CancelledError:
            self.saw_cancel = True
            raise
        return "done"

    async def blocked(self, gate) -> str:
        self.started += 1
        try:
            await gate.wait.remote()
        except asyncio.CancelledError:
            self.saw_cancel = True
            raise
        return "opened"

    async def state(self) -> tuple[bool, int]:
        return self.saw_cancel, self.started

    async def my_task_id(self, gate) -> str:
        mine = ray.get_runtime_context().get_task_id()
        await gate.wait.remote()  # the other calls run meanwhile
        assert ray.get_runtime_context().get_task_id() == mine
        return mine

    async def call_child(self, child, gate) -> tuple:
        self.child_ref = child.long.remote()
        await gate.wait.remote()
        return await self.child_ref

    async def child_ref_of(self) -> list:
        return [self.child_ref]


@ray.remote
class SyncWorker:
    def __init__(self) -> None:
        self.finished = []
        self.is_done = False  # an attribute named like a method: calls still reach the method

    def careful(self, gate, tag: str) -> str:
        ray.get(gate.wait.remote())
        cancelled = ray.get_runtime_context().is_canceled()
        self.finished.append((tag, cancelled))
        return "cancelled-seen" if cancelled else "completed"

    def log(self) -> list:
        return self.finished

    def is_done(self) -> str:
        return "method"


def test_a_running_async_call_is_cancelled_at_once_with_cancelled_error_inside(cluster):
    worker = AsyncWorker.remote()
    ref = worker.long.remote()
    wait_for(lambda: ray.get(worker.state.remote())[1] == 1, what="the call to start")
    started = time.monotonic()
    ray.cancel(ref)
    with pytest.raises(ray.exceptions.TaskCancelledError, match="was cancelled"):
        ray.get(ref, timeout=30)
    assert time.monotonic() - started < 30  # not after the 60 s sleep
    assert ray.get(worker.state.remote()) == (True, 1)


def test_an_async_call_waiting_for_a_slot_is_cancelled_without_running(cluster):
    gate = Gate.remote()
    worker = AsyncWorker.options(max_concurrency=1).remote()
    running = worker.blocked.remote(gate)
    wait_for(lambda: ray.get(gate.count.remote()) == 1, what="the first call to hold the only slot")
    waiting = worker.blocked.remote(gate)
    ray.cancel(waiting)
    with pytest.raises(ray.exceptions.TaskCancelledError):
        ray.get(waiting, timeout=30)
    ray.cancel(running)
    with pytest.raises(ray.exceptions.TaskCancelledError):
        ray.get(running, timeout=30)
    assert ray.get(worker.state.remote()) == (True, 1)  # the waiting call never began


def test_a_running_sync_call_is_not_interrupted_but_sees_is_canceled(cluster):
    gate = Gate.remote()
    worker = SyncWorker.remote()
    ref = worker.careful.remote(gate, "a")
    wait_for(lambda: ray.get(gate.count.remote()) == 1, what="the call to wait at the gate")
    ray.cancel(ref, recursive=False)
    ray.get(gate.open.remote())
    with pytest.raises(ray.exceptions.TaskCancelledError):
        ray.get(ref, timeout=30)
    assert ray.get(worker.log.remote()) == [("a", True)]  # it ran to the end, and knew


def test_in_a_threaded_actor_only_the_cancelled_call_sees_is_canceled(cluster):
    gate = Gate.remote()
    worker = SyncWorker.options(max_concurrency=3).remote()
    refs = [worker.careful.remote(gate, tag) for tag in "abc"]
    wait_for(lambda: ray.get(gate.count.remote()) == 3, what="three calls to wait at the gate")
    ray.cancel(refs[1], recursive=False)
    ray.get(gate.open.remote())
    assert ray.get(refs[0]) == "completed" and ray.get(refs[2]) == "completed"
    with pytest.raises(ray.exceptions.TaskCancelledError):
        ray.get(refs[1])
    assert sorted(ray.get(worker.log.remote())) == [("a", False), ("b", True), ("c", False)]


def test_concurrent_async_calls_each_know_their_own_task_id(cluster):
    gate = Gate.remote()
    worker = AsyncWorker.remote()
    refs = [worker.my_task_id.remote(gate) for _ in range(5)]
    wait_for(lambda: ray.get(gate.count.remote()) == 5, what="five calls to wait at the gate")
    ray.get(gate.open.remote())
    assert ray.get(refs) == [r.task_id().hex() for r in refs]


def test_recursive_cancel_reaches_the_actor_calls_a_call_made(cluster):
    gate = Gate.remote()
    parent = AsyncWorker.remote()
    child = AsyncWorker.remote()
    ref = parent.call_child.remote(child, gate)
    wait_for(lambda: ray.get(child.state.remote())[1] == 1, what="the child call to start")
    ray.cancel(ref, recursive=True)
    with pytest.raises(ray.exceptions.TaskCancelledError):
        ray.get(ref, timeout=30)
    (child_ref,) = ray.get(parent.child_ref_of.remote())
    with pytest.raises(ray.exceptions.TaskCancelledError):
        ray.get(child_ref, timeout=30)
    assert ray.get(child.state.remote())[0]  # the child saw CancelledError


def test_an_instance_attribute_does_not_hide_a_method_of_the_same_name(cluster):
    worker = SyncWorker.remote()
    assert ray.get(worker.is_done.remote()) == "method"


def test_is_canceled_in_an_async_actor_is_refused_with_rays_message(cluster):
    @ray.remote
    class Asyncy:
        async def check(self) -> bool:
            return ray.get_runtime_context().is_canceled()

    with pytest.raises(RuntimeError, match="This method is not supported in an async actor."):
        ray.get(Asyncy.remote().check.remote())


def test_a_plain_task_is_still_interrupted_by_cancel(cluster):
    @ray.remote
    def sleeper() -> str:
        time.sleep(60)
        return "slept"

    ref = sleeper.remote()
    wait_for(lambda: any(t["state"] == "RUNNING" for t in ray.util.state.list_tasks(
        filters=[("func_or_class_name", "=", "sleeper")])), what="the task to run")
    ray.cancel(ref)
    with pytest.raises(ray.exceptions.TaskCancelledError):
        ray.get(ref, timeout=30)
