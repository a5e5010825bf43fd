"""raylite.util.joblib: the joblib backend "ray" runs joblib.Parallel on pool actors."""

from __future__ import annotations

import os

import pytest

joblib = pytest.importorskip("joblib", reason="joblib is not installed (pip install joblib)")

from raylite.util.joblib import register_ray  # noqa: E402


def pid_of(x):
    return x, os.getpid()


def explode(x):
    if x == 2:
        raise ZeroDivisionError("two")
    return x


def test_parallel_runs_on_the_cluster_and_keeps_order(cluster):
    register_ray()
    with joblib.parallel_backend("ray", n_jobs=2):
        out = joblib.Parallel(batch_size=1)(joblib.delayed(pid_of)(i) for i in range(12))
    assert [x for x, _ in out] == list(range(12))
    assert os.getpid() not in {pid for _, pid in out}


def test_parallel_config_and_negative_n_jobs(cluster):
    register_ray()
    with joblib.parallel_config(backend="ray", n_jobs=-1):
        assert joblib.Parallel()(joblib.delayed(abs)(-i) for i in range(5)) == list(range(5))


def test_a_failing_call_raises_its_own_type(cluster):
    register_ray()
    with joblib.parallel_backend("ray", n_jobs=2), pytest.raises(ZeroDivisionError, match="two"):
        joblib.Parallel()(joblib.delayed(explode)(i) for i in range(4))
