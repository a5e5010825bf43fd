"""@serve.batch with plain asyncio: no cluster."""

from __future__ import annotations

import asyncio

import pytest

from raylite.serve.batching import batch


def run(coro):
    return asyncio.run(asyncio.wait_for(coro, 30))


class Doubler:
    def __init__(self) -> None:
        self.batches: list[list[int]] = []

    @batch(max_batch_size=4, batch_wait_timeout_s=10)
    async def double(self, items: list[int]) -> list[int]:
        self.batches.append(list(items))
        return [2 * x for x in items]


@pytest.fixture(autouse=True)
def _doubler_settings_as_decorated():
    """Several tests change Doubler's batch settings, which its instances share (one set per
    decorated function, as in Ray): each test starts from the decorator's, in any order."""
    Doubler.double.set_max_batch_size(4)
    Doubler.double.set_batch_wait_timeout_s(10)
    Doubler.double.set_max_concurrent_batches(1)


def test_concurrent_calls_share_one_batch_and_get_their_own_result():
    d = Doubler()

    async def main():
        return await asyncio.gather(*(d.double(i) for i in range(4)))

    assert run(main()) == [0, 2, 4, 6]
    assert d.batches == [[0, 1, 2, 3]]


def test_full_batch_flushes_at_max_batch_size_and_rest_waits_for_timeout():
    d = Doubler()
    d.double.set_batch_wait_timeout_s(0.05)

    async def main():
        return await asyncio.gather(*(d.double(i) for i in range(6)))

    assert run(main()) == [0, 2, 4, 6, 8, 10]
    assert d.batches == [[0, 1, 2, 3], [4, 5]]


def test_bare_decorator_on_function_uses_ray_defaults():
    seen: list[list[str]] = []

    @batch
    async def upper(items: list[str]) -> list[str]:
        seen.append(items)
        return [s.upper() for s in items]

    assert upper._get_max_batch_size() == 10
    assert upper._get_batch_wait_timeout_s() == 0.01

    async def main():
        return await asyncio.gather(*(upper(c) for c in "abc"))

    assert run(main()) == ["A", "B", "C"]
    assert sum(len(b) for b in seen) == 3


def test_lone_call_flushes_after_timeout():
    @batch(max_batch_size=100, batch_wait_timeout_s=0.01)
    async def ident(items):
        return items

    assert run(ident(7)) == 7


def test_wrong_length_result_is_a_clear_error_for_every_caller():
    @batch(max_batch_size=2, batch_wait_timeout_s=5)
    async def broken(items):
        return items[:1]

    async def main():
        return await asyncio.gather(broken(1), broken(2), return_exceptions=True)

    errors = run(main())
    assert all(isinstance(e, ValueError) for e in errors)
    assert "returned 1 items for a batch of 2" in str(errors[0])


def test_exception_reaches_every_caller_and_queue_keeps_working():
    calls = []

    @batch(max_batch_size=2, batch_wait_timeout_s=5)
    async def flaky(items):
        calls.append(items)
        if len(calls) == 1:
            raise KeyError("boom")
        return items

    async def main():
        first = await asyncio.gather(flaky(1), flaky(2), return_exceptions=True)
        second = await asyncio.gather(flaky(3), flaky(4))
        return first, second

    first, second = run(main())
    assert [type(e) for e in first] == [KeyError, KeyError]
    assert second == [3, 4]


def test_cancelled_caller_is_dropped_from_the_batch():
    seen = []

    @batch(max_batch_size=3, batch_wait_timeout_s=0.2)
    async def ident(items):
        seen.append(items)
        return items

    async def main():
        doomed = asyncio.ensure_future(ident("gone"))
        kept = asyncio.ensure_future(ident("kept"))
        await asyncio.sleep(0)  # both queued
        doomed.cancel()
        return await kept

    assert run(main()) == "kept"
    assert seen == [["kept"]]


def test_all_callers_cancelled_cancels_the_running_batch():
    state = {"started": asyncio.Event, "cancelled": False}

    @batch(max_batch_size=1, batch_wait_timeout_s=0)
    async def slow(items):
        state["started"].set()
        try:
            await asyncio.sleep(60)
        except asyncio.CancelledError:
            state["cancelled"] = True
            raise
        return items

    async def main():
        state["started"] = asyncio.Event()
        caller = asyncio.ensure_future(slow(1))
        await state["started"].wait()
        caller.cancel()
        for _ in range(100):
            if state["cancelled"]:
                return True
            await asyncio.sleep(0.01)
        return False

    assert run(main()) is True


