"""Generator tasks whose values go into a fixed number of returns, and errors part way through.

Ray's contract (doc "Generators"): with a static `num_returns=N`, yielded value i is return i;
an error after k values leaves the first k returns readable and puts the error in the rest;
with `num_returns="dynamic"` the error becomes the generator's final ref.
"""

from __future__ import annotations

import pytest

import raylite as ray


class Boom(Exception):
    pass


@ray.remote
def two_then_raise():
    yield "a"
    yield "b"
    raise Boom("after two")


@ray.remote
def yields(n):
    yield from range(n)


def test_static_returns_keep_values_yielded_before_the_error(cluster):
    r1, r2, r3, r4 = two_then_raise.options(num_returns=4).remote()
    assert ray.get([r1, r2], timeout=30) == ["a", "b"]
    for ref in (r3, r4):
        with pytest.raises(Boom, match="after two"):
            ray.get(ref, timeout=30)


def test_error_after_every_return_is_filled_is_only_logged(cluster):
    r1, r2 = two_then_raise.options(num_returns=2).remote()
    assert ray.get([r1, r2], timeout=30) == ["a", "b"]


def test_more_values_than_returns_keeps_the_first_ones(cluster):
    r1, r2 = yields.options(num_returns=2).remote(5)
    assert ray.get([r1, r2], timeout=30) == [0, 1]


def test_fewer_values_than_returns_fills_the_rest_with_an_error(cluster):
    r1, r2, r3 = yields.options(num_returns=3).remote(1)
    assert ray.get(r1, timeout=30) == 0
    for ref in (r2, r3):
        with pytest.raises(ValueError, match="returned 1 objects, but num_returns=3"):
            ray.get(ref, timeout=30)


def test_dynamic_generator_error_is_the_final_ref(cluster):
    dynamic_ref = two_then_raise.options(num_returns="dynamic").remote()
    refs = list(ray.get(dynamic_ref, timeout=30))
    assert len(refs) == 3
    assert ray.get(refs[:2], timeout=30) == ["a", "b"]
    with pytest.raises(Boom, match="after two"):
        ray.get(refs[2], timeout=30)


def test_actor_generator_method_with_static_returns(cluster):
    @ray.remote
    class Source:
        @ray.method(num_returns=3)
        def two_then_raise(self):
            yield 1
            yield 2
            raise Boom("actor after two")

    @ray.remote
    class AsyncSource:
        @ray.method(num_returns=3)
        async def two_then_raise(self):
            yield 1
            yield 2
            raise Boom("async actor after two")

    for cls, text in ((Source, "actor after two"), (AsyncSource, "async actor after two")):
        a, b, c = cls.remote().two_then_raise.remote()
        assert ray.get([a, b], timeout=30) == [1, 2]
        with pytest.raises(Boom, match=text):
            ray.get(c, timeout=30)


@ray.remote
def slow_yields(n, gate):
    for i in range(n):
        ray.get(gate.wait.remote(i))
        yield i


@ray.remote
class Gate:
    """Lets the generator above produce item i once open(i) was called."""

    def __init__(self):
        import asyncio

        self.events = {}
        self.asyncio = asyncio

    def _event(self, i):
        return self.events.setdefault(i, self.asyncio.Event())

    async def wait(self, i):
        await self._event(i).wait()

    async def open(self, i):
        self._event(i).set()


def test_wait_on_a_streaming_generator_tracks_its_next_item(cluster):
    gate = Gate.remote()
    gen = slow_yields.remote(2, gate)
    ready, unready = ray.wait([gen], timeout=0)
    assert (ready, unready) == ([], [gen])
    ray.get(gate.open.remote(0))
    ready, unready = ray.wait([gen], timeout=30)
    assert ready == [gen] and unready == []
    assert ray.get(next(gen)) == 0
    assert ray.wait([gen], timeout=0) == ([], [gen])  # item 1 not produced yet
    ray.get(gate.open.remote(1))
    assert ray.get(next(gen)) == 1
    ready, _ = ray.wait([gen], timeout=30)  # ended: ready, and next() stops at once
    assert ready == [gen]
    with pytest.raises(StopIteration):
        next(gen)


def test_wait_mixes_generators_and_refs(cluster):
    gate = Gate.remote()
    gen = slow_yields.remote(1, gate)
    plain = ray.put("ready now")
    ready, unready = ray.wait([gen, plain], num_returns=1, timeout=30)
    assert ready == [plain] and unready == [gen]
    ray.get(gate.open.remote(0))
    ready, unready = ray.wait([gen, plain], num_returns=2, timeout=30)
    assert ready == [gen, plain] and unready == []



def test_wait_blocks_on_a_generator_and_a_pending_ref_together(cluster):
    # Neither is ready at first, so wait() has to block on both: the plain ref's entry and the
    # generator's next item (Ray's docs loop like this over a mix of generators and task refs).
    gate = Gate.remote()
    gen = slow_yields.remote(1, gate)
    pending = gate.wait.remote(1)
    ready, unready = ray.wait([gen, pending], num_returns=1, timeout=0.5)
    assert ready == [] and unready == [gen, pending]
    ray.get(gate.open.remote(1))
    ready, unready = ray.wait([gen, pending], num_returns=1, timeout=30)
    assert ready == [pending] and unready == [gen]
    ray.get(gate.open.remote(0))
    ready, unready = ray.wait([gen, pending], num_returns=2, timeout=30)
    assert ready == [gen, pending]

