"""Owner-side reference counting decides when objects are freed."""

from __future__ import annotations

from raylite._core.client.reference_counter import ReferenceCounter

ME = "unix:///me"
OTHER = "unix:///other"


def test_freed_when_last_local_ref_goes():
    rc = ReferenceCounter(ME)
    rc.own(b"x")
    rc.add_local(b"x", ME)
    rc.add_local(b"x", ME)
    assert rc.remove_local(b"x") == ([], [])
    assert rc.remove_local(b"x") == ([b"x"], [])


def test_submitted_and_borrowers_keep_alive():
    rc = ReferenceCounter(ME)
    rc.own(b"x")
    rc.add_local(b"x", ME)
    rc.add_submitted([b"x"])
    assert rc.remove_local(b"x") == ([], [])
    rc.add_borrower(b"x", OTHER)
    assert rc.remove_submitted([b"x"]) == ([], [])
    assert rc.remove_borrower(b"x", OTHER) == ([b"x"], [])


def test_borrower_unregisters_with_owner():
    rc = ReferenceCounter(ME)
    rc.add_local(b"y", OTHER)
    assert rc.borrow(b"y", OTHER) is True
    assert rc.borrow(b"y", OTHER) is False
    assert rc.remove_local(b"y") == ([], [(OTHER, b"y")])


def test_contained_refs_freed_with_container():
    rc = ReferenceCounter(ME)
    rc.own(b"inner")
    rc.add_local(b"inner", ME)
    rc.own(b"outer")
    rc.add_local(b"outer", ME)
    rc.add_contained(b"outer", [(b"inner", ME)])
    assert rc.remove_local(b"inner") == ([], [])
    free, _ = rc.remove_local(b"outer")
    assert sorted(free) == [b"inner", b"outer"]


def test_dead_borrower_is_forgotten():
    rc = ReferenceCounter(ME)
    rc.own(b"x")
    rc.add_borrower(b"x", OTHER)
    assert rc.drop_borrowers_at(OTHER) == ([b"x"], [])


def test_lineage_lives_with_its_object_and_while_a_dependent_needs_it():
    rc = ReferenceCounter("me")
    a, b = b"a" * 20, b"b" * 20
    for oid in (a, b):
        rc.own(oid)
        rc.add_local(oid, "me")
    rc.record_lineage([a], "spec-a", [])
    rc.record_lineage([b], "spec-b", [a])  # b's task takes a
    assert rc.lineage_of(b).arg_ids == [a] and rc.lineage_of(a).pins == 1
    assert rc.remove_local(a) == ([a], [])  # a's value is freed ...
    assert rc.lineage_of(a).spec == "spec-a"  # ... its lineage stays for b
    rc.remove_local(b)
    assert rc.lineage_of(b) is None and rc.lineage_of(a) is None  # both gone together


def test_lineage_of_a_dependency_outlives_the_dependent_while_referenced():
    rc = ReferenceCounter("me")
    a, b = b"a" * 20, b"b" * 20
    for oid in (a, b):
        rc.own(oid)
        rc.add_local(oid, "me")
    rc.record_lineage([a], "spec-a", [])
    rc.record_lineage([b], "spec-b", [a])
    rc.remove_local(b)
    assert rc.lineage_of(b) is None and rc.lineage_of(a).pins == 0
    rc.remove_local(a)
    assert rc.lineage == {}
