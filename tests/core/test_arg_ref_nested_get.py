"""A task that got an object as an argument and also gets the same ref passed nested in another
argument finds it at once: no question to the owner, so the task keeps its CPU, as in Ray
(Ray's test_not_release_resource). Were the CPU lent back, the queued task below would start
on a second worker meanwhile.
"""

from __future__ import annotations

import os
import time

import pytest

import raylite as ray


@pytest.fixture(scope="module")
def one_cpu():
    if ray.is_initialized():
        ray.shutdown()
    ray.init(num_cpus=1)
    yield
    ray.shutdown()


@ray.remote
def big() -> list:
    return [1] * (1024 * 1024)  # in the object store, not inline


@ray.remote
def reads_both(value, nested):
    assert value == ray.get(nested["refs"][0])
    return os.getpid()


@ray.remote
def after(value) -> int:
    return os.getpid()


def test_a_get_of_an_argument_passed_again_nested_keeps_the_cpu(one_cpu):
    ref = big.remote()
    first = reads_both.remote(ref, {"refs": [ref]})
    second = after.remote(ref)  # queued behind the first: it runs on the same, only, worker
    assert len(set(ray.get([first, second]))) == 1


def test_a_workers_get_answered_within_the_grace_keeps_its_cpu_a_longer_one_lends_it(cluster):
    """A task's get() tells its node it is blocked (lending its CPU, so another task may start)
    only once it has waited BLOCKED_GRACE_S: a get of objects already in the store, whose
    locations come from the owner in a moment, does not start a new worker (Ray's
    test_release_resources_race); a get that really waits still lends the CPU."""
    stored = [ray.put(bytearray(1 << 20)) for _ in range(3)]

    @ray.remote
    def slow():
        time.sleep(0.5)
        return 1

    @ray.remote
    def probe(refs):
        from raylite._core import runtime
        from raylite._core.client import objects

        client = runtime.client()
        calls: list = []
        original = client.blocked_hook

        def spy(blocked: bool) -> None:
            calls.append(blocked)
            original(blocked)

        client.blocked_hook = spy
        objects.BLOCKED_GRACE_S = 60.0  # whatever the load: answered within it
        ray.get(refs)
        quick = list(calls)
        objects.BLOCKED_GRACE_S = 0.0
        ray.get(slow.remote())
        return quick, calls[len(quick):]

    quick, slow_calls = ray.get(probe.remote(stored), timeout=60)
    assert quick == []
    assert slow_calls == [True, False]
