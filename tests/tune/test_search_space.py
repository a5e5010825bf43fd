"""Search spaces, the default grid/random expansion and the Searcher wrappers, without a cluster."""

import numpy as np
import pytest

from raylite import tune
from raylite.tune.search import BasicVariantGenerator, ConcurrencyLimiter, Repeater, Searcher
from raylite.tune.search.sample import Categorical, Float, Integer, LogUniform, Quantized
from raylite.tune.search.search_generator import SearchGenerator
from raylite.tune.search.variant_generator import generate_variants, parse_spec_vars
from raylite.tune.utils import flatten_dict, unflatten_dict


def _all_configs(alg, n=1000):
    out = []
    for i in range(n):
        got = alg.next_config(f"t{i}")
        if got is None:
            break
        out.append(got.config)
    return out


def test_domains_draw_within_their_bounds():
    rng = np.random.default_rng(0)
    assert all(2 <= tune.uniform(2, 3).sample(random_state=rng) <= 3 for _ in range(50))
    ints = tune.randint(0, 3).sample(size=200, random_state=rng)
    assert set(ints) == {0, 1, 2}  # upper bound exclusive
    q = tune.qrandint(0, 10, 5).sample(size=200, random_state=rng)
    assert set(q) <= {0, 5, 10}
    logs = tune.loguniform(1e-4, 1e-1).sample(size=200, random_state=rng)
    assert min(logs) >= 1e-4 and max(logs) <= 1e-1 and np.median(logs) < 0.01
    assert tune.choice(["a", 1, None]).sample(random_state=1) in ("a", 1, None)
    assert isinstance(tune.quniform(0, 1, 0.25).sample(random_state=rng), float)


def test_domain_classes_expose_what_searchers_translate():
    d = tune.qloguniform(1, 100, 1)
    assert isinstance(d, Float) and (d.lower, d.upper) == (1, 100)
    sampler = d.get_sampler()
    assert isinstance(sampler, Quantized) and isinstance(sampler.get_sampler(), LogUniform)
    assert isinstance(tune.lograndint(1, 8), Integer)
    assert tune.choice([1, 2]).categories == [1, 2] and isinstance(tune.choice([1]), Categorical)


def test_bad_bounds_are_refused_with_the_reason():
    with pytest.raises(ValueError, match="log-uniform"):
        tune.loguniform(0, 1)
    with pytest.raises(ValueError, match="multiple of"):
        tune.quniform(0.1, 1, 0.25)
    with pytest.raises(ValueError, match="one sampler"):
        Float(0, 1).uniform().set_sampler(LogUniform())


def test_grid_times_samples_expansion_counts():
    space = {"a": tune.grid_search([1, 2]), "b": {"c": tune.grid_search(["x", "y", "z"])},
             "lr": tune.uniform(0, 1)}
    alg = BasicVariantGenerator()
    alg.add_configurations({"config": space, "num_samples": 3})
    configs = _all_configs(alg)
    assert len(configs) == alg.total_samples == 18
    assert {(c["a"], c["b"]["c"]) for c in configs} == {(a, c) for a in (1, 2) for c in "xyz"}
    assert alg.is_finished()


def test_points_to_evaluate_come_first_and_use_up_samples():
    alg = BasicVariantGenerator(points_to_evaluate=[{"lr": 0.5}])
    alg.add_configurations({"config": {"lr": tune.uniform(0, 0.1)}, "num_samples": 3})
    configs = _all_configs(alg)
    assert len(configs) == 3 and configs[0]["lr"] == 0.5
    assert all(c["lr"] <= 0.1 for c in configs[1:])


def test_sample_from_sees_resolved_values_in_both_spellings():
    space = {"a": tune.grid_search([1, 10]),
             "b": tune.sample_from(lambda spec: spec.config.a * 2),
             "c": tune.sample_from(lambda config: config["b"] + 1)}
    got = [spec for _, spec in generate_variants(space)]
    assert [(s["a"], s["b"], s["c"]) for s in got] == [(1, 2, 3), (10, 20, 21)]


def test_max_concurrent_holds_back_until_a_trial_completes():
    alg = BasicVariantGenerator(max_concurrent=1)
    alg.add_configurations({"config": {"x": tune.grid_search([1, 2])}, "num_samples": 1})
    assert alg.next_config("t0") is not None and alg.next_config("t1") is None
    alg.on_trial_complete("t0")
    assert alg.next_config("t1").config == {"x": 2}


def test_parse_spec_vars_and_flattening_for_searchers():
    space = {"opt": {"lr": tune.loguniform(1e-3, 1), "name": "adam"}, "g": tune.grid_search([1])}
    resolved, domains, grids = parse_spec_vars(space)
    assert resolved == [(("opt", "name"), "adam")]
    assert [p for p, _ in domains] == [("opt", "lr")] and [p for p, _ in grids] == [("g",)]
    flat = flatten_dict({"a": {"b": 1, "c": {"d": 2}}})
    assert flat == {"a/b": 1, "a/c/d": 2} and unflatten_dict(flat) == {"a": {"b": 1, "c": {"d": 2}}}


class _Counting(Searcher):
    def __init__(self):
        super().__init__(metric="m", mode="max")
        self.n = 0
        self.completed = {}

    def suggest(self, trial_id):
        self.n += 1
        return {"x": self.n} if self.n <= 4 else Searcher.FINISHED

    def on_trial_complete(self, trial_id, result=None, error=False):
        self.completed[trial_id] = result


def test_concurrency_limiter_caps_live_suggestions():
    limiter = ConcurrencyLimiter(_Counting(), max_concurrent=2)
    assert limiter.suggest("a") == {"x": 1} and limiter.suggest("b") == {"x": 2}
    assert limiter.suggest("c") is None
    limiter.on_trial_complete("a", {"m": 1})
    assert limiter.suggest("c") == {"x": 3}
    with pytest.raises(ValueError):
        ConcurrencyLimiter(_Counting(), max_concurrent=0)


def test_repeater_reports_the_group_mean():
    inner = _Counting()
    rep = Repeater(inner, repeat=2)
    first, second = rep.suggest("a"), rep.suggest("b")
    assert first == {"x": 1, "__trial_index__": 0} and second == {"x": 1, "__trial_index__": 1}
    rep.on_trial_complete("a", {"m": 1.0})
    assert inner.completed == {}
    rep.on_trial_complete("b", {"m": 3.0})
    assert inner.completed == {"a": {"m": 2.0}}


def test_search_generator_stops_at_num_samples_or_finished():
    gen = SearchGenerator(_Counting())
    gen.add_configurations({"config": {"fixed": 1}, "num_samples": -1})
    configs = _all_configs(gen)
    assert [c["x"] for c in configs] == [1, 2, 3, 4] and all(c["fixed"] == 1 for c in configs)
    assert gen.is_finished()
    gen2 = SearchGenerator(_Counting())
    gen2.add_configurations({"config": {}, "num_samples": 2})
    assert len(_all_configs(gen2)) == 2
