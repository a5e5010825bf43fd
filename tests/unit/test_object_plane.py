"""The node's object plane (object_plane.py) by plain calls: writers, spills in flight, frees."""

from __future__ import annotations

from raylite._core.node import object_plane as OP
from raylite._core.node.object_store import ObjectStore

MIB = 1 << 20
OWNER = "unix:///owner"


class _Writer:
    """A client's connection, as the plane sees it: only its identity matters."""


def _plane(capacity_mib: int = 10, ahead_mib: int = 4) -> OP.ObjectPlane:
    store = ObjectStore("/dev/shm/x", capacity_mib * MIB, spill_dir="/tmp/spill")
    return OP.ObjectPlane(store, spill_ahead_bytes=ahead_mib * MIB)


def _kinds(effects: list) -> list[str]:
    return [type(e).__name__ for e in effects]


def _create(plane: OP.ObjectPlane, oid: bytes, mib: int, writer: object) -> list:
    return plane.handle(OP.CreateRequested(oid, mib * MIB, OWNER, writer, None, OP.object_cause(oid)))


def _seal(plane: OP.ObjectPlane, oid: bytes, mib: int) -> None:
    plane.handle(OP.Sealed(oid, mib * MIB, OWNER, False, OP.object_cause(oid)))


def test_a_create_that_fits_hands_the_writer_its_segment_and_watches_the_writer_once():
    plane, writer = _plane(), _Writer()
    effects = _create(plane, b"a", 2, writer)
    assert _kinds(effects) == ["WatchWriter", "TakeSegment"]
    assert effects[0].writer is writer and not effects[1].after_spills
    assert effects[1].cause == OP.object_cause(b"a")
    assert _kinds(_create(plane, b"b", 2, writer)) == ["TakeSegment"]  # already watched
    _seal(plane, b"a", 2)
    assert set(plane.writers) == {b"b"}


def test_a_full_store_spills_and_the_writer_waits_only_past_the_bytes_allowed_ahead():
    plane, writer = _plane(ahead_mib=4), _Writer()
    _create(plane, b"a", 3, writer)
    _seal(plane, b"a", 3)
    _create(plane, b"b", 3, writer)
    _seal(plane, b"b", 3)
    effects = _create(plane, b"c", 6, writer)  # a (3 MiB) goes to disk: under 4 MiB ahead
    assert _kinds(effects) == ["StartSpill", "TakeSegment"] and effects[0].object_id == b"a"
    assert not effects[1].after_spills and plane.spill_inflight_bytes == 3 * MIB
    _seal(plane, b"c", 6)
    effects = _create(plane, b"d", 4, writer)  # b and c: 9 MiB in flight now
    assert [e.object_id for e in effects if isinstance(e, OP.StartSpill)] == [b"b", b"c"]
    assert effects[-1].after_spills
    for oid in (b"a", b"b", b"c"):
        assert plane.handle(OP.SpillFinished(oid, True, "t")) == []
    assert plane.spill_inflight_bytes == 0 and plane.spilling == {}
    assert plane.store.where(b"a") == "spilled"


def test_an_object_larger_than_the_store_is_made_on_disk_and_its_free_says_so():
    plane = _plane()
    effects = _create(plane, b"big", 11, _Writer())
    assert _kinds(effects) == ["WatchWriter", "TakeSegment"] and effects[1].fallback
    _seal(plane, b"big", 11)
    released = plane.handle(OP.FreeRequested([b"big"], "t"))
    assert _kinds(released) == ["ReleaseFiles"] and released[0].freed[0].fallback


def test_a_store_without_a_spill_directory_refuses_an_object_larger_than_itself():
    store = ObjectStore("/dev/shm/x", 10 * MIB, spill_dir="")
    plane = OP.ObjectPlane(store, spill_ahead_bytes=4 * MIB)
    effects = _create(plane, b"big", 11, _Writer())
    assert _kinds(effects) == ["Answer"] and not effects[0].ok and "larger than the whole store" in effects[0].error


def test_a_free_during_a_spill_leaves_the_files_to_the_spill_and_it_cleans_up():
    plane, writer = _plane(), _Writer()
    _create(plane, b"a", 6, writer)
    _seal(plane, b"a", 6)
    _create(plane, b"b", 6, writer)  # a starts spilling
    assert b"a" in plane.spilling
    assert plane.handle(OP.FreeRequested([b"a"], "free")) == []  # its copy is in flight
    effects = plane.handle(OP.SpillFinished(b"a", True, "t"))
    assert _kinds(effects) == ["ReleaseFiles"] and effects[0].freed == [OP.untracked(b"a")]
    # an object the store does not know: delete whatever files may be left
    assert plane.handle(OP.FreeRequested([b"zz"], "free"))[0].freed == [OP.untracked(b"zz")]


def test_a_failed_spill_keeps_the_object_in_memory_and_says_so():
    plane, writer = _plane(), _Writer()
    _create(plane, b"a", 6, writer)
    _seal(plane, b"a", 6)
    _create(plane, b"b", 6, writer)
    assert _kinds(plane.handle(OP.SpillFinished(b"a", False, "t"))) == ["SpillFailed"]
    assert plane.store.where(b"a") == "shared_memory"


def test_a_writer_that_goes_away_gives_back_the_room_of_what_it_never_sealed():
    plane, crashed, other = _plane(), _Writer(), _Writer()
    _create(plane, b"sealed", 2, crashed)
    _seal(plane, b"sealed", 2)
    _create(plane, b"half", 3, crashed)
    _create(plane, b"theirs", 1, other)
    effects = plane.handle(OP.WriterGone(crashed, "closed"))
    assert _kinds(effects) == ["ReleaseFiles"] and [f.object_id for f in effects[0].freed] == [b"half"]
    assert set(plane.store.objects) == {b"sealed", b"theirs"} and set(plane.writers) == {b"theirs"}


def test_an_owner_that_exits_frees_its_objects():
    plane, writer = _plane(), _Writer()
    _create(plane, b"a", 2, writer)
    _seal(plane, b"a", 2)
    plane.handle(OP.CreateRequested(b"b", MIB, "unix:///other", writer, None, "c"))
    effects = plane.handle(OP.OwnerGone(OWNER, "owner"))
    assert [f.object_id for f in effects[0].freed] == [b"a"] and set(plane.store.objects) == {b"b"}


def test_restore_brings_a_spilled_object_back_and_answers():
    plane, writer = _plane(), _Writer()
    for oid in (b"a", b"b"):
        _create(plane, oid, 6, writer)
        _seal(plane, oid, 6)
    plane.handle(OP.SpillFinished(b"a", True, "t"))
    assert plane.store.where(b"a") == "spilled"
    effects = plane.handle(OP.RestoreRequested(b"a", None, "r"))
    assert _kinds(effects) == ["StartSpill", "CopyBack"] and effects[0].object_id == b"b"
    plane.handle(OP.SpillFinished(b"b", True, "t"))
    done = plane.handle(OP.RestoreFinished(b"a", True, "r"))
    assert _kinds(done) == ["Answer"] and done[0].ok and plane.store.where(b"a") == "shared_memory"
    # already in memory: answered at once; gone: answered with why
    assert plane.handle(OP.RestoreRequested(b"a", None, "r"))[0].ok
    gone = plane.handle(OP.RestoreRequested(b"nope", None, "r"))[0]
    assert not gone.ok and "no longer has it" in gone.error
