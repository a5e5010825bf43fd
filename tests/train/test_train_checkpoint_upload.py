"""Checkpoints that travel through raylite to storage local to the driver's node.

On a multi-node cluster a worker on another node cannot see a local storage_path of
the head; raylite then ships the files as bytes and the driver writes them. Here
RAYLITE_TRAIN_CHECKPOINT_UPLOAD=driver forces that path on one machine, and each
worker is made unable to write to storage itself, so the test proves the files
came through the driver (and that a restart gets its checkpoint the same way).
"""

from __future__ import annotations

import os
import sys
import tempfile

import cloudpickle
import pytest

from raylite import train
from raylite.train import (
    Checkpoint,
    DataParallelTrainer,
    FailureConfig,
    RunConfig,
    ScalingConfig,
)
from raylite.train._internal.env import CHECKPOINT_UPLOAD_ENV, checkpoint_upload_mode

pytestmark = pytest.mark.usefixtures("cluster")
cloudpickle.register_pickle_by_value(sys.modules[__name__])


def no_direct_write_loop(config):
    from raylite.train._internal import storage as storage_mod

    def refuse(self, local_dir, dir_name):
        raise FileNotFoundError(f"{self.storage_path} does not exist on this worker's node")

    storage_mod.StorageContext.persist_directory = refuse  # this worker "cannot see" storage
    rank = train.get_context().get_world_rank()
    start = 0
    ckpt = train.get_checkpoint()
    if ckpt is not None:
        assert not ckpt.path.startswith(config["storage"]), ckpt.path  # shipped, not read from storage
        with ckpt.as_directory() as d:
            start = int(open(os.path.join(d, "rank_0.txt")).read()) + 1
    for epoch in range(start, config["epochs"]):
        # rank 0 fails (its reports decide what the run commits; rank 1 may run ahead)
        if epoch == 1 and not os.path.exists(config["marker"]) and rank == 0:
            open(config["marker"], "w").close()
            raise RuntimeError("injected failure")
        with tempfile.TemporaryDirectory() as d:
            with open(os.path.join(d, f"rank_{rank}.txt"), "w") as f:
                f.write(str(epoch))
            train.report({"epoch": epoch, "start": start}, checkpoint=Checkpoint.from_directory(d))


def test_checkpoints_reach_local_storage_through_the_driver(tmp_path, monkeypatch, capsys):
    monkeypatch.setenv(CHECKPOINT_UPLOAD_ENV, "driver")
    storage = str(tmp_path / "results")
    result = DataParallelTrainer(
        no_direct_write_loop,
        train_loop_config={"epochs": 3, "storage": storage, "marker": str(tmp_path / "failed_once")},
        scaling_config=ScalingConfig(num_workers=2),
        run_config=RunConfig(
            storage_path=storage, name="shipped", verbose=1, failure_config=FailureConfig(max_failures=1)
        ),
    ).fit()
    assert list(result.metrics_dataframe["epoch"]) == [0, 1, 2]  # epoch 0, then resumed after it
    assert list(result.metrics_dataframe["start"]) == [0, 1, 1]
    with result.checkpoint.as_directory() as d:
        assert sorted(os.listdir(d)) == ["rank_0.txt", "rank_1.txt"]  # both ranks' files merged
        assert open(os.path.join(d, "rank_1.txt")).read() == "2"
    assert result.checkpoint.path.startswith(storage)
    assert "through the driver" in capsys.readouterr().out


def test_upload_mode_setting_is_validated():
    assert checkpoint_upload_mode({}) == "auto"
    assert checkpoint_upload_mode({CHECKPOINT_UPLOAD_ENV: "Driver"}) is True
    assert checkpoint_upload_mode({CHECKPOINT_UPLOAD_ENV: "direct"}) is False
    with pytest.raises(ValueError, match="auto, driver, direct"):
        checkpoint_upload_mode({CHECKPOINT_UPLOAD_ENV: "sometimes"})
