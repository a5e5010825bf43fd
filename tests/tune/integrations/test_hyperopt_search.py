"""HyperOptSearch driven by hand through the Searcher calls Tune makes (no cluster): Tune and
hyperopt spaces, conditional choices, warm starts, seeding, save/restore, and the errors."""

import pytest

hyperopt = pytest.importorskip("hyperopt", reason="hyperopt is not installed: pip install 'hyperopt==0.3.0'")

from hyperopt import hp  # noqa: E402

from raylite import tune  # noqa: E402
from raylite.tune.search.hyperopt import HyperOptSearch  # noqa: E402


def quadratic(config):
    return (config["x"] - 3.0) ** 2 + (0.0 if config["kind"] == "good" else 5.0)


def drive(searcher, objective, trials, metric="loss", first=0):
    configs, values = [], []
    for i in range(first, first + trials):
        config = searcher.suggest(f"t{i}")
        value = objective(config)
        searcher.on_trial_result(f"t{i}", {metric: value, "training_iteration": 1})
        searcher.on_trial_complete(f"t{i}", {metric: value, "training_iteration": 1})
        configs.append(config)
        values.append(value)
    return configs, values


SPACE = {"x": tune.uniform(-10, 10), "kind": tune.choice(["good", "bad"])}


def test_tune_space_gives_every_kind_of_domain_in_range():
    space = {"u": tune.uniform(0, 1), "q": tune.quniform(0, 10, 2.5), "lu": tune.loguniform(1e-4, 1e-1),
             "n": tune.randn(5, 1), "ri": tune.randint(1, 4), "qri": tune.qrandint(0, 20, 5),
             "lri": tune.lograndint(1, 100), "c": tune.choice(["a", "b"]),
             "nested": {"lr": tune.uniform(0.1, 0.2)}, "constant": 3}
    searcher = HyperOptSearch(random_state_seed=0)
    assert searcher.set_search_properties("loss", "min", space) is True
    configs, _ = drive(searcher, lambda c: c["u"], 15)
    for c in configs:
        assert 0 <= c["u"] <= 1 and c["q"] in (0, 2.5, 5, 7.5, 10) and 1e-4 <= c["lu"] <= 1e-1
        assert c["ri"] in (1, 2, 3) and c["qri"] in (0, 5, 10, 15, 20) and 1 <= c["lri"] <= 99
        assert c["c"] in ("a", "b") and 0.1 <= c["nested"]["lr"] <= 0.2 and c["constant"] == 3
        assert isinstance(c["ri"], int) and isinstance(c["lri"], int)
    assert len({c["n"] for c in configs}) == 15
    assert searcher.set_search_properties("loss", "min", space) is False


def test_tpe_improves_on_random_and_max_mode_negates():
    searcher = HyperOptSearch(metric="score", mode="max", n_initial_points=8, random_state_seed=2)
    searcher.set_search_properties(None, None, SPACE)
    _, values = drive(searcher, lambda c: -quadratic(c), 40, metric="score")
    assert sorted(values[20:])[10] > sorted(values[:8])[4]  # TPE's median beats the random start's
    losses = searcher._hpopt_trials.losses()
    assert min(losses) == -max(values)


def test_same_seed_same_suggestions():
    def run():
        s = HyperOptSearch(metric="loss", mode="min", random_state_seed=7, n_initial_points=3)
        s.set_search_properties(None, None, SPACE)
        return drive(s, quadratic, 6)[0]
    assert run() == run()


def test_hyperopt_space_with_conditional_choice_and_points_to_evaluate():
    space = {"model": hp.choice("model", [{"name": "linear", "alpha": hp.loguniform("alpha", -5, 0)},
                                          {"name": "tree", "depth": hp.uniformint("depth", 2, 6)}]),
             "x": hp.uniform("x", 0, 1)}
    points = [{"model": {"name": "tree", "depth": 4}, "x": 0.5}]
    searcher = HyperOptSearch(space, metric="loss", mode="min", points_to_evaluate=points,
                              random_state_seed=0)
    configs, _ = drive(searcher, lambda c: c["x"], 8)
    assert configs[0] == {"model": {"name": "tree", "depth": 4}, "x": 0.5}
    for c in configs:
        assert set(c["model"]) in ({"name", "alpha"}, {"name", "depth"})


