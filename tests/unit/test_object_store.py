"""The node's object store decides room, LRU spills and recycled segments: plain calls, no files."""

from __future__ import annotations

import pytest

from raylite._core.node.object_store import ObjectStore
from raylite.exceptions import ObjectStoreFullError

MIB = 1 << 20
OWNER = "unix:///owner"


def _store(capacity_mib: int = 10, **kw) -> ObjectStore:
    return ObjectStore("/dev/shm/x", capacity_mib * MIB, spill_dir="/tmp/spill", **kw)


def _put(store: ObjectStore, oid: bytes, mib: int, **kw):
    res = store.reserve(oid, mib * MIB, OWNER, **kw)
    for v in res.spill:
        store.spill_done(v, True)
    store.sealed(oid, mib * MIB, OWNER)
    return res


def test_reserve_within_capacity_spills_nothing():
    s = _store()
    res = _put(s, b"a", 4)
    assert res.spill == [] and s.used_bytes == 4 * MIB


def test_full_store_spills_least_recently_used_first():
    s = _store()
    _put(s, b"a", 4)
    _put(s, b"b", 4)
    s.accessed(b"a")  # b is now the least recently used
    res = _put(s, b"c", 4)
    assert res.spill == [b"b"]
    assert s.where(b"b") == "spilled" and s.where(b"a") == "shared_memory"
    assert s.used_bytes == 8 * MIB and s.spilled_bytes == 4 * MIB


def test_copies_of_remote_objects_are_dropped_before_anything_is_spilled():
    s = _store()
    _put(s, b"own", 4)
    s.sealed(b"copy", 4 * MIB, "", copy=True)  # pulled from the node holding the primary
    s.accessed(b"copy")  # even the most recently used copy goes before a primary
    res = _put(s, b"new", 4)
    assert res.spill == [] and [f.object_id for f in res.evict] == [b"copy"]
    assert res.evict[0].shm and not res.evict[0].spill_file
    assert s.where(b"copy") != "shared_memory" and s.where(b"own") == "shared_memory"
    assert s.used_bytes == 8 * MIB and s.spilled_bytes == 0


def test_mapped_objects_are_not_spilled():
    s = _store()
    _put(s, b"a", 4)
    _put(s, b"b", 4)
    s.mapped(b"a")  # a reader on this node maps a: spilling it would free nothing now
    assert _put(s, b"c", 4).spill == []
    assert _put(s, b"d", 4).spill == [b"b"]


def test_an_object_no_longer_mapped_is_spilled_in_its_turn():
    s = _store(capacity_mib=12)
    for oid in (b"a", b"b", b"c"):
        _put(s, oid, 4)
    s.mapped(b"a")
    s.mapped(b"a")  # two readers
    s.unmapped(b"a")
    _put(s, b"d", 4)  # fits: a still has a reader
    s.unmapped(b"a")  # in use until now: it counts again, as just used
    assert _put(s, b"e", 4).spill == [b"b", b"c"]
    assert _put(s, b"f", 4).spill == [b"d"]
    assert _put(s, b"g", 4).spill == [b"a"]


def test_mapped_objects_do_not_count_against_the_capacity():
    """Their pages stay while a reader maps them: spilling them would free nothing."""
    s = _store()
    _put(s, b"a", 4)
    _put(s, b"b", 4)
    s.mapped(b"a")
    s.mapped(b"b")
    assert s.load_bytes() == 0 and s.stats()["mapped_bytes"] == 8 * MIB
    assert _put(s, b"c", 4).spill == [] and _put(s, b"d", 4).spill == []
    s.unmapped(b"a")  # counts again: the next object that needs room spills the oldest idle one
    assert _put(s, b"e", 4).spill == [b"c", b"d"]
    assert s.used_bytes == 12 * MIB and s.load_bytes() == 8 * MIB  # a, e; and b, mapped


