"""Ray's automatic global GC, end to end: objects pinned only by refs inside reference cycles
(in an actor that turned Python's automatic collection off) fill the store; once it is past
70% full, every process is asked to collect, the cycles go, and their objects are freed."""

from __future__ import annotations

import gc

import pytest

import raylite as ray
from raylite.util.state import list_objects
from tests.conftest import wait_for

MIB = 1024 * 1024


@pytest.fixture
def small_store():
    if ray.is_initialized():
        ray.shutdown()
    ray.init(num_cpus=1, object_store_memory=100 * MIB)
    yield
    ray.shutdown()


@ray.remote
class CycleMaker:
    def __init__(self) -> None:
        self.collections = 0
        gc.disable()  # only a collection someone asks for runs here
        gc.callbacks.append(self._seen)

    def _seen(self, phase: str, info: dict) -> None:
        if phase == "stop":
            self.collections += 1

    def make_cycle(self) -> None:
        a: list = [ray.put(b"0" * (10 * MIB))]
        b: list = [ray.put(b"1" * (10 * MIB)), a]
        a.append(b)  # 20 MiB of objects, held only by this cycle once the call returns

    def collections_seen(self) -> int:
        return self.collections


def test_a_store_past_the_threshold_has_cycles_collected(small_store):
    maker = CycleMaker.remote()
    for _ in range(3):  # 60 MiB of 100: below the threshold
        ray.get(maker.make_cycle.remote())
    assert ray.get(maker.collections_seen.remote()) == 0
    ray.get(maker.make_cycle.remote())  # 80 MiB: past it
    wait_for(lambda: ray.get(maker.collections_seen.remote()) >= 1, what="the actor collected its cycles")
    # the collected cycles' objects are freed: at most the last call's 20 MiB are left (its
    # cycle was still in use when its own put crossed the threshold)
    assert stored_bytes() <= 80 * MIB
    wait_for(lambda: stored_bytes() <= 20 * MIB + MIB, what="the collected cycles' objects freed")


def stored_bytes() -> int:
    return sum(o.object_size or 0 for o in list_objects())
