"""Refs nested inside objects stay valid and counted across processes.

A ref inside a task's or actor method's return value is kept alive by the
returned object: dropping the deserialized copy must not free it, and dropping
the returned object must.
"""

from __future__ import annotations

import gc
import os

import numpy as np

import raylite as ray
from raylite._core import runtime
from tests.conftest import wait_for


def _store_files() -> set[str]:
    return set(os.listdir(runtime.client().store_dir))


@ray.remote
class Maker:
    def make(self, n: int):
        return [ray.put(np.full(n, 5, dtype=np.int64))]

    def wrap(self, refs):
        return {"inner": refs[0]}

    def gen(self, k: int):
        for i in range(k):
            yield [ray.put(np.full(50_000, i, dtype=np.int64))]


def test_actor_return_keeps_nested_ref_alive_after_the_copy_is_dropped(cluster):
    maker = Maker.remote()
    outer = maker.make.remote(200_000)
    value = ray.get(outer)
    name = value[0].hex()
    del value
    gc.collect()
    # the returned object still holds the inner ref: it must stay readable
    for _ in range(3):
        inner = ray.get(outer)[0]
        assert int(ray.get(inner).sum()) == 1_000_000
        del inner
        gc.collect()
    assert name in _store_files()
    del outer
    gc.collect()
    wait_for(lambda: name not in _store_files(), what="the nested object to be freed with its container")


def test_actor_return_passed_on_without_being_read(cluster):
    maker = Maker.remote()
    outer = maker.make.remote(100_000)

    @ray.remote
    def total(wrapped_ref_list):
        return int(ray.get(ray.get(wrapped_ref_list[0])[0]).sum())

    # the driver never deserializes `outer`; a task reads the ref inside it
    assert ray.get(total.remote([outer])) == 500_000
    assert ray.get(total.remote([outer])) == 500_000


def test_actor_returns_a_ref_the_caller_owns(cluster):
    maker = Maker.remote()
    mine = ray.put(np.arange(300_000))
    name = mine.hex()
    outer = maker.wrap.remote([mine])
    ray.wait([outer])
    del mine
    gc.collect()
    assert int(ray.get(ray.get(outer)["inner"]).sum()) == sum(range(300_000))
    del outer
    gc.collect()
    wait_for(lambda: name not in _store_files(), what="the caller-owned object to be freed")


def test_task_return_nested_ref_freed_with_container(cluster):
    @ray.remote
    def make():
        return [ray.put(np.full(200_000, 2, dtype=np.int64))]

    outer = make.remote()
    first = ray.get(outer)[0]
    name = first.hex()
    del first
    gc.collect()
    assert int(ray.get(ray.get(outer)[0]).sum()) == 400_000
    del outer
    gc.collect()
    wait_for(lambda: name not in _store_files(), what="the nested object to be freed with its container")


def test_streamed_items_keep_their_nested_refs(cluster):
    maker = Maker.remote()
    items = list(maker.gen.options(num_returns="streaming").remote(3))
    gc.collect()
    sums = [int(ray.get(ray.get(r)[0]).sum()) for r in items]
    assert sums == [0, 50_000, 100_000]


def test_list_of_refs_in_store_read_by_actor(cluster):
    refs = [ray.put(np.full(100_000, i)) for i in range(3)]
    outer = ray.put(refs)
    del refs
    gc.collect()

    @ray.remote
    class Reader:
        def read(self, wrapped):
            return [int(ray.get(r).sum()) for r in ray.get(wrapped[0])]

    reader = Reader.remote()
    assert ray.get(reader.read.remote([outer])) == [0, 100_000, 200_000]
