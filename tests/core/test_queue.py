"""raylite.util.queue: a FIFO queue in an actor, shared by the driver, tasks and actors.

Blocking is checked by events, not by sleeping: a consumer task blocked in `get` is shown
to be blocked with `wait(timeout=...)` and is released by a `put` from the driver.
"""

from __future__ import annotations

import asyncio
import queue as stdlib_queue

import pytest

import raylite as ray
from raylite.util.queue import Empty, Full, Queue


@ray.remote
def consume(q, n, timeout=None):
    return [q.get(timeout=timeout) for _ in range(n)]


@ray.remote
def produce(q, items):
    for item in items:
        q.put(item)
    return len(items)


def test_fifo_and_sizes(cluster):
    q = Queue()
    assert q.empty() and not q.full()
    assert q.size() == q.qsize() == len(q) == 0
    for item in ("a", {"b": 1}, [3]):
        q.put(item)
    assert q.qsize() == 3 and not q.empty() and not q.full()  # maxsize 0 is unbounded
    assert [q.get(), q.get(), q.get()] == ["a", {"b": 1}, [3]]
    q.shutdown()


def test_bounded_queue_raises_full_and_empty(cluster):
    q = Queue(maxsize=2)
    q.put(1)
    q.put_nowait(2)
    assert q.full()
    with pytest.raises(Full):
        q.put_nowait(3)
    with pytest.raises(Full):
        q.put(3, block=False)
    with pytest.raises(Full):
        q.put(3, timeout=0.05)
    assert q.get_nowait() == 1
    assert q.get(block=False) == 2
    with pytest.raises(Empty):
        q.get_nowait()
    with pytest.raises(Empty):
        q.get(timeout=0.05)
    # Both are the standard library's exceptions too, as raised here and not wrapped.
    with pytest.raises(stdlib_queue.Empty) as info:
        q.get(block=False)
    assert type(info.value) is Empty
    q.put(1)
    q.put(2)
    with pytest.raises(stdlib_queue.Full):
        q.put(9, block=False)
    q.shutdown()


def test_negative_timeout_is_refused(cluster):
    q = Queue()
    with pytest.raises(ValueError, match="non-negative"):
        q.put(1, timeout=-1)
    with pytest.raises(ValueError, match="non-negative"):
        q.get(timeout=-1)
    q.shutdown()


def test_batches_are_all_or_nothing(cluster):
    q = Queue(maxsize=3)
    q.put_nowait_batch([1, 2])
    with pytest.raises(Full):
        q.put_nowait_batch([3, 4])
    assert q.qsize() == 2
    q.put_nowait_batch(iter([3]))
    with pytest.raises(Empty):
        q.get_nowait_batch(4)
    assert q.qsize() == 3
    assert q.get_nowait_batch(2) == [1, 2]
    assert q.get_nowait_batch(0) == []
    assert q.get_nowait_batch(1) == [3]
    with pytest.raises(TypeError):
        q.put_nowait_batch(5)
    with pytest.raises(TypeError):
        q.get_nowait_batch("2")
    with pytest.raises(ValueError):
        q.get_nowait_batch(-1)
    q.shutdown()


def test_blocked_get_is_released_by_put(cluster):
    q = Queue()
    ref = consume.remote(q, 2)
    ready, _ = ray.wait([ref], timeout=0.3)
    assert not ready  # the consumer is parked in get()
    q.put("x")
    q.put("y")
    assert ray.get(ref, timeout=10) == ["x", "y"]
    q.shutdown()


def test_blocked_put_is_released_by_get(cluster):
    q = Queue(maxsize=1)
    q.put(0)
    ref = produce.remote(q, [1, 2])
    ready, _ = ray.wait([ref], timeout=0.3)
    assert not ready  # the producer is parked in put()
    assert [q.get(timeout=10) for _ in range(3)] == [0, 1, 2]
    assert ray.get(ref, timeout=10) == 2
    q.shutdown()


def test_queue_shared_by_tasks(cluster):
    q = Queue()
    producers = [produce.remote(q, [(p, i) for i in range(5)]) for p in range(2)]
    assert ray.get(producers) == [5, 5]
    items = [q.get(timeout=10) for _ in range(10)]
    # FIFO per producer: each producer's items arrive in the order it put them.
    for p in range(2):
        assert [i for (who, i) in items if who == p] == list(range(5))
    q.shutdown()


def test_async_put_and_get(cluster):
    q = Queue(maxsize=1)

    async def main():
        await q.put_async("a")
        with pytest.raises(Full):
            await q.put_async("b", block=False)
        with pytest.raises(Full):
            await q.put_async("b", timeout=0.05)
        first = await q.get_async()
        with pytest.raises(Empty):
            await q.get_async(block=False)
        with pytest.raises(Empty):
            await q.get_async(timeout=0.05)
        waiter = asyncio.ensure_future(q.get_async(timeout=10))
        await q.put_async("c")
        return first, await waiter

    assert asyncio.run(main()) == ("a", "c")
    q.shutdown()


def test_actor_options_and_shutdown(cluster):
    q = Queue(actor_options={"name": "test-queue-actor", "num_cpus": 0})
    q.put(1)
    named = ray.get_actor("test-queue-actor")
    assert ray.get(named.qsize.remote()) == 1
    q.shutdown()
    with pytest.raises(RuntimeError, match="shut down"):
        q.put(2)
    q.shutdown()  # a second shutdown is a no-op


def test_forced_shutdown_fails_blocked_consumers(cluster):
    q = Queue()
    ref = consume.remote(q, 1)
    ready, _ = ray.wait([ref], timeout=0.3)
    assert not ready
    q.shutdown(force=True)
    with pytest.raises(ray.exceptions.RayError):
        ray.get(ref, timeout=10)
