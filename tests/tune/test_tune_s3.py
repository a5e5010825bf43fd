"""Tune with storage on s3:// against a real S3 API server (moto's; tests/s3_server.py): the
experiment's state and every trial's checkpoints land in the bucket, and Tuner.restore picks
the experiment up from there (finished trials keep their results; none runs again)."""

from __future__ import annotations

import sys

import cloudpickle
import pytest

from raylite import train, tune
from raylite.train import Checkpoint

pytestmark = pytest.mark.timeout(240)
cloudpickle.register_pickle_by_value(sys.modules[__name__])



def trainable(config):
    import json
    import os
    import tempfile

    start = 0
    checkpoint = tune.get_checkpoint()
    if checkpoint is not None:
        with checkpoint.as_directory() as d, open(os.path.join(d, "state.json")) as f:
            start = json.load(f)["step"] + 1
    for step in range(start, 3):
        with tempfile.TemporaryDirectory() as d:
            with open(os.path.join(d, "state.json"), "w") as f:
                json.dump({"step": step, "x": config["x"]}, f)
            tune.report({"score": config["x"] * (step + 1), "step": step},
                        checkpoint=Checkpoint.from_directory(d))


def test_experiment_and_checkpoints_live_in_the_bucket_and_restore_from_there(s3_cluster):
    server = s3_cluster
    bucket = server.make_bucket("tune-results")
    storage = f"s3://{bucket}/results"
    grid = tune.Tuner(trainable, param_space={"x": tune.grid_search([1, 2])},
                      tune_config=tune.TuneConfig(metric="score", mode="max"),
                      run_config=train.RunConfig(storage_path=storage, name="exp")).fit()
    assert not grid.errors and len(grid) == 2
    best = grid.get_best_result()
    assert best.metrics["score"] == 6 and best.config == {"x": 2}
    # as in Ray: the checkpoint's path is inside its (S3) filesystem, without the scheme
    assert best.checkpoint.path.startswith(f"{bucket}/results/exp/trainable_")
    assert best.checkpoint.path.endswith("/checkpoint_000002")
    with best.checkpoint.as_directory() as d, open(f"{d}/state.json") as f:
        assert f.read() == '{"step": 2, "x": 2}'
    keys = server.keys(bucket, "results/exp/")
    assert any(k.endswith("state.json") for k in keys)  # every trial's checkpoints are in S3
    assert len({k for k in keys if "/checkpoint_" in k}) >= 6

    assert tune.Tuner.can_restore(f"{storage}/exp")
    restored = tune.Tuner.restore(f"{storage}/exp", trainable).fit()
    assert sorted(r.metrics["score"] for r in restored) == [3, 6]
    assert all(r.metrics["training_iteration"] == 3 for r in restored)  # nothing ran again
