"""XGBoostTrainer and LightGBMTrainer on a real 2-worker cluster, checked against the
libraries' own single-process training on the same rows."""

from __future__ import annotations

import os
import sys

import cloudpickle
import numpy as np
import pandas as pd
import pytest

lightgbm = pytest.importorskip("lightgbm")
xgboost = pytest.importorskip("xgboost")

import raylite  # noqa: E402
from raylite import train  # noqa: E402
from raylite.train import DataConfig, FailureConfig, RunConfig, ScalingConfig  # noqa: E402

pytestmark = pytest.mark.usefixtures("cluster")
cloudpickle.register_pickle_by_value(sys.modules[__name__])

XGB_PARAMS = {"objective": "binary:logistic", "eval_metric": "logloss", "tree_method": "hist",
              "max_depth": 3, "seed": 0}
LGB_PARAMS = {"objective": "binary", "metric": "binary_logloss", "verbose": -1, "seed": 0,
              "num_leaves": 7, "min_data_in_leaf": 5}


def make_table(n: int, seed: int) -> pd.DataFrame:
    rng = np.random.default_rng(seed)
    x = rng.normal(size=(n, 4))
    df = pd.DataFrame(x, columns=["a", "b", "c", "d"])
    df["row"] = np.arange(n)
    df["y"] = ((x[:, 0] + 0.5 * x[:, 1] - 0.25 * x[:, 2] + 0.3 * rng.normal(size=n)) > 0).astype(int)
    return df


TRAIN, VALID = make_table(2000, 0), make_table(600, 1)
FEATURES = ["a", "b", "c", "d"]


def logloss(y: np.ndarray, p: np.ndarray) -> float:
    p = np.clip(p, 1e-12, 1 - 1e-12)
    return float(-np.mean(y * np.log(p) + (1 - y) * np.log(1 - p)))


def xgb_loop(config):
    from raylite.train.xgboost import RayTrainReportCallback

    shard = train.get_dataset_shard("train").materialize().to_pandas()
    valid = train.get_dataset_shard("validation").materialize().to_pandas()
    dtrain = xgboost.DMatrix(shard[FEATURES], label=shard["y"])
    dvalid = xgboost.DMatrix(valid[FEATURES], label=valid["y"])
    rank = train.get_context().get_world_rank()
    with open(os.path.join(config["out"], f"rank{rank}.txt"), "w") as f:
        f.write(f"{xgboost.collective.get_rank()} {xgboost.collective.get_world_size()}\n")
        f.write(" ".join(map(str, shard["row"].tolist())))
    xgboost.train(XGB_PARAMS, dtrain, num_boost_round=config["rounds"],
                  evals=[(dvalid, "validation")], verbose_eval=False,
                  callbacks=[RayTrainReportCallback(metrics={"loss": "validation-logloss"},
                                                    frequency=4)])


def test_xgboost_two_workers_grow_the_single_process_model(tmp_path):
    from raylite.train.xgboost import RayTrainReportCallback, XGBoostTrainer

    trainer = XGBoostTrainer(
        xgb_loop,
        train_loop_config={"out": str(tmp_path), "rounds": 10},
        datasets={"train": raylite.data.from_pandas(TRAIN),
                  "validation": raylite.data.from_pandas(VALID)},
        scaling_config=ScalingConfig(num_workers=2),
        run_config=RunConfig(storage_path=str(tmp_path / "runs"), name="xgb"),
    )
    result = trainer.fit()

    # each rank is XGBoost's rank of the same number in a world of two, and the two
    # shards split the training rows between them
    rows = []
    for rank in (0, 1):
        header, seen = (tmp_path / f"rank{rank}.txt").read_text().split("\n")
        assert header == f"{rank} 2"
        rows.append(set(map(int, seen.split())))
    assert not rows[0] & rows[1] and rows[0] | rows[1] == set(range(len(TRAIN)))

    # the model is the one single-process xgboost grows on all rows (hist histograms are
    # summed across ranks), so the validation loss matches
    booster = RayTrainReportCallback.get_model(result.checkpoint)
    assert booster.num_boosted_rounds() == 10
    single = xgboost.train(XGB_PARAMS, xgboost.DMatrix(TRAIN[FEATURES], label=TRAIN["y"]), 10)
    dvalid = xgboost.DMatrix(VALID[FEATURES])
    expected = logloss(VALID["y"].to_numpy(), single.predict(dvalid))
    assert result.metrics["loss"] == pytest.approx(expected, rel=1e-3)
    assert logloss(VALID["y"].to_numpy(), booster.predict(dvalid)) == pytest.approx(expected, rel=1e-3)
    # ten rounds' reports, then (as in Ray) one more carrying the final model; frequency=4
    # made rounds 4 and 8 checkpoints too
    assert result.metrics["training_iteration"] == 11
    kept = sorted(p.name for p in (tmp_path / "runs" / "xgb").iterdir() if p.name.startswith("checkpoint_"))
    assert kept == ["checkpoint_000003", "checkpoint_000007", "checkpoint_000010"]
    with pytest.warns(DeprecationWarning, match="RayTrainReportCallback.get_model"):
        again = XGBoostTrainer.get_model(result.checkpoint)
    assert again.num_boosted_rounds() == 10


