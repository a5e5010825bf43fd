"""Spilling under a small object_store_memory: LRU objects go to disk and come back byte-exact;
only when the spill space is exhausted too does put() raise ObjectStoreFullError."""

from __future__ import annotations

import gc
import os

import numpy as np
import pytest

import raylite as ray
from raylite._core import protocol as P
from raylite._core import runtime
from tests.conftest import wait_for

MIB = 1 << 20
STORE = 64 * MIB
SPILL = 96 * MIB


@pytest.fixture(scope="module")
def small_store():
    if ray.is_initialized():
        ray.shutdown()
    env = {"RAYLITE_OBJECT_SPILL_BYTES": str(SPILL), "RAYLITE_RECYCLED_SEGMENT_IDLE_S": "1"}
    with pytest.MonkeyPatch.context() as mp:  # set for the cluster's start only
        for k, v in env.items():
            mp.setenv(k, v)
        ray.init(num_cpus=2, object_store_memory=STORE)
    yield ray
    ray.shutdown()


def _info() -> P.GetNodeInfoReply:
    return runtime.client().node_request(P.GetNodeInfo(), timeout=10)


def _spill_files() -> list[str]:
    client = runtime.client()
    out = []
    for name in os.listdir(client.session_dir):
        if name.startswith("spill_"):
            out += os.listdir(os.path.join(client.session_dir, name))
    return out