def test_ray_raylet_names_from_the_docs():
    from raylite import _raylet

    assert _raylet.ObjectRefGenerator is ray.ObjectRefGenerator
    assert _raylet.ObjectRef is ray.ObjectRef


def test_dynamic_or_streaming_on_a_plain_function_is_refused_at_decoration():
    def plain():
        return 1

    for mode in ("dynamic", "streaming"):
        with pytest.raises(ValueError, match="can only be used with generator functions"):
            ray.remote(num_returns=mode)(plain)
        with pytest.raises(ValueError, match="can only be used with generator functions"):
            ray.remote(plain).options(num_returns=mode)
        with pytest.raises(ValueError, match="can only be used with generator functions"):
            ray.method(num_returns=mode)(plain)


@ray.remote
class GenActor:
    def count(self, n):
        yield from range(n)

    @ray.method(num_returns=None)
    def count_default(self, n):
        yield from range(n)


def test_num_returns_none_means_the_default_streaming_for_generators(cluster):
    gen = yields.options(num_returns=None).remote(3)
    assert [ray.get(r, timeout=30) for r in gen] == [0, 1, 2]

    @ray.remote(num_returns=None)
    def plain():
        return "one"

    assert ray.get(plain.remote(), timeout=30) == "one"
    actor = GenActor.remote()
    assert [ray.get(r, timeout=30) for r in actor.count.options(num_returns=None).remote(2)] == [0, 1]
    assert [ray.get(r, timeout=30) for r in actor.count_default.remote(2)] == [0, 1]


def test_dynamic_generator_raising_after_one_value_gives_two_refs(cluster):
    @ray.remote(num_returns="dynamic")
    def one_then_raise():
        yield 1
        raise Boom("after one")

    refs = list(ray.get(one_then_raise.remote(), timeout=30))
    assert len(refs) == 2 and ray.get(refs[0], timeout=30) == 1
    with pytest.raises(Boom, match="after one"):
        ray.get(refs[1], timeout=30)


def test_retried_dynamic_generator_holds_the_retrys_values(cluster, tmp_path):
    marker = str(tmp_path / "first-attempt")

    @ray.remote(num_returns="dynamic", retry_exceptions=True, max_retries=2)
    def flaky(path):
        import os

        first = not os.path.exists(path)
        if first:
            open(path, "w").close()
            yield "first-0"
            yield "first-1"
            raise Boom("try again")
        yield "retry"

    assert [ray.get(r, timeout=30) for r in ray.get(flaky.remote(marker), timeout=30)] == ["retry"]


def test_retried_streaming_generator_has_no_duplicate_refs(cluster, tmp_path):
    marker = str(tmp_path / "first-attempt")

    @ray.remote(retry_exceptions=True, max_retries=2)
    def flaky(path):
        import os

        first = not os.path.exists(path)
        if first:
            open(path, "w").close()
        yield "a"
        if first:
            raise Boom("try again")
        yield "b"

    assert [ray.get(r, timeout=30) for r in flaky.remote(marker)] == ["a", "b"]


def test_get_of_a_generator_returns_the_generator_itself(cluster):
    """Ray's get() hands an ObjectRefGenerator (streaming or dynamic) back unchanged; an error
    raised by the generator then surfaces at the get() of the item that carries it, not at the
    get() of the generator."""

    @ray.remote(num_returns="streaming")
    def stream():
        yield 1
        raise ValueError("second item failed")

    gen = stream.remote()
    assert ray.get(gen) is gen
    first = next(gen)
    assert ray.get(first) == 1
    failed = next(gen)  # the error is an item: next() hands its ref, get() raises
    with pytest.raises(ValueError, match="second item failed"):
        ray.get(failed)
    with pytest.raises(StopIteration):
        next(gen)

    @ray.remote(num_returns="dynamic")
    def dynamic():
        yield "a"
        yield "b"

    dyn = ray.get(dynamic.remote())
    assert ray.get(dyn) is dyn
    assert [ray.get(ref) for ref in dyn] == ["a", "b"]


def test_a_dynamic_generators_refs_are_handed_out_once_and_freed_as_the_consumer_drops_them(cluster):
    """As in Ray: iterating a dynamic generator takes each ref out of it, so the reference
    counts fall as the consumer goes; a new get() of the task's ref gives every ref again."""
    import gc

    from raylite._private.worker import global_worker
    from tests.conftest import wait_for

    @ray.remote(num_returns="dynamic")
    def five():
        yield from range(5)

    outer = five.remote()
    items = ray.get(outer)
    assert len(items) == 5
    counts = global_worker.core_worker.get_all_reference_counts
    item_ids = set()
    expected = 0
    for ref in items:
        item_ids.add(ref.hex())
        assert ray.get(ref) == expected
        expected += 1
        del ref
        gc.collect()
        # (the outer ref, still held, contains them: they may stay listed, with no local ref)
        wait_for(lambda: all(counts().get(k, {"local": 0})["local"] == 0 for k in item_ids),
                 what="no local ref left to the items dropped")
    assert len(items) == 0 and list(items) == []  # handed out once
    assert [ray.get(r) for r in ray.get(outer)] == [0, 1, 2, 3, 4]
