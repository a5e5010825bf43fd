"""raylite.util.multiprocessing.Pool: the standard library's Pool API, on actors."""

from __future__ import annotations

import os
import threading

import pytest

from raylite.util.multiprocessing import Pool, TimeoutError


def square(x):
    return x * x


def add(a, b):
    return a + b


def fail_on_three(x):
    if x == 3:
        raise KeyError(f"item {x}")
    return x


def scaled(x, factor=1):
    return x * factor


def where(_):
    return os.getpid()


_INIT_VALUE = None


def set_init(value):
    global _INIT_VALUE
    _INIT_VALUE = value


def read_init(_):
    return _INIT_VALUE


def wait_on(path):
    import time

    while not os.path.exists(path):
        time.sleep(0.01)
    return "released"


def test_map_starmap_imap_match_the_builtin_results(cluster):
    with Pool(processes=2) as pool:
        assert pool.map(square, range(20)) == [x * x for x in range(20)]
        assert pool.map(square, range(7), chunksize=3) == [x * x for x in range(7)]
        assert pool.starmap(add, [(1, 2), (3, 4)]) == [3, 7]
        assert list(pool.imap(square, range(9), chunksize=2)) == [x * x for x in range(9)]
        assert sorted(pool.imap_unordered(square, range(9))) == [x * x for x in range(9)]
        assert pool.apply(scaled, (4,), {"factor": 3}) == 12
        assert pool.map(square, []) == []


def test_work_runs_in_the_pool_actors_not_the_driver(cluster):
    with Pool(processes=2) as pool:
        pids = set(pool.map(where, range(16), chunksize=1))
    assert os.getpid() not in pids and len(pids) == 2


def test_async_results_and_callbacks(cluster):
    got, errors = [], []
    done = threading.Event()
    with Pool(processes=2) as pool:
        res = pool.map_async(square, range(5), callback=lambda v: (got.append(v), done.set()))
        assert res.get(timeout=60) == [0, 1, 4, 9, 16]
        assert done.wait(30) and got == [[0, 1, 4, 9, 16]]
        assert res.ready() and res.successful()
        star = pool.starmap_async(add, [(1, 1)])
        star.wait(60)
        assert star.get() == [2]
        bad = pool.apply_async(fail_on_three, (3,), error_callback=errors.append)
        with pytest.raises(KeyError):
            bad.get(timeout=60)
        assert not bad.successful() and isinstance(errors[0], KeyError)


def test_errors_keep_their_type_and_the_remote_traceback(cluster):
    with Pool(processes=2) as pool:
        with pytest.raises(KeyError) as info:
            pool.map(fail_on_three, range(6))
        assert type(info.value) is KeyError and "fail_on_three" in str(info.value.__cause__)
        it = pool.imap(fail_on_three, range(6), chunksize=4)
        assert [next(it) for _ in range(3)] == [0, 1, 2]  # the items before the failing one arrive
        with pytest.raises(KeyError):
            next(it)
        assert list(it) == [4, 5]  # iterating on after the failure yields the items after it


def test_get_timeout_raises_multiprocessing_timeout(cluster, tmp_path):
    flag = tmp_path / "go"
    with Pool(processes=1) as pool:
        res = pool.apply_async(wait_on, (str(flag),))
        with pytest.raises(TimeoutError):
            res.get(timeout=0.2)
        assert not res.ready()
        with pytest.raises(ValueError, match="not ready"):
            res.successful()
        flag.write_text("")
        assert res.get(timeout=60) == "released"
        flag.unlink()
        it = pool.imap(wait_on, [str(flag)])
        with pytest.raises(TimeoutError):
            it.next(timeout=0.2)
        flag.write_text("")
        assert it.next(timeout=60) == "released"


def test_initializer_runs_in_every_actor(cluster):
    with Pool(processes=2, initializer=set_init, initargs=("ready",)) as pool:
        assert set(pool.map(read_init, range(8), chunksize=1)) == {"ready"}


def test_maxtasksperchild_replaces_actors(cluster):
    with Pool(processes=1, maxtasksperchild=2, initializer=set_init, initargs=(1,)) as pool:
        pids = pool.map(where, range(6), chunksize=1)
        assert pool.map(read_init, range(3), chunksize=1) == [1, 1, 1]
    assert len(set(pids)) == 3  # 6 chunks, 2 per actor


def test_close_join_terminate_lifecycle(cluster):
    pool = Pool(processes=2)
    res = pool.map_async(square, range(10))
    pool.close()
    with pytest.raises(ValueError, match="Pool not running"):
        pool.map(square, [1])
    pool.join()
    assert res.get(timeout=1) == [x * x for x in range(10)]
    running = Pool(processes=1)
    with pytest.raises(ValueError, match="close"):
        running.join()
    running.terminate()
    running.join()
    with pytest.raises(ValueError, match="terminated"):
        running.apply(square, (1,))


def test_bad_arguments_say_what_to_change(cluster):
    with pytest.raises(ValueError, match="at least 1"):
        Pool(processes=0)
    with pytest.raises(ValueError, match="cluster has 2"):
        Pool(processes=5)
    with pytest.raises(ValueError, match="maxtasksperchild"):
        Pool(processes=1, maxtasksperchild=0)
    with Pool(processes=1) as pool, pytest.raises(ValueError, match="chunksize"):
        pool.map(square, [1], chunksize=0)


def test_ray_address_joins_a_running_cluster_from_a_fresh_driver(cluster, tmp_path):
    """A program that never called init() gives the pool the cluster's address (ray_address=)."""
    import subprocess
    import sys
    from pathlib import Path

    address = cluster.get_runtime_context().gcs_address
    script = tmp_path / "driver.py"
    script.write_text(
        "import raylite\n"
        "from raylite.util.multiprocessing import Pool\n"
        f"with Pool(processes=1, ray_address={address!r}) as pool:\n"
        "    print(pool.map(abs, [-3, -4]), raylite.get_runtime_context().gcs_address)\n")
    repo = Path(__file__).resolve().parents[2]
    env = dict(os.environ, PYTHONPATH=str(repo))
    proc = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, timeout=120,
                          env=env, cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert proc.stdout.split() == ["[3,", "4]", address], proc.stdout


def test_the_integrations_load_on_first_use_from_raylite_util():
    import raylite.util

    assert raylite.util.multiprocessing.Pool is Pool
    assert callable(raylite.util.joblib.register_ray) and callable(raylite.util.dask.ray_dask_get)
