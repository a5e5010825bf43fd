"""wait(fetch_local=True) counts an object ready once it is in this node's store."""

from __future__ import annotations

import os

import numpy as np

import raylite as ray
from raylite._core import runtime


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
