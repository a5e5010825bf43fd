"""wait(fetch_local=True) counts an object ready once it is in this node's store."""

from __future__ import annotations

import os

import numpy as np

import raylite as ray
from raylite._core import runtime
from tests.cluster.conftest import wait_until


def test_wait_fetch_local_pulls_remote_objects(three_nodes):
    ray.init(address="auto")
    try:
        @ray.remote(resources={"w1": 1})
        def make(seed: int) -> np.ndarray:
            return np.full(2 * 1024 * 1024, seed, dtype=np.uint8)  # above the inline size

        store = runtime.client().store_dir
        kept_remote = make.remote(1)
        ready, _ = ray.wait([kept_remote], timeout=30, fetch_local=False)
        assert ready == [kept_remote]
        assert not os.path.exists(os.path.join(store, kept_remote.hex()))  # still only on w1

        fetched = make.remote(2)
        ready, not_ready = ray.wait([fetched], timeout=30)  # fetch_local defaults to True
        assert ready == [fetched] and not_ready == []
        assert os.path.exists(os.path.join(store, fetched.hex()))  # pulled into the head's store
        assert int(ray.get(fetched)[0]) == 2
    finally:
        ray.shutdown()


def test_wait_fetch_local_starts_pulling_what_it_did_not_return(three_nodes):
    # As in Ray: wait(fetch_local=True) asks for every object in its list, so the ones it did
    # not return (num_returns=1) still come to this node, in the background, one pull each
    ray.init(address="auto")
    try:
        @ray.remote(resources={"w1": 1})
        def make(seed: int) -> np.ndarray:
            return np.full(2 * 1024 * 1024, seed, dtype=np.uint8)

        store = runtime.client().store_dir
        refs = [make.remote(i) for i in range(3)]
        ray.wait(refs, num_returns=3, timeout=60, fetch_local=False)  # all computed, all on w1
        assert not any(os.path.exists(os.path.join(store, r.hex())) for r in refs)
        ready, rest = ray.wait(refs, num_returns=1, timeout=60)
        assert len(ready) == 1 and len(rest) == 2
        wait_until(lambda: all(os.path.exists(os.path.join(store, r.hex())) for r in refs),
                   what="the two it did not return to arrive too")
        assert [int(v[0]) for v in ray.get(refs)] == [0, 1, 2]
    finally:
        ray.shutdown()


def test_available_object_store_memory_counts_what_the_store_holds(three_nodes):
    ray.init(address="auto")
    try:
        me = ray.get_runtime_context().get_node_id()
        before = ray._private.state.available_resources_per_node()[me]["object_store_memory"]
        held = ray.put(np.zeros(32 * 1024 * 1024, dtype=np.uint8))
        after = ray._private.state.available_resources_per_node()[me]["object_store_memory"]
        assert before - after >= 32 * 1024 * 1024
        assert ray.available_resources()["object_store_memory"] <= ray.cluster_resources()["object_store_memory"] - 32 * 1024 * 1024
        del held
    finally:
        ray.shutdown()
