"""ray.util.as_completed / map_unordered: results as tasks finish, not in submission order."""

from __future__ import annotations

import threading

import pytest

import raylite
from raylite.util import as_completed, map_unordered


@raylite.remote(max_concurrency=4)
class Gate:
    def __init__(self):
        self.open = threading.Event()

    def release(self):
        self.open.set()

    def wait(self, value):
        self.open.wait()
        return value


def test_as_completed_yields_a_finished_result_before_a_blocked_one(cluster):
    gate = Gate.remote()
    blocked = gate.wait.remote("late")
    done = raylite.put("early")
    results = as_completed([blocked, done], chunk_size=1)
    assert next(results) == "early"
    raylite.get(gate.release.remote())
    assert list(results) == ["late"]


def test_map_unordered_covers_every_item_and_refs_on_request(cluster):
    @raylite.remote
    def square(x):
        return x * x

    assert sorted(map_unordered(square, range(7), backpressure_size=3, chunk_size=2)) == [0, 1, 4, 9, 16, 25, 36]
    refs = list(as_completed([square.remote(3)], yield_obj_refs=True))
    assert raylite.get(refs) == [9]


def test_bad_chunk_sizes_are_refused():
    with pytest.raises(ValueError, match="chunk_size"):
        list(as_completed([], chunk_size=0))
    with pytest.raises(ValueError, match="chunk_size"):
        list(as_completed([], num_returns=2))
