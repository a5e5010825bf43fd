"""Schedulers on a real cluster: ASHA stops the bad trials early; PBT's exploit copies a good
trial's checkpoint into a bad one and continues it with mutated hyperparameters."""

import json
import os
import time

from raylite import tune
from raylite.tune import Checkpoint
from raylite.tune.schedulers import ASHAScheduler, PopulationBasedTraining


def test_asha_stops_bad_trials_early(cluster, storage):
    def trainable(config):
        for step in range(1, 10):
            tune.report({"acc": config["quality"] * step})

    grid = tune.Tuner(
        trainable,
        param_space={"quality": tune.grid_search([8, 7, 6, 5, 4, 3, 2, 1])},
        tune_config=tune.TuneConfig(metric="acc", mode="max", max_concurrent_trials=1,
                                    scheduler=ASHAScheduler(max_t=9, grace_period=1,
                                                            reduction_factor=2)),
        run_config=tune.RunConfig(storage_path=storage, verbose=0),
    ).fit()
    iters = {r.config["quality"]: r.metrics["training_iteration"] for r in grid}
    assert iters[8] == 9
    assert all(iters[q] < 9 for q in (1, 2, 3, 4))
    assert grid.get_best_result().config["quality"] == 8


def test_pbt_copies_a_good_trials_checkpoint(cluster, storage, tmp_path):
    def trainable(config):
        # both trials must run side by side for one to exploit the other: meet first
        (tmp_path / f"started-{tune.get_context().get_trial_id()}").touch()
        deadline = time.monotonic() + 60
        while len(list(tmp_path.glob("started-*"))) < 2 and time.monotonic() < deadline:
            time.sleep(0.01)
        value, step = 0.0, 0
        checkpoint = tune.get_checkpoint()
        if checkpoint is not None:
            with checkpoint.as_directory() as d:
                state = json.load(open(os.path.join(d, "state.json")))
            value, step = state["value"], state["step"]
            with open(tmp_path / f"restored-{tune.get_context().get_trial_id()}", "a") as f:
                f.write(f"{value}\n")  # what this trial resumed from (its own or a donor's)
        me = tune.get_context().get_trial_id()

        def others_step() -> int:  # how far the other trial got (0 before its first step)
            return max([int(f.name.split("-")[-1]) for f in tmp_path.glob("at-*") if f"at-{me}-" not in f.name],
                       default=0)

        while step < 8:
            step += 1
            # lockstep: PBT compares the trials at each perturbation interval, so neither may
            # finish before the other reaches it (under load one raced through all 8 steps)
            while others_step() < step - 1 and time.monotonic() < deadline + 60:
                time.sleep(0.01)
            (tmp_path / f"at-{me}-{step}").touch()
            value += config["lr"]
            d = tmp_path / f"{tune.get_context().get_trial_id()}-{step}-{os.urandom(4).hex()}"
            d.mkdir()
            json.dump({"value": value, "step": step}, open(d / "state.json", "w"))
            tune.report({"value": value, "step": step},
                        checkpoint=Checkpoint.from_directory(str(d)))

    pbt = PopulationBasedTraining(time_attr="training_iteration", perturbation_interval=2,
                                  hyperparam_mutations={"lr": [0.0, 1.0]},
                                  quantile_fraction=0.5, resample_probability=0.0)
    grid = tune.Tuner(
        trainable,
        param_space={"lr": tune.grid_search([0.0, 1.0])},
        tune_config=tune.TuneConfig(metric="value", mode="max", scheduler=pbt),
        run_config=tune.RunConfig(storage_path=storage, verbose=0),
    ).fit()
    assert grid.num_errors == 0
    assert pbt.exploits, "the bad trial never exploited the good one"
    bad_id, good_id = pbt.exploits[0]
    # lr 0.0 alone never gains value: the trial resumed from the good trial's state, which had
    restored = (tmp_path / f"restored-{bad_id}").read_text().split()
    assert float(restored[0]) > 0
