"""An actor lives while a strong handle to it exists in any process, as in Ray: handles passed
to tasks, stored by other actors, returned or put in the object store count; weak ones
(`get_runtime_context().current_actor`, `get_actor()`) do not. When the last strong handle
anywhere is gone, the actor's process ends.

Each test learns the actor's pid, drops the driver's handle, proves the actor still answers
while another strong handle lives (a call through that handle returns), and then waits for
the process to exit once that handle goes too.
"""

from __future__ import annotations

import asyncio
import gc
import os
import pickle

import raylite as ray
from tests.conftest import process_gone, wait_for


@ray.remote
class Counter:
    def __init__(self) -> None:
        self.n = 0

    def bump(self) -> int:
        self.n += 1
        return self.n

    def pid(self) -> int:
        return os.getpid()

    def wait_then_bump(self, gate) -> int:
        ray.get(gate.wait.remote())
        return self.bump()

    def touch_self(self, me) -> int:
        weak = ray.get_runtime_context().current_actor  # weak: dropping it changes nothing
        del weak
        return os.getpid()

    def give_weak_self(self, me, holder) -> None:
        ray.get(holder.keep.remote(ray.get_runtime_context().current_actor))


@ray.remote
class Holder:
    def __init__(self) -> None:
        self.handle = None

    def keep(self, handle) -> None:
        self.handle = handle

    def call(self) -> int:
        return ray.get(self.handle.bump.remote())

    def drop(self) -> None:
        self.handle = None

    def call_and_drop(self, gate) -> list:
        ref = self.handle.wait_then_bump.remote(gate)
        self.handle = None
        gc.collect()
        return [ref]


@ray.remote
class Gate:
    def __init__(self) -> None:
        self.opened = asyncio.Event()

    async def wait(self) -> None:
        await self.opened.wait()

    async def open(self) -> None:
        self.opened.set()


@ray.remote
def call_after(handle, gate) -> int:
    ray.get(gate.wait.remote())
    return ray.get(handle.bump.remote())


def _ends(pid: int, what: str) -> None:
    gc.collect()
    wait_for(lambda: process_gone(pid), what=what)


def test_a_handle_passed_to_a_pending_task_keeps_the_actor_until_the_task_ends(cluster):
    gate = Gate.remote()
    actor = Counter.remote()
    pid = ray.get(actor.pid.remote())
    result = call_after.remote(actor, gate)
    del actor
    gc.collect()
    ray.get(gate.open.remote())
    assert ray.get(result) == 1  # the task's copy of the handle kept the actor alive
    _ends(pid, "the actor to end after the task holding its last handle finished")


def test_an_actor_given_its_own_handle_does_not_keep_itself_alive(cluster):
    actor = Counter.remote()
    pid = ray.get(actor.pid.remote())
    for _ in range(3):
        assert ray.get(actor.touch_self.remote(actor)) == pid
    actor = None
    _ends(pid, "an actor that was passed its own handle to end with the driver's handle")


def test_a_weak_handle_passed_on_does_not_count(cluster):
    holder = Holder.remote()
    actor = Counter.remote()
    pid = ray.get(actor.pid.remote())
    ray.get(actor.give_weak_self.remote(actor, holder))
    actor = None
    _ends(pid, "the actor to end although another actor stores a weak handle to it")


def test_a_handle_stored_by_another_actor_keeps_it_alive_until_dropped(cluster):
    holder = Holder.remote()
    actor = Counter.remote()
    pid = ray.get(actor.pid.remote())
    ray.get(holder.keep.remote(actor))
    del actor
    gc.collect()
    assert ray.get(holder.call.remote()) == 1  # alive: the holder's strong handle counts
    assert ray.get(holder.call.remote()) == 2
    ray.get(holder.drop.remote())
    _ends(pid, "the actor to end once the only actor holding its handle dropped it")


def test_a_handle_inside_a_put_object_lives_as_long_as_the_object(cluster):
    actor = Counter.remote()
    pid = ray.get(actor.pid.remote())
    boxed = ray.put({"actor": actor})
    del actor
    gc.collect()
    again = ray.get(boxed)["actor"]
    assert ray.get(again.bump.remote()) == 1
    del again, boxed
    _ends(pid, "the actor to end with the stored object that held its handle")


def test_a_handle_pickled_out_of_band_keeps_the_actor_for_the_creators_lifetime(cluster):
    actor = Counter.remote()
    blob = pickle.dumps(actor)  # nothing can count this copy: it may be loaded at any time
    del actor
    gc.collect()
    loaded = pickle.loads(blob)
    assert ray.get(loaded.bump.remote()) == 1
    del loaded
    gc.collect()
    assert ray.get(pickle.loads(blob).bump.remote()) == 2


def test_a_call_in_flight_keeps_its_actor_after_the_last_handle_is_dropped(cluster):
    gate = Gate.remote()
    holder = Holder.remote()
    actor = Counter.remote()
    pid = ray.get(actor.pid.remote())
    ray.get(holder.keep.remote(actor))
    del actor
    gc.collect()
    (ref,) = ray.get(holder.call_and_drop.remote(gate))  # the holder's handle is gone now
    ray.get(gate.open.remote())
    assert ray.get(ref) == 1
    del ref
    _ends(pid, "the actor to end once its last call was answered")
