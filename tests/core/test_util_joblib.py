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


def test_scikit_learn_grid_search_matches_its_sequential_result(cluster):
    pytest.importorskip("sklearn", reason="scikit-learn is not installed (pip install scikit-learn)")
    from sklearn.datasets import make_classification
    from sklearn.model_selection import GridSearchCV
    from sklearn.tree import DecisionTreeClassifier

    register_ray()
    X, y = make_classification(n_samples=200, random_state=0)
    grid = {"max_depth": [1, 2, 4, None], "min_samples_leaf": [1, 5]}
    sequential = GridSearchCV(DecisionTreeClassifier(random_state=0), grid, cv=3).fit(X, y)
    with joblib.parallel_backend("ray"):
        on_ray = GridSearchCV(DecisionTreeClassifier(random_state=0), grid, cv=3, n_jobs=-1).fit(X, y)
    assert on_ray.best_params_ == sequential.best_params_
    assert list(on_ray.cv_results_["mean_test_score"]) == list(sequential.cv_results_["mean_test_score"])


def test_the_backend_sizes_itself_by_the_cluster(cluster):
    from raylite.util.joblib.ray_backend import RayBackend

    backend = RayBackend()
    assert backend.effective_n_jobs(-1) == 2 and backend.effective_n_jobs(-2) == 1
    assert backend.effective_n_jobs(16) == 2
    with pytest.raises(ValueError, match="no meaning"):
        backend.effective_n_jobs(0)