def _block(i: int) -> np.ndarray:
    """A little under 16 MiB, so four fit in the 64 MiB store with their headers."""
    return np.random.default_rng(i).integers(0, 2**63, (16 * MIB - 4096) // 8, dtype=np.int64)


def test_puts_beyond_capacity_spill_and_restore_byte_exact(small_store):
    refs = [ray.put(_block(i)) for i in range(8)]  # 128 MiB into a 64 MiB store
    info = _info()
    assert info.store_used_bytes <= STORE
    assert info.store_stats["num_spilled"] >= 4 and _spill_files()
    for i, ref in enumerate(refs):  # every one reads back exactly, restoring as it goes
        assert np.array_equal(ray.get(ref), _block(i))
    assert _info().store_stats["num_restored"] >= 4
    assert _info().store_used_bytes <= STORE + 16 * MIB
    del refs, ref
    gc.collect()
    wait_for(lambda: not _spill_files() and _info().store_used_bytes == 0,
             what="spilled and in-memory copies to be freed")


def test_spilled_object_passed_to_a_task(small_store):
    refs = [ray.put(_block(i)) for i in range(6)]

    @ray.remote
    def checksum(a):
        return int(a[::4096].sum())

    # the first ones were spilled by the later ones; tasks restore them on access
    assert ray.get([checksum.remote(r) for r in refs]) == [int(_block(i)[::4096].sum()) for i in range(6)]
    del refs


def test_a_mapped_object_survives_being_spilled(small_store):
    first = ray.put(_block(100))
    view = ray.get(first)
    later = [ray.put(_block(200 + i)) for i in range(6)]  # forces spilling, `first` last of all
    assert np.array_equal(view, _block(100))  # the reader's mapping is intact
    assert np.array_equal(ray.get(first), _block(100))
    del later, view, first


def test_an_object_a_reader_maps_is_not_spilled_nor_counted(small_store):
    """Spilling a mapped object frees nothing (the reader keeps its pages): readers report
    what they map, and the node spills the others and counts mapped bytes apart."""
    from raylite.util.state import list_objects

    gc.collect()
    wait_for(lambda: _info().store_used_bytes == 0, what="earlier tests' objects to be freed")
    held = ray.put(_block(300))
    view = ray.get(held)
    wait_for(lambda: _info().store_stats["mapped_bytes"] >= 16 * MIB - 4096, what="the node to hear of the mapping")
    later = [ray.put(_block(400 + i)) for i in range(5)]  # 80 MiB more into 64 MiB
    where = {r.object_id: r.location for r in list_objects()}
    assert where[held.hex()] == "SHARED_MEMORY"
    assert where[later[0].hex()] == "SPILLED" and where[later[-1].hex()] == "SHARED_MEMORY"
    assert np.array_equal(view, _block(300))
    del view
    gc.collect()
    wait_for(lambda: _info().store_stats["mapped_bytes"] == 0, what="the unmapping to be reported")
    assert np.array_equal(ray.get(later[0]), _block(400))  # restored: the oldest unmapped one makes room
    assert {r.object_id: r.location for r in list_objects()}[later[1].hex()] == "SPILLED"
    assert np.array_equal(ray.get(held), _block(300))
    del held, later


def test_store_full_error_only_when_spill_space_is_exhausted_too(small_store):
    gc.collect()
    wait_for(lambda: _info().store_used_bytes == 0, what="earlier tests' objects to be freed")
    held = []
    with pytest.raises(ray.exceptions.ObjectStoreFullError) as err:
        for i in range(20):  # 64 MiB memory + 96 MiB spill = 10 blocks
            held.append(ray.put(_block(i)))
    assert len(held) >= 9
    text = str(err.value)
    assert "MiB used of 64.0 MiB" in text and "spill" in text and "object_store_memory" in text
    # every object that did fit is still intact
    assert np.array_equal(ray.get(held[0]), _block(0))
    del held
    gc.collect()
    wait_for(lambda: _info().store_used_bytes == 0 and not _spill_files(), what="space to come back")
    ref = ray.put(_block(1))  # the store works again
    assert np.array_equal(ray.get(ref), _block(1))


def test_list_objects_reports_spilled_objects(small_store):
    from raylite.util.state import list_objects

    refs = [ray.put(_block(i)) for i in range(6)]
    where = {r.object_id: r.location for r in list_objects()}
    assert where[refs[0].hex()] == "SPILLED" and where[refs[-1].hex()] == "SHARED_MEMORY"
    del refs


def test_idle_recycled_segments_give_their_memory_back(small_store):
    ref = ray.put(_block(7))
    del ref
    gc.collect()
    wait_for(lambda: _info().store_stats["pool_bytes"] > 0 or _info().store_used_bytes == 0,
             what="the freed segment to be recycled")
    pool_dir = os.path.join(runtime.client().store_dir, "pool")
    wait_for(lambda: _info().store_stats["pool_bytes"] == 0 and not os.listdir(pool_dir), timeout_s=15,
             what="idle recycled segments to be deleted")


@ray.remote
def _big_values(n, mib):
    for i in range(n):
        yield np.full(mib * MIB, i, dtype=np.uint8)


def test_generator_values_larger_than_the_store_together_spill(small_store):
    """Three yields of 40 MiB into a 64 MiB store: the earlier sealed values spill while the
    task still runs (Ray's generator docs), for static, streaming and dynamic returns."""
    static = ray.get(_big_values.options(num_returns=3).remote(3, 40))
    assert [int(v[0]) for v in static] == [0, 1, 2]
    del static
    streamed = [ray.get(r) for r in _big_values.remote(3, 40)]
    assert [int(v[-1]) for v in streamed] == [0, 1, 2]
    del streamed
    refs = list(ray.get(_big_values.options(num_returns="dynamic").remote(3, 40)))
    assert [int(ray.get(r)[0]) for r in refs] == [0, 1, 2]
    del refs
    gc.collect()


def test_an_object_larger_than_the_store_lives_on_disk_as_in_ray(small_store):
    # Ray's fallback allocation: an object bigger than the whole store is made on disk instead
    # of refused; it takes no room from the objects in memory, and its file goes with it
    gc.collect()
    wait_for(lambda: _info().store_used_bytes == 0 and not _spill_files(), what="earlier tests' objects to go")
    spilled_before = _info().store_stats["num_spilled"]
    small = ray.put(_block(3))
    big_value = np.arange(80 * MIB // 8, dtype=np.int64)  # 80 MiB: more than the 64 MiB store
    big = ray.put(big_value)
    assert [n for n in _spill_files() if n.endswith(".fallback")]
    assert _info().store_used_bytes < 20 * MIB  # only `small` is in memory

    @ray.remote
    def checksum(a):
        return int(a[-1]), len(a)

    @ray.remote
    def make_big():
        return np.ones(90 * MIB, dtype=np.uint8)

    assert np.array_equal(ray.get(big), big_value)
    assert ray.get(checksum.remote(big), timeout=60) == (len(big_value) - 1, len(big_value))
    assert _info().store_stats["num_spilled"] == spilled_before  # nothing in memory was pushed out for it
    del big  # the 96 MiB spill space holds one of these at a time
    gc.collect()
    wait_for(lambda: not [n for n in _spill_files() if n.endswith(".fallback")], what="its file on disk to go")
    made = make_big.remote()  # a task's return larger than the store
    assert int(ray.get(made, timeout=60).sum()) == 90 * MIB
    assert np.array_equal(ray.get(small), _block(3))
    del made
    gc.collect()
    wait_for(lambda: not [n for n in _spill_files() if n.endswith(".fallback")], what="the files on disk to go")
    with pytest.raises(ray.exceptions.ObjectStoreFullError, match="larger than the whole store, and the spill space"):
        ray.put(np.zeros(200 * MIB, dtype=np.uint8))  # more than the 96 MiB spill space too
