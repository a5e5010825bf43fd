"""The Tuner on a real local cluster: expansion counts, reports, checkpoints, resources,
errors and the result objects."""

import os

import pytest

from raylite import train, tune
from raylite.tune import Checkpoint


def _quiet(storage, **kwargs):
    return tune.RunConfig(storage_path=storage, verbose=0, **kwargs)


def test_grid_times_samples_runs_every_trial_with_reports(cluster, storage):
    def trainable(config):
        for step in range(3):
            tune.report({"score": config["a"] * 10 + step})

    grid = tune.Tuner(
        trainable,
        param_space={"a": tune.grid_search([1, 2]), "noise": tune.uniform(0, 1)},
        tune_config=tune.TuneConfig(metric="score", mode="max", num_samples=2),
        run_config=_quiet(storage),
    ).fit()
    assert len(grid) == 4 and grid.num_errors == 0 and grid.num_terminated == 4
    assert sorted(r.config["a"] for r in grid) == [1, 1, 2, 2]
    best = grid.get_best_result()
    assert best.config["a"] == 2 and best.metrics["score"] == 22
    assert best.metrics["training_iteration"] == 3
    assert list(best.metrics_dataframe["score"]) == [20, 21, 22]
    df = grid.get_dataframe()
    assert len(df) == 4 and "config/a" in df.columns
    assert os.path.exists(os.path.join(best.path, "result.json"))
    assert os.path.exists(os.path.join(best.path, "progress.csv"))


def test_checkpoints_are_persisted_and_returned(cluster, storage, tmp_path):
    def trainable(config):
        for step in range(2):
            d = tmp_path / f"{tune.get_context().get_trial_id()}-{step}"
            d.mkdir()
            (d / "state.txt").write_text(str(step))
            tune.report({"step": step}, checkpoint=Checkpoint.from_directory(str(d)))

    result = tune.Tuner(trainable, run_config=_quiet(storage)).fit()[0]
    assert result.checkpoint is not None
    with result.checkpoint.as_directory() as d:
        assert open(os.path.join(d, "state.txt")).read() == "1"
    assert result.checkpoint.path.startswith(result.path)


def test_returned_dict_is_the_final_result_and_train_report_works(cluster, storage):
    def old_style(config):
        train.report({"x": 1})
        return {"x": config["v"]}

    grid = tune.Tuner(old_style, param_space={"v": tune.grid_search([5, 7])},
                      run_config=_quiet(storage)).fit()
    assert sorted(r.metrics["x"] for r in grid) == [5, 7]


def test_with_parameters_and_resources(cluster, storage):
    data = list(range(1000))

    def trainable(config, data=None):
        tune.report({"total": sum(data), "cpus": tune.get_context().get_trial_resources()
                     .required_resources.get("CPU")})

    wrapped = tune.with_resources(tune.with_parameters(trainable, data=data), {"cpu": 2})
    result = tune.Tuner(wrapped, run_config=_quiet(storage)).fit()[0]
    assert result.metrics["total"] == sum(data) and result.metrics["cpus"] == 2


def test_max_concurrent_trials_limits_running_trials(cluster, storage):
    class Watch(tune.Callback):
        def __init__(self):
            self.most = 0

        def on_trial_result(self, iteration, trials, trial, result, **info):
            self.most = max(self.most, sum(t.status == "RUNNING" for t in trials))

    watch = Watch()

    def trainable(config):
        for _ in range(3):
            tune.report({"v": 1})

    tune.Tuner(trainable, tune_config=tune.TuneConfig(num_samples=4, max_concurrent_trials=1),
               run_config=_quiet(storage, callbacks=[watch])).fit()
    assert watch.most == 1


def test_trial_errors_are_in_the_grid_and_retries_resume_from_checkpoint(cluster, storage,
                                                                         tmp_path):
    def flaky(config):
        start = 0
        checkpoint = tune.get_checkpoint()
        if checkpoint is not None:
            with checkpoint.as_directory() as d:
                start = int(open(os.path.join(d, "n")).read()) + 1
        for step in range(start, 3):
            d = tmp_path / f"c{step}-{os.getpid()}-{start}"
            d.mkdir()
            (d / "n").write_text(str(step))
            tune.report({"step": step, "start": start},
                        checkpoint=Checkpoint.from_directory(str(d)))
            if step == 1 and start == 0:
                raise RuntimeError("boom at step 1")

    grid = tune.Tuner(flaky, run_config=_quiet(
        storage, failure_config=tune.FailureConfig(max_failures=1))).fit()
    assert grid.num_errors == 0
    assert grid[0].metrics["step"] == 2 and grid[0].metrics["start"] == 2

    grid = tune.Tuner(flaky, run_config=_quiet(storage, name="nofail")).fit()
    assert grid.num_errors == 1 and "boom at step 1" in str(grid.errors[0])


