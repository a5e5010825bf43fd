"""raylite.util.dask: Dask graphs computed as raylite tasks."""

from __future__ import annotations

import os

import pytest

dask = pytest.importorskip("dask", reason="dask is not installed (pip install 'dask[dataframe,array]')")

from raylite.util.dask import (  # noqa: E402
    disable_dask_on_ray,
    enable_dask_on_ray,
    ray_dask_get,
    ray_dask_get_sync,
)


def _pid(*_):
    return os.getpid()


def _boom(_):
    raise IndexError("bad partition")


def test_a_legacy_graph_runs_as_tasks_with_refs_between_them(cluster):
    dsk = {"a": 1, "b": (lambda x: x + 1, "a"), "c": (sum, ["a", "b"]), "d": "c",
           "p": (_pid, "c")}
    assert ray_dask_get(dsk, "c") == 3
    assert ray_dask_get(dsk, [["c", "d"], "b"]) == [[3, 3], 2]
    assert ray_dask_get(dsk, "p") != os.getpid()
    assert ray_dask_get_sync(dsk, ["c", "b"]) == [3, 2]


def test_delayed_and_array_match_the_sync_scheduler(cluster):
    da = pytest.importorskip("dask.array")
    x = da.arange(10_000, chunks=1_000).reshape(100, 100).rechunk(25)
    expr = (x.T @ x).sum(axis=0).mean()
    assert dask.compute(expr, scheduler=ray_dask_get)[0] == dask.compute(expr, scheduler="sync")[0]
    total = dask.delayed(sum)([dask.delayed(pow)(i, 2) for i in range(10)])
    assert total.compute(scheduler=ray_dask_get) == 285


def test_persist_returns_refs_and_errors_keep_their_type(cluster):
    import raylite

    dsk = {"a": (abs, -4), "z": (_boom, "a")}
    (ref,) = ray_dask_get(dsk, ["a"], ray_persist=True)
    assert raylite.get(ref) == 4
    with pytest.raises(IndexError, match="bad partition"):
        ray_dask_get(dsk, "z")
    with pytest.raises(IndexError):
        ray_dask_get_sync(dsk, "z")
    with pytest.raises(KeyError, match="no task for key"):
        ray_dask_get(dsk, "missing")


def test_enable_makes_it_the_default_and_disable_undoes_it(cluster):
    delayed_pid = dask.delayed(_pid)(0)
    with enable_dask_on_ray():
        assert dask.config.get("scheduler") is ray_dask_get
        assert delayed_pid.compute() != os.getpid()
    enable_dask_on_ray()
    try:
        assert dask.config.get("scheduler") is ray_dask_get
    finally:
        disable_dask_on_ray()
    assert dask.config.get("scheduler", None) is None