def test_tune_choice_of_dicts_is_a_conditional_space():
    space = {"opt": tune.choice([{"name": "sgd", "momentum": tune.uniform(0, 0.9)},
                                 {"name": "adam", "beta": tune.uniform(0.8, 0.99)}])}
    searcher = HyperOptSearch(metric="loss", mode="min", random_state_seed=1,
                              points_to_evaluate=[{"opt": {"name": "adam", "beta": 0.9}}])
    searcher.set_search_properties(None, None, space)
    configs, _ = drive(searcher, lambda c: 0.0, 8)
    assert configs[0] == {"opt": {"name": "adam", "beta": 0.9}}
    for c in configs:
        opt = c["opt"]
        assert (opt["name"], set(opt)) in (("sgd", {"name", "momentum"}), ("adam", {"name", "beta"}))


def test_points_to_evaluate_by_value_come_first_and_bad_points_are_named():
    points = [{"x": 3.0, "kind": "good"}, {"x": 1.0, "kind": "bad"}]
    searcher = HyperOptSearch(metric="loss", mode="min", points_to_evaluate=points, random_state_seed=0)
    searcher.set_search_properties(None, None, SPACE)
    assert drive(searcher, quadratic, 3)[0][:2] == points
    with pytest.raises(ValueError, match="'kind'.*'ugly'"):
        HyperOptSearch(metric="loss", mode="min", points_to_evaluate=[{"x": 1.0, "kind": "ugly"}]
                       ).set_search_properties(None, None, SPACE)
    with pytest.raises(ValueError, match=r"misses \['kind'\]"):
        HyperOptSearch(metric="loss", mode="min", points_to_evaluate=[{"x": 1.0}]
                       ).set_search_properties(None, None, SPACE)


def test_errored_and_unscored_trials_are_left_out_of_the_model():
    searcher = HyperOptSearch(metric="loss", mode="min", random_state_seed=0)
    searcher.set_search_properties(None, None, SPACE)
    searcher.suggest("a")
    searcher.on_trial_complete("a", None, error=True)
    searcher.suggest("b")
    searcher.on_trial_complete("b", {"other": 1.0})
    drive(searcher, quadratic, 2, first=2)
    trials = searcher._hpopt_trials  # hyperopt keeps only valid (not errored) trials in view
    assert [t["result"]["status"] for t in trials.trials] == ["ok", "ok"] and len(trials.losses()) == 2


def test_save_and_restore_continue_identically(tmp_path):
    searcher = HyperOptSearch(metric="loss", mode="min", random_state_seed=3, n_initial_points=2)
    searcher.set_search_properties(None, None, SPACE)
    drive(searcher, quadratic, 4)
    path = str(tmp_path / "hyperopt.pkl")
    searcher.save(path)
    expected = drive(searcher, quadratic, 3, first=4)[0]
    restored = HyperOptSearch()
    restored.restore(path)
    assert drive(restored, quadratic, 3, first=4)[0] == expected


def test_errors_name_the_problem():
    with pytest.raises(ValueError, match="'noise'.*Function|sample_from"):
        HyperOptSearch.convert_search_space({"noise": tune.sample_from(lambda _: 1)})
    with pytest.raises(ValueError, match="grid_search"):
        HyperOptSearch.convert_search_space({"g": tune.grid_search([1, 2])})
    with pytest.raises(RuntimeError, match="no search space"):
        HyperOptSearch(metric="loss", mode="min").suggest("t")
    with pytest.raises(RuntimeError, match="metric.*mode"):
        HyperOptSearch({"x": hp.uniform("x", 0, 1)}).suggest("t")
    with pytest.raises(ValueError, match="one metric"):
        HyperOptSearch(metric=["a", "b"], mode=["min", "max"])