def test_multiple_arguments_are_batched_per_argument():
    @batch(max_batch_size=2, batch_wait_timeout_s=5)
    async def add(xs, ys, *, scale):
        return [(x + y) * s for x, y, s in zip(xs, ys, scale)]

    async def main():
        return await asyncio.gather(add(1, 2, scale=1), add(3, 4, scale=10))

    assert run(main()) == [3, 70]


def test_streaming_batch_gives_each_caller_its_own_stream():
    class Streamer:
        @batch(max_batch_size=2, batch_wait_timeout_s=5)
        async def count(self, limits: list[int]):
            for step in range(max(limits)):
                yield [step if step < n else StopIteration for n in limits]

    s = Streamer()

    async def collect(n):
        return [x async for x in s.count(n)]

    async def main():
        return await asyncio.gather(collect(2), collect(4))

    assert run(main()) == [[0, 1], [0, 1, 2, 3]]


def test_streaming_error_reaches_every_stream():
    @batch(max_batch_size=2, batch_wait_timeout_s=5)
    async def gen(items):
        yield items
        raise RuntimeError("mid-stream")

    async def collect(i):
        out = []
        try:
            async for x in gen(i):
                out.append(x)
        except RuntimeError as e:
            out.append(str(e))
        return out

    async def main():
        return await asyncio.gather(collect(1), collect(2))

    assert run(main()) == [[1, "mid-stream"], [2, "mid-stream"]]


def test_setters_validate_and_take_effect():
    d = Doubler()
    d.double.set_max_batch_size(2)
    d.double.set_batch_wait_timeout_s(0.01)
    with pytest.raises(ValueError, match="max_batch_size"):
        d.double.set_max_batch_size(0)
    with pytest.raises(ValueError, match="batch_wait_timeout_s"):
        d.double.set_batch_wait_timeout_s(-1)

    async def main():
        return await asyncio.gather(*(d.double(i) for i in range(4)))

    assert run(main()) == [0, 2, 4, 6]
    assert all(len(b) <= 2 for b in d.batches)


def test_queues_are_per_instance():
    a, b = Doubler(), Doubler()
    a.double.set_batch_wait_timeout_s(0.01)

    async def main():
        return await asyncio.gather(a.double(1), b.double(2))

    assert run(main()) == [2, 4]
    assert a.batches == [[1]] and b.batches == [[2]]


def test_works_across_event_loops():
    d = Doubler()
    d.double.set_batch_wait_timeout_s(0.01)
    assert run(d.double(1)) == 2
    assert run(d.double(2)) == 4  # a second asyncio.run: a fresh queue in the new loop


def test_bad_decorations_are_clear_errors():
    with pytest.raises(TypeError, match="async def"):
        @batch
        def sync(items):
            return items
    with pytest.raises(ValueError, match="max_batch_size"):
        batch(max_batch_size=0)
    with pytest.raises(ValueError, match="batch_wait_timeout_s"):
        batch(batch_wait_timeout_s="soon")
    with pytest.raises(TypeError, match="by keyword"):
        batch(4)


def test_decorated_class_pickles_by_value_and_works_after_loading():
    import cloudpickle

    class Local:  # defined in a function: cloudpickle sends it by value, as to a replica
        @batch(max_batch_size=2, batch_wait_timeout_s=5)
        async def add_one(self, xs):
            return [x + 1 for x in xs]

    Local.add_one.set_batch_wait_timeout_s(0.01)
    assert run(Local().add_one(1)) == 2  # queues exist before pickling the class
    copy_cls = cloudpickle.loads(cloudpickle.dumps(Local))  # (same process: cloudpickle may reuse Local)
    assert run(copy_cls().add_one(41)) == 42


def test_subclass_calling_the_batched_method_through_super():
    class Base:
        @batch(max_batch_size=2, batch_wait_timeout_s=0.01)
        async def score(self, xs):
            return [x * 10 for x in xs]

    class Child(Base):
        async def score(self, x):
            return await super().score(x) + 1

    assert run(Child().score(4)) == 41


def test_warns_when_max_ongoing_requests_caps_the_batch(monkeypatch, caplog):
    import types

    import raylite.serve.context as context

    ctx = types.SimpleNamespace(_deployment_config={"max_ongoing_requests": 5})
    monkeypatch.setattr(context, "_get_internal_replica_context", lambda: ctx)

    @batch(max_batch_size=16, batch_wait_timeout_s=0)
    async def ident(items):
        return items

    with caplog.at_level("WARNING", logger="raylite.serve"):
        assert run(ident(1)) == 1
    assert "exceeds the deployment's max_ongoing_requests (5)" in caplog.text
    assert "max_ongoing_requests=16" in caplog.text