class _NoScans(dict):
    """The store's object table, refusing to be walked: room must come from the LRU queues."""

    def items(self):
        raise AssertionError("the whole object table was scanned")

    def values(self):
        raise AssertionError("the whole object table was scanned")

    def __iter__(self):
        raise AssertionError("the whole object table was scanned")


def test_making_room_walks_only_the_victims():
    s = _store(capacity_mib=64)
    s.objects = _NoScans()
    for i in range(64):
        _put(s, i.to_bytes(4, "big"), 1)
    for i in range(64, 2_000):  # each new object spills exactly the oldest one
        res = _put(s, i.to_bytes(4, "big"), 1)
        assert res.spill == [(i - 64).to_bytes(4, "big")]
    res = s.restore((0).to_bytes(4, "big"))
    assert res is not None and res.spill == [(1936).to_bytes(4, "big")]
    s.spill_done((1936).to_bytes(4, "big"), True)
    s.restore_done((0).to_bytes(4, "big"), True)
    assert s.used_bytes == 64 * MIB and s.spilled_bytes == (2_000 - 64) * MIB


def test_recycled_segment_of_the_exact_size_is_reused_first():
    s = _store(capacity_mib=100)
    a = s.offer_pool_file(3 * MIB)
    b = s.offer_pool_file(5 * MIB)
    assert s.reserve(b"x", 5 * MIB, OWNER).reuse == b
    assert s.reserve(b"y", 4 * MIB, OWNER).reuse == a  # none of its size: the closest will do
    assert s.pool_bytes == 0 and not s.pool


def test_objects_being_written_are_never_spilled():
    s = _store()
    s.reserve(b"a", 8 * MIB, OWNER)  # not sealed yet
    with pytest.raises(ObjectStoreFullError, match="being written"):
        s.reserve(b"b", 4 * MIB, OWNER)


def test_full_error_when_spill_space_is_exhausted_names_the_numbers():
    s = _store(spill_capacity_bytes=3 * MIB)
    _put(s, b"a", 8)
    with pytest.raises(ObjectStoreFullError) as err:
        s.reserve(b"b", 4 * MIB, OWNER)
    text = str(err.value)
    assert "8.0 MiB used of 10.0 MiB" in text and "3.0 MiB" in text and "object_store_memory" in text
    assert s.used_bytes == 8 * MIB  # nothing changed


def test_disk_free_space_limits_spilling():
    s = _store()
    _put(s, b"a", 8)
    with pytest.raises(ObjectStoreFullError, match="spill space has only 1.0 MiB"):
        s.reserve(b"b", 4 * MIB, OWNER, spill_free_bytes=1 * MIB)


def test_object_larger_than_the_store_goes_to_disk_as_ray_does():
    # Ray's fallback allocation: it cannot fit however much is spilled, so it is made on disk;
    # it counts against neither the capacity nor the spill space, and nothing is spilled for it
    s = _store()
    _put(s, b"small", 4)
    res = s.reserve(b"big", 11 * MIB, OWNER, spill_free_bytes=100 * MIB)
    assert res.fallback and res.spill == [] and res.evict == [] and res.reuse == ""
    s.sealed(b"big", 11 * MIB, OWNER)
    assert s.used_bytes == 4 * MIB and s.fallback_bytes == 11 * MIB and s.where(b"big") == "shared_memory"
    s.mapped(b"big")
    assert s.mapped_bytes == 0  # never counted in memory, mapped or not
    s.unmapped(b"big")
    _put(s, b"next", 6)  # the whole capacity is still there for the others
    assert s.where(b"small") == s.where(b"next") == "shared_memory"
    freed = s.free(b"big")
    assert freed.fallback and freed.shm and not freed.spill_file
    assert s.fallback_bytes == 0 and b"big" not in s.objects


def test_object_larger_than_the_store_is_refused_when_the_disk_cannot_hold_it():
    with pytest.raises(ObjectStoreFullError, match="larger than the whole store, and the spill space"):
        _store().reserve(b"a", 11 * MIB, OWNER, spill_free_bytes=5 * MIB)
    with pytest.raises(ObjectStoreFullError, match="larger than the whole store"):  # nowhere to put it
        ObjectStore("/dev/shm/x", 10 * MIB, spill_dir="").reserve(b"a", 11 * MIB, OWNER)


