"""A driver holding many refs gets fewer full collections (client/gc_pacing.py), and the
interpreter's GC thresholds come back once the refs are gone; results are not affected."""

from __future__ import annotations

import gc

import pytest

import raylite as ray
from raylite._core.client import gc_pacing
from tests.conftest import wait_for


@pytest.fixture
def scaled_down(monkeypatch, cluster):
    """The pacer's real limit needs ~50,000 tasks; scaled down so a few thousand show it."""
    saved = gc.get_threshold()
    gc.set_threshold(700, 10, 10)
    monkeypatch.setattr(gc_pacing, "MIN_ENTRIES", 1000)
    monkeypatch.setattr(gc_pacing, "CHECK_EVERY", 64)
    yield
    gc.set_threshold(*saved)


@ray.remote
def square(x: int) -> int:
    return x * x


def test_full_collections_wait_while_the_tables_grow_and_the_threshold_comes_back(scaled_down):
    refs = [square.remote(i) for i in range(3000)]
    gc.collect()  # a full collection with the tables large: the next waits for them to double
    refs += [square.remote(i) for i in range(3000, 4000)]
    assert gc.get_threshold() == (700, 10, gc_pacing.MAX_THRESHOLD2)
    assert ray.get(refs) == [i * i for i in range(4000)]
    del refs
    # releasing the refs empties the tables, and the pacer gives the base threshold back
    wait_for(lambda: gc.get_threshold() == (700, 10, 10), what="the GC thresholds restored")
    assert ray.get(square.remote(12)) == 144
