"""RunConfig on a real cluster: callbacks, progress lines (verbose), ignored checkpoint options."""

from __future__ import annotations

import re
import sys

import cloudpickle
import pytest

from raylite import train
from raylite.train import (
    CheckpointConfig,
    DataParallelTrainer,
    RunConfig,
    ScalingConfig,
    UserCallback,
)

pytestmark = pytest.mark.usefixtures("cluster")
cloudpickle.register_pickle_by_value(sys.modules[__name__])


def epochs_loop(config):
    for epoch in range(config["epochs"]):
        train.report({"loss": 1.0 / (epoch + 1), "epoch": epoch})


class LossLog(UserCallback):
    def __init__(self):
        self.losses = []

    def after_report(self, run_context, metrics, checkpoint):
        self.losses.append(metrics[0]["loss"])


def _fit(tmp_path, name, **run_kwargs):
    return DataParallelTrainer(
        epochs_loop,
        train_loop_config={"epochs": 3},
        scaling_config=ScalingConfig(num_workers=2),
        run_config=RunConfig(storage_path=str(tmp_path), name=name, **run_kwargs),
    ).fit()


def test_callback_and_progress_line_per_report(tmp_path, capsys):
    log = LossLog()
    result = _fit(tmp_path, "cb", callbacks=[log], verbose=1)
    assert log.losses == [1.0, 0.5, pytest.approx(1 / 3)]
    assert result.metrics["epoch"] == 2
    lines = capsys.readouterr().out.splitlines()
    reports = [line for line in lines if re.search(r"iter \d+ \(.*s\)\s+.*loss=", line)]
    # train_loop_config's "epochs" gives the total: the epoch shows as progress, not as a metric
    assert len(reports) == 3 and "epoch 3/3 100%" in reports[-1], reports
    assert any("finished after 3 report(s)" in line for line in lines)


def test_verbose_0_prints_nothing(tmp_path, capsys):
    _fit(tmp_path, "quiet", verbose=0)
    assert "DataParallelTrainer" not in capsys.readouterr().out


def test_checkpoint_frequency_is_accepted_with_a_warning(tmp_path):
    with pytest.warns(UserWarning, match="checkpoint_frequency=2.*has no effect"):
        result = _fit(tmp_path, "freq", verbose=0, checkpoint_config=CheckpointConfig(checkpoint_frequency=2))
    assert result.metrics["epoch"] == 2


def test_unpicklable_callback_still_runs_and_restore_warns(tmp_path):
    import threading

    class Locked(LossLog):
        def __init__(self):
            super().__init__()
            self.lock = threading.Lock()  # cannot be pickled into trainer.pkl

    log = Locked()
    with pytest.warns(UserWarning, match="cannot be saved for restore"):
        _fit(tmp_path, "locked", callbacks=[log], verbose=0)
    assert len(log.losses) == 3
