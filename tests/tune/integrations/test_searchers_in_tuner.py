"""OptunaSearch and HyperOptSearch inside a real Tuner on a local cluster: the param_space
converted through set_search_properties, constants merged back, ASHA and ConcurrencyLimiter
around them, and the searcher's state saved with the experiment."""

import os

import pytest

pytest.importorskip("optuna", reason="optuna is not installed: pip install 'optuna==5.0.0'")
pytest.importorskip("hyperopt", reason="hyperopt is not installed: pip install 'hyperopt==0.3.0'")

from raylite import cloudpickle, tune  # noqa: E402
from raylite.tune.schedulers import ASHAScheduler  # noqa: E402
from raylite.tune.search import ConcurrencyLimiter  # noqa: E402
from raylite.tune.search.hyperopt import HyperOptSearch  # noqa: E402
from raylite.tune.search.optuna import OptunaSearch  # noqa: E402

SPACE = {"x": tune.uniform(-5, 5), "kind": tune.choice(["good", "bad"]), "fixed": {"epochs": 4}}


def curve(config):
    """loss after each epoch: falls towards (x - 1)^2 (+2 for the bad kind)."""
    final = (config["x"] - 1) ** 2 + (0 if config["kind"] == "good" else 2)
    for epoch in range(1, config["fixed"]["epochs"] + 1):
        tune.report({"loss": final * (1 + 2 / epoch), "final": final})


def _saved_searcher(grid, cls):
    """The searcher as the experiment saved it, unwrapped from Tune's SearchGenerator and limiters."""
    experiment = os.path.dirname(grid[0].path)
    with open(os.path.join(experiment, "experiment_state.pkl"), "rb") as f:
        searcher = cloudpickle.load(f)["search_alg"]
    while not isinstance(searcher, cls):
        searcher = searcher.searcher
    return searcher


def test_optuna_with_asha_and_a_concurrency_limit_in_a_tuner(cluster, storage):
    searcher = ConcurrencyLimiter(OptunaSearch(seed=0, points_to_evaluate=[{"x": 1.0, "kind": "good"}]),
                                  max_concurrent=2)
    grid = tune.Tuner(
        curve, param_space=SPACE,
        tune_config=tune.TuneConfig(metric="loss", mode="min", search_alg=searcher, num_samples=10,
                                    scheduler=ASHAScheduler(max_t=4, grace_period=1, reduction_factor=2)),
        run_config=tune.RunConfig(storage_path=storage, verbose=0),
    ).fit()
    assert len(grid) == 10 and grid.num_errors == 0
    assert all(r.config["fixed"] == {"epochs": 4} for r in grid)  # the constant merged back
    best = grid.get_best_result(metric="final", mode="min", scope="last")
    assert best.config["x"] == 1.0 and best.metrics["final"] == 0  # the warm-start point wins
    assert any(r.metrics["training_iteration"] < 4 for r in grid)  # ASHA stopped some early
    study = searcher.searcher._ot_study
    assert len(study.trials) == 10 and {t.state.name for t in study.trials} == {"COMPLETE"}
    # Tune told Optuna each trial's last reported loss, and its learning curve step by step
    by_x = {r.config["x"]: r.metrics for r in grid}
    for t in study.trials:
        assert t.value == pytest.approx(by_x[t.params["x"]]["loss"])
        assert len(t.intermediate_values) == by_x[t.params["x"]]["training_iteration"]
    saved = _saved_searcher(grid, OptunaSearch)
    assert len(saved._ot_study.trials) == 10 and saved.suggest("next") is not None


def test_hyperopt_in_a_tuner_maximizing_with_points_first(cluster, storage):
    def score(config):
        tune.report({"score": -((config["x"] - 1) ** 2) - (0 if config["kind"] == "good" else 2)})

    searcher = HyperOptSearch(points_to_evaluate=[{"x": 0.5, "kind": "good"}], random_state_seed=0,
                              n_initial_points=4)
    grid = tune.Tuner(
        score, param_space=SPACE,
        tune_config=tune.TuneConfig(metric="score", mode="max", search_alg=searcher, num_samples=8,
                                    max_concurrent_trials=2),
        run_config=tune.RunConfig(storage_path=storage, verbose=0),
    ).fit()
    assert len(grid) == 8 and grid.num_errors == 0
    assert any(r.config["x"] == 0.5 and r.config["kind"] == "good" for r in grid)
    assert all(r.config["fixed"] == {"epochs": 4} for r in grid)
    best = grid.get_best_result()
    assert best.metrics["score"] == max(r.metrics["score"] for r in grid)
    losses = sorted(searcher._hpopt_trials.losses())
    assert losses[0] == pytest.approx(-best.metrics["score"])
    saved = _saved_searcher(grid, HyperOptSearch)
    assert sorted(saved._hpopt_trials.losses()) == losses and saved.suggest("next") is not None


def test_a_space_the_searcher_cannot_take_fails_before_any_trial(cluster, storage):
    tuner = tune.Tuner(
        curve, param_space={**SPACE, "grid": tune.grid_search([1, 2])},
        tune_config=tune.TuneConfig(metric="loss", mode="min", search_alg=OptunaSearch(), num_samples=2),
        run_config=tune.RunConfig(storage_path=storage, verbose=0))
    with pytest.raises(ValueError, match="grid_search.*tune.choice"):
        tuner.fit()
