"""A driver SIGKILLed mid-run is continued with Tuner.restore: finished trials keep their
results, the interrupted one resumes from its last checkpoint; errored trials follow
resume_errored / restart_errored."""

import json
import os
import signal
import subprocess
import sys
import textwrap

import pytest

from raylite import tune
from tests.conftest import wait_for
from tests.tune._restore_trainable import counting

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

DRIVER = textwrap.dedent("""
    import sys
    import raylite
    from raylite import tune
    from tests.tune._restore_trainable import counting
    raylite.init(num_cpus=2)
    tune.Tuner(counting,
               param_space={"x": tune.grid_search([0, 1]), "release": sys.argv[2]},
               run_config=tune.RunConfig(storage_path=sys.argv[1], name="exp", verbose=0),
               tune_config=tune.TuneConfig(max_concurrent_trials=2)).fit()
""")


def _state(path):
    try:
        with open(os.path.join(path, "experiment_state.json")) as f:
            return json.load(f)["trials"]
    except (OSError, ValueError):
        return []


@pytest.mark.timeout(180)
def test_restore_after_the_driver_is_sigkilled(cluster, tmp_path):
    storage, release = str(tmp_path / "results"), str(tmp_path / "release")
    experiment = os.path.join(storage, "exp")
    env = dict(os.environ, PYTHONPATH=ROOT + os.pathsep + os.environ.get("PYTHONPATH", ""))
    log = open(tmp_path / "driver.log", "wb")
    driver = subprocess.Popen([sys.executable, "-c", DRIVER, storage, release], env=env,
                              cwd=ROOT, start_new_session=True, stdout=log, stderr=log)
    try:
        def interrupted_and_saved():
            trials = {t["config"]["x"]: t for t in _state(experiment)}
            return (trials.get(0, {}).get("status") == "TERMINATED"
                    and trials.get(1, {}).get("last_result", {}).get("step") == 2)

        wait_for(lambda: interrupted_and_saved() or driver.poll() is not None, timeout_s=120,
                 what="trial x=1 paused at step 2")
        assert driver.poll() is None, (tmp_path / "driver.log").read_text()
        os.killpg(driver.pid, signal.SIGKILL)
        driver.wait(timeout=30)
    finally:
        if driver.poll() is None:
            os.killpg(driver.pid, signal.SIGKILL)
    assert tune.Tuner.can_restore(experiment)
    open(release, "w").close()
    grid = tune.Tuner.restore(experiment, counting).fit()
    by_x = {r.config["x"]: r for r in grid}
    assert len(grid) == 2 and grid.num_errors == 0
    assert by_x[0].metrics["step"] == 4 and by_x[0].metrics["resumed_from"] == 0
    assert by_x[1].metrics["step"] == 4
    assert by_x[1].metrics["resumed_from"] == 4  # continued after step 2, not from scratch


def test_resume_or_restart_errored_trials(cluster, tmp_path):
    storage = str(tmp_path / "results")
    flag = tmp_path / "fail"
    flag.write_text("1")

    def sometimes_fails(config):
        step = 0
        if tune.get_checkpoint() is not None:
            with tune.get_checkpoint().as_directory() as d:
                step = int(open(os.path.join(d, "n")).read())
        while step < 3:
            step += 1
            d = tmp_path / f"ck-{step}-{os.urandom(3).hex()}"
            d.mkdir()
            (d / "n").write_text(str(step))
            tune.report({"step": step, "first": step if step == 1 else 0},
                        checkpoint=tune.Checkpoint.from_directory(str(d)))
            if step == 2 and flag.exists():
                raise RuntimeError("failing while the flag file exists")

    grid = tune.Tuner(sometimes_fails, run_config=tune.RunConfig(
        storage_path=storage, name="e", verbose=0)).fit()
    assert grid.num_errors == 1
    path = os.path.join(storage, "e")
    flag.unlink()
    kept = tune.Tuner.restore(path, sometimes_fails).fit()
    assert kept.num_errors == 1  # errored trials stay errored by default
    resumed = tune.Tuner.restore(path, sometimes_fails, resume_errored=True).fit()
    assert resumed.num_errors == 0 and resumed[0].metrics["step"] == 3
    assert [r["step"] for r in resumed[0].metrics_dataframe.to_dict("records")][-1] == 3
    restarted = tune.Tuner.restore(path, sometimes_fails, restart_errored=True).fit()
    assert list(restarted[0].metrics_dataframe["step"]) == [1, 2, 3]
