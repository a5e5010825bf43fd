"""`ObjectRefGenerator.completed()`: a ref that resolves when the streaming task has returned.

Ray's contract: `completed()` may be asked at any time, before or after the stream is consumed;
`get()` on it gives None once the task returned, also when the user's generator raised (that
error is the stream's to report), and raises when the task itself failed (its worker died).
"""

from __future__ import annotations

import os

import pytest

import raylite as ray


@ray.remote(num_returns="streaming")
def count(n):
    yield from range(n)


@ray.remote(num_returns="streaming")
def one_then_raise():
    yield 1
    raise KeyError("stream broke")


@ray.remote(num_returns="streaming", max_retries=0)
def dies_midway():
    yield 1
    os._exit(3)


@ray.remote
class Streamer:
    def items(self, n):
        yield from range(n)


def test_completed_after_the_stream_is_consumed(cluster):
    gen = count.remote(3)
    assert [ray.get(r) for r in gen] == [0, 1, 2]
    assert ray.get(gen.completed(), timeout=30) is None


def test_completed_asked_before_the_task_ends(cluster):
    gen = count.remote(4)
    done = gen.completed()
    assert ray.get(done, timeout=30) is None
    assert [ray.get(r) for r in gen] == [0, 1, 2, 3]
    assert gen.completed() == done  # the same ref, however often it is asked


def test_completed_of_an_actor_stream(cluster):
    gen = Streamer.remote().items.options(num_returns="streaming").remote(2)
    assert ray.get(gen.completed(), timeout=30) is None
    assert [ray.get(r) for r in gen] == [0, 1]


def test_completed_is_none_when_the_generator_raised(cluster):
    gen = one_then_raise.remote()
    assert ray.get(gen.completed(), timeout=30) is None
    with pytest.raises(KeyError, match="stream broke"):
        for ref in gen:
            ray.get(ref)


def test_completed_raises_when_the_worker_died(cluster):
    gen = dies_midway.remote()
    with pytest.raises(ray.exceptions.WorkerCrashedError):
        ray.get(gen.completed(), timeout=60)


def test_lost_object_message_names_the_object_once(cluster):
    ref = ray.put("gone soon")
    hexid = ref.hex()
    del ref
    with pytest.raises(ray.exceptions.ObjectLostError) as info:
        ray.get(ray.ObjectRef(bytes.fromhex(hexid)), timeout=30)
    msg = str(info.value)
    assert msg.startswith(f"Object {hexid} was lost: ")
    assert msg.count(hexid) == 1 and msg.count("was lost") == 1 and "Object Object" not in msg
    assert "Keep the ObjectRef" in msg  # what to do about it
