"""Releases and submissions reach the proxy in the order the program made them: a ref passed to
a task and dropped at once must still reach the task (a release queued after the submit once
overtook it, and the proxy freed the object: ObjectLostError, "its owner released it")."""

from __future__ import annotations

import sys
import threading

import cloudpickle

cloudpickle.register_pickle_by_value(sys.modules[__name__])


def test_ref_dropped_right_after_submit(ray_client):
    ray = ray_client

    @ray.remote
    def total(a):
        return int(a.sum())

    import numpy as np

    out = []
    for round_ in range(3):
        blocks = [ray.put(np.full(100, i + round_)) for i in range(5)]
        for _ in range(5):
            b = blocks.pop()
            out.append(total.remote(b))
            del b
    assert ray.get(out) == [100 * v for r in range(3) for v in (4 + r, 3 + r, 2 + r, 1 + r, r)]


def test_many_refs_passed_and_dropped_from_threads(ray_client):
    ray = ray_client

    @ray.remote
    def plus_one(x):
        return x + 1

    results: dict[int, list] = {}
    errors: list[BaseException] = []

    def worker(t: int) -> None:
        try:
            mine = []
            for i in range(40):
                ref = ray.put(t * 1000 + i)
                mine.append(plus_one.remote(ref))
                del ref
                # a ref made by a task, passed on and dropped at once
                chained = plus_one.remote(mine[-1])
                mine[-1] = chained
                del chained
            results[t] = ray.get(mine, timeout=120)
        except BaseException as e:  # noqa: BLE001
            errors.append(e)

    threads = [threading.Thread(target=worker, args=(t,)) for t in range(6)]
    for th in threads:
        th.start()
    for th in threads:
        th.join(300)
    assert not errors, errors[0]
    for t in range(6):
        assert results[t] == [t * 1000 + i + 2 for i in range(40)]


def test_data_rowwise_map_over_client(ray_client):
    ray = ray_client
    ds = ray.data.range(2000, override_num_blocks=16).map(lambda r: {"id": r["id"] * 2})
    assert sorted(r["id"] for r in ds.take_all()) == [2 * i for i in range(2000)]


def test_actor_handles_collected_after_shutdown_stay_silent(client_head, capfd, caplog):
    """Handles dropped just before, or collected after, shutdown() print no traceback (an
    `actor_out_of_scope ... is closed` one did)."""
    import gc

    import raylite as ray

    ray.init(client_head["url"], namespace="client-tests")

    @ray.remote
    class Counter:
        def ping(self):
            return "pong"

    first = Counter.remote()
    assert ray.get(first.ping.remote()) == "pong"
    dropped = Counter.remote()
    others = [Counter.remote() for _ in range(3)]
    del dropped
    ray.shutdown()
    del others, first
    gc.collect()
    err = capfd.readouterr().err
    assert "Traceback" not in err and "is closed" not in err, err
    assert not [r for r in caplog.records if r.levelname in ("ERROR", "CRITICAL")]
