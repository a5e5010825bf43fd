"""FailureConfig(fail_fast=...): True stops the experiment at the first error and fit() returns the
grid holding it (Ray's doc_code/stopping.py reads the grid afterwards); "raise" raises from fit()."""

import pytest

from raylite import tune


def failing(config):
    if config["fail"]:
        raise RuntimeError("failing on purpose")
    tune.report({"score": 1})


def _tuner(storage, fail_fast):
    return tune.Tuner(failing, param_space={"fail": tune.grid_search([True, False])},
                      tune_config=tune.TuneConfig(max_concurrent_trials=1),
                      run_config=tune.RunConfig(storage_path=storage, verbose=0,
                                                failure_config=tune.FailureConfig(fail_fast=fail_fast)))


def test_fail_fast_true_returns_the_grid_with_the_error(cluster, storage):
    grid = _tuner(storage, True).fit()
    assert grid.num_errors == 1
    assert "failing on purpose" in str(grid.errors[0])
    assert all(not r.metrics.get("training_iteration") for r in grid)  # the second never reported


def test_fail_fast_raise_raises_from_fit(cluster, storage):
    with pytest.raises(Exception, match="failing on purpose"):
        _tuner(storage, "raise").fit()
