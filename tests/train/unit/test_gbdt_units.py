"""The GBDT integrations' pieces that need no cluster: argument checks, the callbacks'
metric handling, network parameters and the checkpoint classes."""

from __future__ import annotations

from types import SimpleNamespace

import numpy as np
import pytest

lightgbm = pytest.importorskip("lightgbm")
xgboost = pytest.importorskip("xgboost")

from raylite.train import lightgbm as rlgb  # noqa: E402
from raylite.train import xgboost as rxgb  # noqa: E402
from raylite.train._internal.gbdt import flatten_metrics  # noqa: E402
from raylite.train._internal.messages import RankInfo, WorkerMetadata  # noqa: E402
from raylite.train.lightgbm.config import network_params_for  # noqa: E402


def loop():
    pass


@pytest.mark.parametrize("trainer", [rxgb.XGBoostTrainer, rlgb.LightGBMTrainer])
def test_the_legacy_arguments_are_refused_with_the_rewrite(trainer):
    with pytest.raises(DeprecationWarning, match="label_column=..., params=...") as info:
        trainer(loop, label_column="y", params={"objective": "binary"})
    assert "train_loop_per_worker" in str(info.value)
    with pytest.raises(NotImplementedError, match="validation_config"):
        trainer(loop, validation_config=object())


def test_backend_configs_check_their_arguments():
    assert rxgb.XGBoostConfig().to_dict() == {"xgboost_communicator": "rabit"}
    with pytest.raises(NotImplementedError, match="'rabit'"):
        rxgb.XGBoostConfig("nccl")
    with pytest.raises(TypeError, match="XGBoostConfig"):
        rxgb.XGBoostTrainer(loop, xgboost_config=rlgb.LightGBMConfig())


def test_network_params_list_every_rank_in_rank_order():
    peers = (WorkerMetadata("n1", "10.0.0.1", "h", 1, 5001), WorkerMetadata("n2", "10.0.0.2", "h", 2, 5002))
    spec = SimpleNamespace(rank=RankInfo(1, 0, 1, 2, 1), peers=peers)
    assert network_params_for(spec) == {
        "num_machines": 2, "local_listen_port": 5002, "machines": "10.0.0.1:5001,10.0.0.2:5002"}
    with pytest.warns(UserWarning, match="outside the training loop"):
        assert rlgb.get_network_params() == {}


def test_metrics_are_flattened_picked_and_renamed():
    log = {"train": {"logloss": [0.5, 0.4]}, "validation": {"logloss": [0.6, 0.45], "error": [0.2, 0.1]}}
    assert flatten_metrics(log)["validation-error"] == [0.2, 0.1]
    cb = rxgb.RayTrainReportCallback(metrics={"loss": "validation-logloss"})
    assert cb._report_dict(log) == {"loss": 0.45}
    cb = rxgb.RayTrainReportCallback(metrics="validation-error",
                                     results_postprocessing_fn=lambda d: {k: d[k] * 100 for k in d})
    assert cb._report_dict(log) == {"validation-error": 10.0}
    with pytest.raises(KeyError, match="'eval-auc'.*did not log"):
        rxgb.RayTrainReportCallback(metrics="eval-auc")._report_dict(log)
    with pytest.raises(ValueError, match="frequency=-1"):
        rlgb.RayTrainReportCallback(frequency=-1)
    env = SimpleNamespace(evaluation_result_list=[("valid", "auc", 0.9, True, 0.01)])
    assert rlgb.RayTrainReportCallback._eval_result(env) == {"valid": {"auc-mean": 0.9, "auc-stdv": 0.01}}


def test_checkpoint_classes_hold_the_model(tmp_path):
    rng = np.random.default_rng(0)
    x, y = rng.normal(size=(200, 3)), rng.integers(0, 2, 200)
    xgb = xgboost.train({"objective": "binary:logistic"}, xgboost.DMatrix(x, label=y), 3)
    ckpt = rxgb.XGBoostCheckpoint.from_model(xgb, path=tmp_path / "x", preprocessor={"scale": 2})
    assert isinstance(ckpt, rxgb.XGBoostCheckpoint)
    assert np.allclose(ckpt.get_model().predict(xgboost.DMatrix(x)), xgb.predict(xgboost.DMatrix(x)))
    assert ckpt.get_preprocessor() == {"scale": 2}
    lgb = lightgbm.train({"objective": "binary", "verbose": -1}, lightgbm.Dataset(x, label=y), 3)
    ckpt = rlgb.LightGBMCheckpoint.from_model(lgb, path=tmp_path / "l")
    assert np.allclose(ckpt.get_model().predict(x), lgb.predict(x))
    assert ckpt.get_preprocessor() is None
    with pytest.raises(FileNotFoundError, match="model.ubj"):
        rxgb.RayTrainReportCallback.get_model(ckpt)
