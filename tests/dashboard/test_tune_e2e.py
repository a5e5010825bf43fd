"""A small Tuner on a live cluster, read back over HTTP from /api/dashboard/tune with the
cluster token: the experiment, its trials, their configs, metrics and chart history."""

from __future__ import annotations

import httpx
import pytest

from raylite import tune

SCRIPT_VALUE = "<script>window.__xss = 1</script>"


def objective(config):
    for step in range(1, 5):
        tune.report({"score": config["x"] * step, "phase": "train"})


@pytest.fixture(scope="module")
def experiment(dashboard, tmp_path_factory):
    grid = tune.Tuner(
        objective, param_space={"x": tune.grid_search([1, 2, 3]), "label": SCRIPT_VALUE},
        tune_config=tune.TuneConfig(metric="score", mode="max"),
        run_config=tune.RunConfig(name="dash_tune_e2e", storage_path=str(tmp_path_factory.mktemp("tune")),
                                  verbose=0)).fit()
    assert len(grid) == 3 and not grid.errors
    return grid


def test_the_finished_experiment_is_served_with_its_trials(dashboard, experiment):
    r = dashboard.get("/api/dashboard/tune")
    assert r.status_code == 200, r.text
    exp = next(e for e in r.json() if e["name"] == "dash_tune_e2e")
    assert (exp["status"], exp["metric"], exp["mode"]) == ("FINISHED", "score", "max")
    assert (exp["scheduler"], exp["searcher"]) == ("FIFOScheduler", "BasicVariantGenerator")
    assert exp["storage_path"].endswith("dash_tune_e2e") and exp["num_trials"] == 3
    assert exp["trial_counts"] == {"TERMINATED": 3}
    trials = sorted(exp["trials"], key=lambda t: t["config"]["x"])
    assert [t["config"] for t in trials] == [{"x": x, "label": SCRIPT_VALUE} for x in (1, 2, 3)]
    assert [t["iterations"] for t in trials] == [4, 4, 4]
    assert trials[2]["metrics"] == {"score": 12, "phase": "train"} and trials[2]["best"] == 12
    assert trials[0]["history"] == [[1, 1], [2, 2], [3, 3], [4, 4]]
    assert exp["best"] == {"trial_id": trials[2]["trial_id"], "value": 12}
    best = experiment.get_best_result()
    assert best.config["x"] == 3  # the dashboard names the trial Tune itself calls best


def test_one_experiment_by_name_a_summary_without_trials_and_the_overview(dashboard, experiment):
    [one] = dashboard.get("/api/dashboard/tune", params={"name": "dash_tune_e2e"}).json()
    assert len(one["trials"]) == 3
    assert dashboard.get("/api/dashboard/tune", params={"name": "no_such_experiment"}).json() == []
    summary = dashboard.get("/api/dashboard/tune", params={"trials": "0"}).json()
    assert all("trials" not in e for e in summary) and "dash_tune_e2e" in [e["name"] for e in summary]
    overview = dashboard.get("/api/dashboard/overview").json()
    row = next(e for e in overview["tune"] if e["name"] == "dash_tune_e2e")
    assert row["status"] == "FINISHED" and row["num_trials"] == 3 and row["best"]["value"] == 12


def test_the_tune_feed_needs_the_token(dashboard, experiment):
    assert httpx.get(dashboard.url + "/api/dashboard/tune", timeout=30).status_code == 401
    wrong = {"Authorization": "Bearer " + "0" * len(dashboard.token)}
    assert httpx.get(dashboard.url + "/api/dashboard/tune", headers=wrong, timeout=30).status_code == 401


def _fails_for_two(config):
    if config["x"] == 2:
        raise ValueError("x=2 is not allowed here")
    tune.report({"score": config["x"]})


def _experiment(dashboard, name):
    [exp] = dashboard.get("/api/dashboard/tune", params={"name": name}).json()
    return exp


def test_a_failed_trial_shows_its_error_line_and_a_failed_experiment_ends_in_error(dashboard, tmp_path):
    storage = str(tmp_path)
    grid = tune.Tuner(_fails_for_two, param_space={"x": tune.grid_search([1, 2])},
                      run_config=tune.RunConfig(name="dash_tune_trial_error", storage_path=storage,
                                                verbose=0)).fit()
    assert len(grid.errors) == 1
    exp = _experiment(dashboard, "dash_tune_trial_error")
    assert exp["status"] == "FINISHED" and exp["trial_counts"] == {"TERMINATED": 1, "ERROR": 1}
    failed = next(t for t in exp["trials"] if t["status"] == "ERROR")
    assert failed["error"] == "ValueError: x=2 is not allowed here"
    with pytest.raises(ValueError, match="without the metric"):
        tune.Tuner(objective, tune_config=tune.TuneConfig(metric="loss", mode="min"),
                   param_space={"x": 1, "label": ""},
                   run_config=tune.RunConfig(name="dash_tune_error", storage_path=storage, verbose=0)).fit()
    exp = _experiment(dashboard, "dash_tune_error")
    assert exp["status"] == "ERROR" and exp["error"].startswith("MetricNotReportedError: Trial")


class _Interrupt(tune.Callback):
    def on_trial_result(self, **info):
        raise KeyboardInterrupt


def test_an_interrupted_experiment_says_so(dashboard, tmp_path):
    with pytest.raises(KeyboardInterrupt):
        tune.Tuner(objective, param_space={"x": 1, "label": ""},
                   run_config=tune.RunConfig(name="dash_tune_interrupted", storage_path=str(tmp_path),
                                             verbose=0, callbacks=[_Interrupt()])).fit()
    assert _experiment(dashboard, "dash_tune_interrupted")["status"] == "INTERRUPTED"
