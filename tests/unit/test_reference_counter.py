"""Owner-side reference counting decides when objects are freed."""

from __future__ import annotations

from raylite._core.reference_counter import ReferenceCounter

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
