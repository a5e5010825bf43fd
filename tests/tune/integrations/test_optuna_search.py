"""OptunaSearch driven by hand through the Searcher calls Tune makes (no cluster): the space in its
three spellings, warm starts, multi-objective studies, save/restore, and the errors."""

import math
import pickle

import pytest

optuna = pytest.importorskip("optuna", reason="optuna is not installed: pip install 'optuna==5.0.0'")

from raylite import tune  # noqa: E402
from raylite.tune.search.optuna import OptunaSearch  # noqa: E402

optuna.logging.set_verbosity(optuna.logging.WARNING)


def quadratic(config):
    return (config["x"] - 3.0) ** 2 + (0.0 if config["kind"] == "good" else 5.0)


def drive(searcher, objective, trials, metric="loss"):
    """What Tune does for each trial: suggest, report once, complete; returns (configs, values)."""
    configs, values = [], []
    for i in range(trials):
        config = searcher.suggest(f"t{i}")
        value = objective(config)
        searcher.on_trial_result(f"t{i}", {metric: value, "training_iteration": 1})
        searcher.on_trial_complete(f"t{i}", {metric: value, "training_iteration": 1})
        configs.append(config)
        values.append(value)
    return configs, values


def tune_space():
    return {"x": tune.uniform(-10, 10), "kind": tune.choice(["good", "bad"]),
            "nested": {"lr": tune.loguniform(1e-5, 1e-1), "layers": tune.randint(1, 4)},
            "constant": 7}


def test_tune_space_from_set_search_properties_gives_nested_configs_in_range():
    searcher = OptunaSearch(seed=0)
    assert searcher.set_search_properties("loss", "min", tune_space()) is True
    for config, _ in zip(*drive(searcher, quadratic, 12)):
        assert -10 <= config["x"] <= 10 and config["kind"] in ("good", "bad")
        assert 1e-5 <= config["nested"]["lr"] <= 1e-1
        assert config["nested"]["layers"] in (1, 2, 3)  # randint's upper bound is exclusive
        assert "constant" not in config  # Tune merges the constants over the suggestion
    assert len(searcher._ot_study.trials) == 12
    # a space already given: Tune's param_space is not taken as well
    assert searcher.set_search_properties("loss", "min", tune_space()) is False


def test_tpe_finds_a_better_region_than_its_first_random_points():
    searcher = OptunaSearch(metric="loss", mode="min", seed=1,
                            sampler=optuna.samplers.TPESampler(seed=1, n_startup_trials=8))
    searcher.set_search_properties(None, None, {"x": tune.uniform(-10, 10), "kind": tune.choice(["good", "bad"])})
    _, values = drive(searcher, quadratic, 40)
    assert min(values[20:]) < 0.5
    assert searcher._ot_study.best_value == min(values)


def test_mode_max_is_a_maximizing_study():
    searcher = OptunaSearch({"x": optuna.distributions.FloatDistribution(0, 1)}, metric="score",
                            mode="max", seed=0)
    drive(searcher, lambda c: c["x"], 5, metric="score")
    study = searcher._ot_study
    assert study.direction == optuna.study.StudyDirection.MAXIMIZE
    assert study.best_value == max(t.value for t in study.trials)


def test_optuna_distributions_nested_and_quantized():
    space = {"a": optuna.distributions.IntDistribution(0, 10, step=2),
             "opt": {"momentum": optuna.distributions.FloatDistribution(0.5, 0.9, step=0.1)}}
    searcher = OptunaSearch(space, metric="loss", mode="min", seed=0)
    configs, _ = drive(searcher, lambda c: c["a"] + c["opt"]["momentum"], 6)
    for config in configs:
        assert config["a"] in (0, 2, 4, 6, 8, 10)
        assert math.isclose(round(config["opt"]["momentum"] * 10), config["opt"]["momentum"] * 10)


def test_define_by_run_function_with_conditional_params_and_returned_constants():
    def space(trial):
        model = trial.suggest_categorical("model", ["linear", "tree"])
        if model == "tree":
            trial.suggest_int("depth", 2, 6)
        else:
            trial.suggest_float("alpha", 1e-3, 1.0, log=True)
        return {"fixed": "yes"}

    searcher = OptunaSearch(space, metric="loss", mode="min", seed=3)
    configs, _ = drive(searcher, lambda c: c.get("depth", 0) + c.get("alpha", 0), 10)
    for config in configs:
        assert config["fixed"] == "yes"
        assert ("depth" in config) == (config["model"] == "tree") != ("alpha" in config)
    assert searcher.set_search_properties("loss", "min", tune_space()) is False


def test_points_to_evaluate_come_first_and_evaluated_rewards_are_not_rerun():
    points = [{"x": 3.0, "kind": "good"}, {"x": -4.0, "kind": "bad"}]
    searcher = OptunaSearch(points_to_evaluate=points, metric="loss", mode="min", seed=0)
    searcher.set_search_properties(None, None, {"x": tune.uniform(-10, 10), "kind": tune.choice(["good", "bad"])})
    configs, _ = drive(searcher, quadratic, 3)
    assert configs[:2] == points

    space = {"x": optuna.distributions.FloatDistribution(-10, 10),
             "kind": optuna.distributions.CategoricalDistribution(["good", "bad"])}
    warm = OptunaSearch(space, metric="loss", mode="min", points_to_evaluate=points,
                        evaluated_rewards=[0.0, 54.0], seed=0)
    assert [t.value for t in warm._ot_study.trials] == [0.0, 54.0]
    assert warm._ot_study.best_params == {"x": 3.0, "kind": "good"}
    config = warm.suggest("t0")
    assert config not in points and len(warm._ot_study.trials) == 3