def test_a_pulled_copy_larger_than_the_store_sealed_without_a_reservation_is_on_disk():
    s = _store()
    s.sealed(b"copy", 20 * MIB, "", copy=True, fallback=True)
    assert s.used_bytes == 0 and s.fallback_bytes == 20 * MIB
    assert s.free(b"copy").fallback


def test_restore_makes_room_and_counts_back():
    s = _store()
    _put(s, b"a", 6)
    _put(s, b"b", 6)  # spills a
    assert s.where(b"a") == "spilled"
    res = s.restore(b"a")
    assert res is not None and res.spill == [b"b"]
    s.spill_done(b"b", True)
    s.restore_done(b"a", True)
    assert s.where(b"a") == "shared_memory" and s.where(b"b") == "spilled"
    assert s.used_bytes == 6 * MIB and s.spilled_bytes == 6 * MIB
    assert s.restore(b"a") is None  # already in memory


def test_free_reports_which_files_to_drop():
    s = _store()
    _put(s, b"a", 6)
    _put(s, b"b", 6)
    fa = s.free(b"a")
    assert fa is not None and not fa.shm and fa.spill_file
    fb = s.free(b"b")
    assert fb is not None and fb.shm and not fb.spill_file
    assert s.used_bytes == 0 and s.spilled_bytes == 0 and s.free(b"b") is None


def test_freed_segments_are_recycled_for_similar_sizes():
    s = _store(capacity_mib=100)
    _put(s, b"a", 20)
    freed = s.free(b"a")
    assert freed is not None
    kept = s.offer_pool_file(20 * MIB)
    assert kept and s.pool_bytes == 20 * MIB
    res = s.reserve(b"b", 20 * MIB, OWNER)
    assert res.reuse == kept and s.pool_bytes == 0


def test_pool_is_bounded_and_gives_way_to_objects():
    s = _store(capacity_mib=100)  # pool limit: a quarter of the store
    assert s.offer_pool_file(20 * MIB)
    assert not s.offer_pool_file(10 * MIB)  # 30 MiB > 25 MiB
    res = s.reserve(b"big", 90 * MIB, OWNER)
    assert res.drop_pool and s.pool_bytes == 0 and res.spill == []


def test_sealed_without_reservation_is_counted():
    s = _store()
    s.sealed(b"pulled", 3 * MIB, "")
    assert s.used_bytes == 3 * MIB and s.where(b"pulled") == "shared_memory"


def test_free_during_spill_is_reported_by_spill_done():
    s = _store()
    _put(s, b"a", 8)
    res = s.reserve(b"b", 4 * MIB, OWNER)
    assert res.spill == [b"a"]
    s.free(b"a")
    assert s.spill_done(b"a", True) is False
    assert s.spilled_bytes == 0


def test_restore_counts_its_own_spill_file_as_room():
    s = _store(spill_capacity_bytes=6 * MIB)
    _put(s, b"a", 6)
    _put(s, b"b", 6)  # spills a: the spill space is now full
    res = s.restore(b"a")  # b must go to disk where a's file was
    assert res is not None and res.spill == [b"b"]


def test_idle_recycled_segments_are_trimmed():
    from raylite._core.clock import FakeClock

    clock = FakeClock()
    s = ObjectStore("/dev/shm/x", 100 * MIB, clock=clock)
    first = s.offer_pool_file(10 * MIB)
    clock.advance(8)
    second = s.offer_pool_file(10 * MIB)
    clock.advance(3)
    assert s.trim_pool(idle_s=10) == [first]
    assert s.pool_bytes == 10 * MIB and list(s.pool) == [second]
    assert s.trim_pool(idle_s=0) == [second] and s.pool_bytes == 0