def test_unknown_metric_is_a_clear_error(cluster, storage):
    def trainable(config):
        tune.report({"loss": 1.0})

    with pytest.raises(ValueError, match="accuracy"):
        tune.Tuner(trainable, tune_config=tune.TuneConfig(metric="accuracy", mode="max"),
                   run_config=_quiet(storage)).fit()


def test_a_trial_bigger_than_the_cluster_names_the_resources(cluster, storage):
    def trainable(config):
        tune.report({"x": 1})

    with pytest.raises(RuntimeError, match="CPU"):
        tune.Tuner(tune.with_resources(trainable, {"cpu": 64}),
                   run_config=_quiet(storage)).fit()


def test_stop_dict_and_class_trainable(cluster, storage):
    class Counter(tune.Trainable):
        def setup(self, config):
            self.n = config["start"]

        def step(self):
            self.n += 1
            return {"n": self.n}

    grid = tune.Tuner(Counter, param_space={"start": tune.grid_search([0, 100])},
                      run_config=_quiet(storage, stop={"training_iteration": 3})).fit()
    assert sorted(r.metrics["n"] for r in grid) == [3, 103]


def test_tune_run_returns_an_analysis(cluster, storage):
    def trainable(config):
        tune.report({"score": config["x"]})

    analysis = tune.run(trainable, config={"x": tune.grid_search([1, 3, 2])}, metric="score",
                        mode="max", storage_path=storage, verbose=0)
    assert analysis.best_config == {"x": 3}
    assert len(analysis.results_df) == 3


def test_mode_and_searcher_space_errors():
    with pytest.raises(ValueError, match="mode"):
        tune.TuneConfig(metric="x", mode="maximize")
    with pytest.raises(TypeError, match="trainable"):
        tune.Tuner(None)


def test_air_session_report_inside_a_trial(cluster, storage):
    from raylite.air import session

    def trainable(config):
        session.report({"trial": session.get_trial_id(), "v": 3})

    result = tune.Tuner(trainable, run_config=_quiet(storage)).fit()[0]
    assert result.metrics["v"] == 3 and result.metrics["trial"] == result.metrics["trial_id"]


def test_ray_names_resolve_to_raylite_tune():
    import ray
    import ray.tune
    from ray import air
    from ray import tune as ray_tune
    from ray.tune.schedulers import ASHAScheduler as RayASHA
    from ray.tune.search import BasicVariantGenerator, ConcurrencyLimiter, Searcher  # noqa: F401

    import raylite.tune
    from raylite.tune.schedulers import ASHAScheduler

    assert ray_tune is raylite.tune and ray.tune is raylite.tune and RayASHA is ASHAScheduler
    assert air.RunConfig is tune.RunConfig and tune.Checkpoint is train.Checkpoint


def test_trial_name_creator_names_each_trial(cluster, storage):
    def named(config):
        tune.report({"name": tune.get_context().get_trial_name()})

    grid = tune.Tuner(named, param_space={"lr": tune.grid_search([0.1, 0.01])},
                      tune_config=tune.TuneConfig(trial_name_creator=lambda t: f"lr={t.config['lr']}"),
                      run_config=train.RunConfig(storage_path=storage, name="names")).fit()
    assert sorted(r.metrics["name"] for r in grid) == ["lr=0.01", "lr=0.1"]
    # the directories keep Ray's default names: only the trial's name changes
    assert all(os.path.basename(r.path).startswith("named_") for r in grid)


def _five_checkpoints(config):
    import tempfile

    for step, score in enumerate([1, 5, 2, 4, 3]):
        with tempfile.TemporaryDirectory() as d:
            with open(os.path.join(d, "step"), "w") as f:
                f.write(str(step))
            tune.report({"score": score, "step": step}, checkpoint=Checkpoint.from_directory(d))


@pytest.mark.parametrize("attribute, kept_steps", [(None, [3, 4]), ("score", [1, 3, 4])])
def test_num_to_keep_removes_the_other_checkpoints_from_storage(cluster, storage, attribute, kept_steps):
    """The best `num_to_keep` by the score attribute stay (the newest without one), and always
    the latest, as in Ray; the others' directories are gone."""
    config = train.CheckpointConfig(num_to_keep=2, checkpoint_score_attribute=attribute)
    grid = tune.Tuner(_five_checkpoints, run_config=train.RunConfig(
        storage_path=storage, name="keep", checkpoint_config=config)).fit()
    (result,) = list(grid)
    on_disk = sorted(int(open(os.path.join(result.path, d, "step")).read())
                     for d in os.listdir(result.path) if d.startswith("checkpoint_"))
    assert on_disk == kept_steps
    assert sorted(metrics["step"] for _, metrics in result.best_checkpoints) == kept_steps
    assert result.checkpoint.path.endswith("checkpoint_000004")