def lgb_loop(config):
    from raylite.train.lightgbm import RayTrainReportCallback, get_network_params

    shard = train.get_dataset_shard("train").materialize().to_pandas()
    valid = train.get_dataset_shard("validation").materialize().to_pandas()
    network = get_network_params()
    rank = train.get_context().get_world_rank()
    with open(os.path.join(config["out"], f"net{rank}.txt"), "w") as f:
        f.write(repr(network))
    attempt_marker = os.path.join(config["out"], "failed_once")
    start_from = None
    checkpoint = train.get_checkpoint()
    if checkpoint is not None:
        start_from = RayTrainReportCallback.get_model(checkpoint)
    params = {**LGB_PARAMS, "tree_learner": "data_parallel", "pre_partition": True, **network}
    dtrain = lightgbm.Dataset(shard[FEATURES], label=shard["y"])
    dvalid = lightgbm.Dataset(valid[FEATURES], label=valid["y"], reference=dtrain)
    done = start_from.current_iteration() if start_from is not None else 0

    def fail_once(env):
        if config["fail_at"] is not None and env.iteration == config["fail_at"] and rank == 1 \
                and not os.path.exists(attempt_marker):
            open(attempt_marker, "w").close()
            raise RuntimeError("rank 1 fails once")

    lightgbm.train(params, dtrain, num_boost_round=config["rounds"] - done, init_model=start_from,
                   valid_sets=[dvalid], valid_names=["validation"],
                   callbacks=[RayTrainReportCallback(frequency=2), fail_once])


def test_lightgbm_network_and_restart_after_a_failure(tmp_path):
    from raylite.train.lightgbm import LightGBMTrainer, RayTrainReportCallback

    trainer = LightGBMTrainer(
        lgb_loop,
        train_loop_config={"out": str(tmp_path), "rounds": 8, "fail_at": 4},
        datasets={"train": raylite.data.from_pandas(TRAIN),
                  "validation": raylite.data.from_pandas(VALID)},
        scaling_config=ScalingConfig(num_workers=2),
        dataset_config=DataConfig(datasets_to_split=["train"]),  # each rank validates on all
        run_config=RunConfig(storage_path=str(tmp_path / "runs"), name="lgb",
                             failure_config=FailureConfig(max_failures=1)),
    )
    result = trainer.fit()
    assert (tmp_path / "failed_once").exists()  # the first attempt did fail

    # each rank listens on its own port and both know the whole two-machine list
    nets = [eval((tmp_path / f"net{r}.txt").read_text()) for r in (0, 1)]
    assert [n["num_machines"] for n in nets] == [2, 2]
    assert nets[0]["machines"] == nets[1]["machines"]
    machines = nets[0]["machines"].split(",")
    assert [m.rsplit(":", 1)[1] for m in machines] == [str(n["local_listen_port"]) for n in nets]

    # the second attempt resumed from the round-4 checkpoint and finished all 8 rounds;
    # the result is as good as single-process lightgbm's (histogram bins are found per
    # shard, so the trees differ slightly, not the loss)
    booster = RayTrainReportCallback.get_model(result.checkpoint)
    assert booster.current_iteration() == 8
    single = lightgbm.train(LGB_PARAMS, lightgbm.Dataset(TRAIN[FEATURES], label=TRAIN["y"]), 8)
    expected = logloss(VALID["y"].to_numpy(), single.predict(VALID[FEATURES]))
    got = logloss(VALID["y"].to_numpy(), booster.predict(VALID[FEATURES]))
    assert got == pytest.approx(expected, rel=0.03)
    assert result.metrics["validation-binary_logloss"] == pytest.approx(got, rel=1e-3)
    assert result.metrics["training_iteration"] == 9  # 5 rounds, 1 failed, 4 after the restart
