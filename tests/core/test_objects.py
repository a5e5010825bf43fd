"""Objects: inline and shared-memory values, zero-copy reads, freeing, borrowed refs."""

from __future__ import annotations

import os

import numpy as np
import pytest

import raylite as ray
from raylite._core import runtime
from tests.conftest import wait_for


def _store_files():
    client = runtime.client()
    return set(os.listdir(client.store_dir))


def test_small_and_large_values_roundtrip(cluster):
    assert ray.get(ray.put({"a": [1, 2, 3]})) == {"a": [1, 2, 3]}
    big = np.arange(5_000_000, dtype=np.int64)
    out = ray.get(ray.put(big))
    assert np.array_equal(out, big)


def test_large_array_is_zero_copy_and_read_only(cluster):
    arr = np.random.default_rng(0).random(2_000_000)
    ref = ray.put(arr)
    a = ray.get(ref)
    b = ray.get(ref)
    assert not a.flags.writeable
    with pytest.raises(ValueError):
        a[0] = 1.0
    # both reads map the same shared-memory file: their data lives in a mapping, not the heap
    assert a.base is not None and b.base is not None
    assert np.array_equal(a, arr)
    path = os.path.join(runtime.client().store_dir, ref.hex())
    assert os.path.exists(path) and os.path.getsize(path) >= arr.nbytes


def test_view_outlives_its_ref(cluster):
    ref = ray.put(np.full(1_000_000, 7.0))
    view = ray.get(ref)
    name = ref.hex()
    del ref
    wait_for(lambda: name not in _store_files(), what="the object file to be freed")
    assert float(view.sum()) == 7_000_000.0  # the mapping stays valid


def test_put_drop_loop_frees_memory(cluster):
    before = _store_files()
    for _ in range(30):
        ref = ray.put(np.ones(2_000_000))
        del ref
    wait_for(lambda: _store_files() <= before, what="all dropped objects to be freed")


def test_task_returns_large_value_and_passes_refs(cluster):
    @ray.remote
    def make(n):
        return np.arange(n)

    @ray.remote
    def total(a):
        return int(a.sum())

    ref = make.remote(1_000_000)
    assert ray.get(total.remote(ref)) == sum(range(1_000_000))
    shared = ray.put(np.ones(1_000_000))
    assert ray.get([total.remote(shared) for _ in range(4)]) == [1_000_000] * 4


def test_large_direct_argument_goes_through_store(cluster):
    @ray.remote
    def length(a):
        return len(a)

    assert ray.get(length.remote(np.zeros(3_000_000))) == 3_000_000


def test_borrowed_ref_stays_valid_in_actor(cluster):
    @ray.remote
    class Keeper:
        def keep(self, refs):
            self.refs = refs
            return True

        def read(self):
            return float(ray.get(self.refs[0]).sum())

    k = Keeper.remote()
    ref = ray.put(np.ones(500_000))
    ray.get(k.keep.remote([ref]))
    del ref
    import gc

    gc.collect()
    assert ray.get(k.read.remote()) == 500_000.0


def test_refs_inside_put_objects_stay_valid(cluster):
    inner = ray.put(np.arange(300_000))
    outer = ray.put([inner])
    name = inner.hex()
    del inner

    @ray.remote
    def read(wrapped):
        return int(ray.get(wrapped[0]).sum())

    assert ray.get(read.remote(outer)) == sum(range(300_000))
    assert name in _store_files()
    del outer
    wait_for(lambda: name not in _store_files(), what="the inner object to be freed with its container")


def test_refs_returned_from_tasks(cluster):
    @ray.remote
    def make_inner():
        return [ray.put(np.full(200_000, 3))]

    wrapped = ray.get(make_inner.remote())
    assert int(ray.get(wrapped[0]).sum()) == 600_000


def test_put_of_ref_is_rejected(cluster):
    with pytest.raises(TypeError, match="already in the object store"):
        ray.put(ray.put(1))
