"""ActorPool: ordering, back-pressure, timeouts, and adding/removing actors (Ray's semantics).

Completion order is forced with a Gate actor (an asyncio.Event behind an actor) instead of
sleeps: a call given the gate does not finish until the test opens it.
"""

from __future__ import annotations

import asyncio

import pytest

import raylite as ray
from raylite.util import ActorPool


@ray.remote
class Gate:
    def __init__(self):
        self.event = asyncio.Event()

    async def wait(self):
        await self.event.wait()

    async def open(self):
        self.event.set()


@ray.remote
class Worker:
    def __init__(self, tag="w"):
        self.tag = tag
        self.calls = 0

    def double(self, value, gate=None):
        self.calls += 1
        if gate is not None:
            ray.get(gate.wait.remote())
        return 2 * value

    def tagged(self, value):
        return (self.tag, value)

    def fail(self, value):
        raise KeyError(value)

    def num_calls(self):
        return self.calls


def double(actor, value):
    return actor.double.remote(value)


@pytest.fixture(scope="module")
def workers(cluster):
    return [Worker.remote("a"), Worker.remote("b")]


def test_map_keeps_input_order(workers):
    pool = ActorPool(workers)
    assert list(pool.map(double, range(7))) == [0, 2, 4, 6, 8, 10, 12]
    assert not pool.has_next()


def test_map_unordered_yields_every_result(workers):
    pool = ActorPool(workers)
    assert sorted(pool.map_unordered(double, range(7))) == [0, 2, 4, 6, 8, 10, 12]


def test_map_spreads_over_actors_and_queues_the_rest(workers):
    pool = ActorPool(workers)
    tags = [tag for tag, _ in pool.map(lambda a, v: a.tagged.remote(v), range(6))]
    assert set(tags) == {"a", "b"}


def test_submit_get_next_has_next_and_stop(workers):
    pool = ActorPool(workers)
    for v in (1, 2, 3):  # three submissions, two actors: the third waits for a free actor
        pool.submit(double, v)
    assert not pool.has_free()
    assert [pool.get_next(), pool.get_next(), pool.get_next()] == [2, 4, 6]
    assert not pool.has_next()
    with pytest.raises(StopIteration):
        pool.get_next()
    with pytest.raises(StopIteration):
        pool.get_next_unordered()


def test_get_next_waits_for_the_oldest_even_if_a_later_one_is_done(workers):
    gate = Gate.remote()
    pool = ActorPool(workers)
    pool.submit(lambda a, v: a.double.remote(v, gate), 10)
    pool.submit(double, 20)
    # The unordered view sees the finished second call; the ordered view must not skip ahead.
    with pytest.raises(TimeoutError):
        pool.get_next(timeout=0.2)
    assert pool.has_next()
    ray.get(gate.open.remote())
    assert pool.get_next() == 20
    assert pool.get_next() == 40


def test_get_next_unordered_returns_first_finished(workers):
    gate = Gate.remote()
    pool = ActorPool(workers)
    pool.submit(lambda a, v: a.double.remote(v, gate), 1)
    pool.submit(double, 2)
    assert pool.get_next_unordered() == 4
    with pytest.raises(TimeoutError):
        pool.get_next_unordered(timeout=0.1)
    assert pool.has_next()  # a plain timeout gives nothing up
    ray.get(gate.open.remote())
    assert pool.get_next_unordered(timeout=10) == 2
    assert not pool.has_next()


def test_get_next_after_unordered_is_refused(workers):
    # Once the newest result was taken out of order, the ordered view has nothing left to
    # return in order (the older call is still owed), so get_next refuses, as in Ray.
    gate = Gate.remote()
    pool = ActorPool(workers)
    pool.submit(lambda a, v: a.double.remote(v, gate), 1)
    pool.submit(double, 2)
    assert pool.get_next_unordered() == 4
    with pytest.raises(ValueError, match="get_next_unordered"):
        pool.get_next()
    ray.get(gate.open.remote())
    assert pool.get_next_unordered() == 2


def test_ignore_if_timedout_gives_the_task_up_and_frees_its_actor(workers):
    gate = Gate.remote()
    pool = ActorPool(workers[:1])
    pool.submit(lambda a, v: a.double.remote(v, gate), 1)
    pool.submit(double, 5)  # queued: the only actor is busy
    with pytest.raises(TimeoutError, match="ignored"):
        pool.get_next(timeout=0, ignore_if_timedout=True)
    # The ignored call freed the actor, so the queued one was submitted behind it.
    assert pool.has_next()
    ray.get(gate.open.remote())
    assert pool.get_next() == 10
    assert not pool.has_next()


def test_unordered_ignore_if_timedout_drops_the_oldest(workers):
    gate = Gate.remote()
    pool = ActorPool(workers[:1])
    pool.submit(lambda a, v: a.double.remote(v, gate), 1)
    with pytest.raises(TimeoutError, match="ignored"):
        pool.get_next_unordered(timeout=0, ignore_if_timedout=True)
    assert not pool.has_next()
    assert pool.has_free()
    ray.get(gate.open.remote())


def test_map_drops_results_nobody_collected(workers):
    pool = ActorPool(workers)
    pool.submit(double, 100)
    pool.submit(double, 200)
    pool.submit(double, 300)
    assert list(pool.map(double, [1, 2])) == [2, 4]
    assert list(pool.map_unordered(double, [3])) == [6]


def test_has_free_pop_idle_push(workers):
    pool = ActorPool(workers)
    assert pool.has_free()
    pool.submit(double, 1)
    assert pool.has_free()
    pool.submit(double, 2)
    assert not pool.has_free()
    assert pool.pop_idle() is None
    with pytest.raises(ValueError, match="already belongs"):
        pool.push(workers[0])
    pool.submit(double, 3)  # queued until an actor is free or pushed
    extra = Worker.remote("extra")
    pool.push(extra)  # takes the queued submission at once
    assert not pool.has_free()
    assert sorted(pool.get_next_unordered() for _ in range(3)) == [2, 4, 6]
    assert pool.has_free()
    popped = {pool.pop_idle(), pool.pop_idle(), pool.pop_idle()}
    assert popped == {workers[0], workers[1], extra}
    assert pool.pop_idle() is None
    assert not pool.has_free()
    pool.push(extra)
    assert list(pool.map(lambda a, v: a.tagged.remote(v), [1, 2])) == [("extra", 1), ("extra", 2)]


def test_actor_busy_until_its_result_is_collected(workers):
    # One in-flight call per actor: the queued submissions start only as results are taken.
    worker = Worker.remote()
    pool = ActorPool([worker])
    for v in range(3):
        pool.submit(double, v)
    assert ray.get(worker.num_calls.remote()) == 1
    assert pool.get_next() == 0
    assert pool.get_next() == 2
    assert ray.get(worker.num_calls.remote()) == 3
    assert pool.get_next() == 4


def test_task_error_keeps_type_and_returns_actor(workers):
    pool = ActorPool(workers[:1])
    pool.submit(lambda a, v: a.fail.remote(v), "boom")
    with pytest.raises(KeyError):
        pool.get_next()
    assert pool.has_free()
    assert list(pool.map(double, [4])) == [8]


def test_empty_pool_queues_until_push(cluster):
    pool = ActorPool([])
    assert not pool.has_free()
    pool.submit(double, 7)
    assert not pool.has_next()
    pool.push(Worker.remote())
    assert pool.get_next() == 14