def test_choices_of_lists_and_dicts_come_back_as_given():
    layers = [[16, 16], [32], {"width": 8}]
    searcher = OptunaSearch(metric="loss", mode="min", seed=0,
                            points_to_evaluate=[{"layers": [32]}])
    searcher.set_search_properties(None, None, {"layers": tune.choice(layers)})
    configs, _ = drive(searcher, lambda c: len(c["layers"]), 6)
    assert configs[0] == {"layers": [32]}
    assert all(c["layers"] in layers for c in configs)


def test_intermediate_results_reach_optuna_and_early_stopped_trials_are_pruned():
    searcher = OptunaSearch({"x": optuna.distributions.FloatDistribution(0, 1)}, metric="loss",
                            mode="min", seed=0)
    searcher.suggest("a")
    for step in (1, 2, 3):
        searcher.on_trial_result("a", {"loss": 1.0 / step, "training_iteration": step})
    searcher.on_trial_complete("a", {"loss": 1 / 3, "training_iteration": 3})
    searcher.suggest("b")  # stopped by a scheduler before reporting: no value
    searcher.on_trial_complete("b", None)
    searcher.suggest("c")
    searcher.on_trial_complete("c", None, error=True)
    a, b, c = searcher._ot_study.trials
    assert a.intermediate_values == {1: 1.0, 2: 0.5, 3: 1 / 3} and a.value == pytest.approx(1 / 3)
    assert b.state == optuna.trial.TrialState.PRUNED
    assert c.state == optuna.trial.TrialState.FAIL
    searcher.on_trial_complete("a", {"loss": 9.0})  # a second completion changes nothing
    assert searcher._ot_study.trials[0].value == pytest.approx(1 / 3)


def test_multi_objective_study_keeps_a_pareto_front():
    space = {"x": optuna.distributions.FloatDistribution(0, 1)}
    searcher = OptunaSearch(space, metric=["cost", "quality"], mode=["min", "max"], seed=0)
    for i in range(6):
        config = searcher.suggest(f"t{i}")
        searcher.on_trial_result(f"t{i}", {"cost": config["x"], "quality": config["x"]})
        searcher.on_trial_complete(f"t{i}", {"cost": config["x"], "quality": config["x"] ** 0.5})
    study = searcher._ot_study
    assert [d.name for d in study.directions] == ["MINIMIZE", "MAXIMIZE"]
    assert all(len(t.values) == 2 for t in study.trials) and study.best_trials


def test_save_and_restore_continue_the_same_study(tmp_path):
    searcher = OptunaSearch(metric="loss", mode="min", seed=0)
    searcher.set_search_properties(None, None, {"x": tune.uniform(-10, 10), "kind": tune.choice(["good", "bad"])})
    drive(searcher, quadratic, 5)
    searcher.suggest("pending")
    path = tmp_path / "searcher.pkl"
    searcher.save(str(path))

    restored = OptunaSearch()
    restored.restore(str(path))
    assert len(restored._ot_study.trials) == 6
    value = quadratic(restored._ot_trials["pending"].params)
    restored.on_trial_complete("pending", {"loss": value})
    assert restored._ot_study.trials[-1].value == value
    assert isinstance(pickle.loads(pickle.dumps(restored.get_state())), dict)


def test_unsupported_domains_and_grid_search_name_the_parameter():
    with pytest.raises(ValueError, match="'nested/noise'.*Normal"):
        OptunaSearch.convert_search_space({"nested": {"noise": tune.randn(0, 1)}})
    with pytest.raises(ValueError, match="grid_search.*'?b'?.*tune.choice"):
        OptunaSearch.convert_search_space({"a": tune.uniform(0, 1), "b": tune.grid_search([1, 2])})
    with pytest.raises(ValueError, match="sample_from|Function"):
        OptunaSearch.convert_search_space({"f": tune.sample_from(lambda spec: 1)})


def test_missing_metric_or_mode_and_bad_arguments_are_explained():
    searcher = OptunaSearch({"x": optuna.distributions.FloatDistribution(0, 1)})
    with pytest.raises(RuntimeError, match="metric.*mode.*TuneConfig"):
        searcher.suggest("t0")
    with pytest.raises(ValueError, match="mode must be 'min' or 'max'"):
        OptunaSearch(metric="loss", mode="minimize")
    with pytest.raises(ValueError, match="lists of the same length"):
        OptunaSearch(metric=["a", "b"], mode=["min"])
    with pytest.raises(TypeError, match="BaseSampler"):
        OptunaSearch(sampler="tpe")
    with pytest.raises(ValueError, match="one reward per point"):
        OptunaSearch(points_to_evaluate=[{"x": 1}], evaluated_rewards=[1, 2])
    with pytest.raises(RuntimeError, match="no search space"):
        OptunaSearch(metric="loss", mode="min").suggest("t0")


def test_only_a_mode_uses_tunes_anonymous_metric():
    searcher = OptunaSearch({"x": optuna.distributions.FloatDistribution(0, 1)}, mode="min")
    assert searcher.metric == "_metric"
