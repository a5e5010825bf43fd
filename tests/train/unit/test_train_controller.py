"""The controller driven through the in-process worker group (real sessions and storage)."""

import json
import os
import tempfile
import threading

import pytest
from train_fakes import ThreadWorkerGroup

from raylite import train
from raylite.train import Checkpoint, CheckpointConfig, FailureConfig, TrainingFailedError
from raylite.train._internal.controller import RunSpec, TrainController
from raylite.train._internal.state import RunState
from raylite.train._internal.storage import STATE_FILE, StorageContext


def run(fn, tmp_path, n=2, config=None, ckpt=None, failure=None, prior=None, ship=False, name="run"):
    storage = StorageContext.create(str(tmp_path), name)
    storage.validate_writable()
    spec = RunSpec(
        "TorchTrainer",
        fn,
        config,
        n,
        storage,
        ckpt or CheckpointConfig(),
        failure or FailureConfig(),
        verbose=0,
        ship_checkpoints=ship,
        poll_timeout_s=0.2,
        metadata={"owner": "tests"},
    )
    ctrl = TrainController(spec, lambda: ThreadWorkerGroup(n), prior=prior)
    return ctrl, ctrl.run()


def save(data):
    d = tempfile.mkdtemp()
    with open(os.path.join(d, "state.json"), "w") as f:
        json.dump(data, f)
    return Checkpoint.from_directory(d)


def load(ckpt):
    with ckpt.as_directory() as d:
        with open(os.path.join(d, "state.json")) as f:
            return json.load(f)


def test_metric_only_reports_reach_result(tmp_path):
    seen = []

    def loop(config):
        ctx = train.get_context()
        seen.append((ctx.get_world_rank(), ctx.get_world_size(), ctx.get_metadata()))
        for epoch in range(config["epochs"]):
            train.report({"loss": 1.0 / (epoch + 1), "epoch": epoch, "rank": ctx.get_world_rank()})

    ctrl, result = run(loop, tmp_path, config={"epochs": 3})
    assert sorted(s[:2] for s in seen) == [(0, 2), (1, 2)]
    assert seen[0][2] == {"owner": "tests"}
    assert result.error is None and result.checkpoint is None
    assert result.metrics["epoch"] == 2 and result.metrics["rank"] == 0
    assert result.metrics["training_iteration"] == 3
    df = result.metrics_dataframe
    assert list(df["epoch"]) == [0, 1, 2] and set(df["rank"]) == {0}
    assert result.path == str(tmp_path / "run")
    state = json.loads(open(tmp_path / "run" / STATE_FILE).read())
    assert state["status"] == "FINISHED" and len(state["history"]) == 3


def test_loop_without_argument_and_rank0_only_checkpoints(tmp_path):
    def loop():
        rank = train.get_context().get_world_rank()
        for epoch in range(3):
            if rank == 0:
                train.report({"loss": 0.0, "epoch": epoch}, checkpoint=save({"epoch": epoch}))

    _, result = run(loop, tmp_path)
    assert [m["epoch"] for _, m in result.best_checkpoints] == [2, 1, 0]
    assert load(result.checkpoint) == {"epoch": 2}
    assert sorted(os.listdir(tmp_path / "run")) == [
        "checkpoint_000000",
        "checkpoint_000001",
        "checkpoint_000002",
        STATE_FILE,
    ]


def test_files_from_all_ranks_merge_into_one_folder(tmp_path):
    def loop():
        rank = train.get_context().get_world_rank()
        d = tempfile.mkdtemp()
        open(os.path.join(d, f"shard_{rank}.pt"), "w").write(str(rank))
        train.report({"x": rank}, checkpoint=Checkpoint.from_directory(d))

    _, result = run(loop, tmp_path, n=3)
    with result.checkpoint.as_directory() as d:
        assert sorted(os.listdir(d)) == ["shard_0.pt", "shard_1.pt", "shard_2.pt"]
    assert result.metrics["x"] == 0


def test_num_to_keep_by_score_and_dict_checkpoints(tmp_path):
    losses = [0.9, 0.4, 0.8, 0.2, 0.5]

    def loop():
        for epoch, loss in enumerate(losses):
            ckpt = Checkpoint.from_dict({"epoch": epoch})
            train.report({"val_loss": loss, "epoch": epoch}, checkpoint=ckpt)
            assert not os.path.exists(ckpt.path)  # from_dict's temp dir is cleaned up

    cfg = CheckpointConfig(num_to_keep=2, checkpoint_score_attribute="val_loss", checkpoint_score_order="min")
    _, result = run(loop, tmp_path, ckpt=cfg)
    kept = sorted(p for p in os.listdir(tmp_path / "run") if p.startswith("checkpoint_"))
    assert kept == ["checkpoint_000001", "checkpoint_000003"]
    assert [m["val_loss"] for _, m in result.best_checkpoints] == [0.2, 0.4]
    assert result.best_checkpoints[0][0].to_dict() == {"epoch": 3}
    assert result.checkpoint.to_dict() == {"epoch": 3}  # latest kept
    assert len(result.metrics_dataframe) == 5


def test_failure_restarts_from_latest_checkpoint(tmp_path):
    attempts = []
    # Stand-in for DDP's lock-step: ranks meet after every epoch, one barrier per attempt.
    barriers = {False: threading.Barrier(2), True: threading.Barrier(2)}

    def loop(config):
        rank = train.get_context().get_world_rank()
        start = 0
        ckpt = train.get_checkpoint()
        if ckpt:
            start = load(ckpt)["epoch"] + 1
        if rank == 0:
            attempts.append(start)
        barrier = barriers[ckpt is not None]
        for epoch in range(start, 4):
            if epoch == 2 and rank == 1 and ckpt is None:
                barrier.abort()  # like a collective failing on the other ranks
                raise RuntimeError("injected failure")
            barrier.wait(timeout=30)
            train.report({"epoch": epoch}, checkpoint=save({"epoch": epoch}))
            barrier.wait(timeout=30)

    ctrl, result = run(loop, tmp_path, failure=FailureConfig(max_failures=1))
    assert attempts == [0, 2]
    assert result.error is None and result.metrics["epoch"] == 3
    assert [m["epoch"] for m in result.metrics_dataframe.to_dict("records")][-2:] == [2, 3]
    assert load(result.checkpoint) == {"epoch": 3}
    assert ctrl.state.failures == 1 and ctrl.attempt == 2
    assert all(g.shut_down for g in ThreadWorkerGroup.instances[-2:])


def test_failures_exhausted_raise_with_rank_and_traceback(tmp_path):
    def loop():
        if train.get_context().get_world_rank() == 1:
            raise ValueError("bad batch shape")
        train.report({"ok": 1})

    ctrl, result = run(loop, tmp_path, failure=FailureConfig(max_failures=1))
    err = ctrl.error
    assert isinstance(err, TrainingFailedError) and err.rank == 1
    assert "bad batch shape" in str(err) and "rank 1" in str(err)
    assert "Traceback" in err.traceback_str and "loop" in err.traceback_str
    assert isinstance(err.__cause__, ValueError)
    assert ctrl.attempt == 2 and result.error is err
    state = json.loads(open(tmp_path / "run" / STATE_FILE).read())
    assert state["status"] == "ERRORED" and "bad batch shape" in state["error"]


def test_restore_state_continues_numbering_and_history(tmp_path):
    def loop():
        ckpt = train.get_checkpoint()
        start = load(ckpt)["epoch"] + 1 if ckpt else 0
        for epoch in range(start, start + 2):
            train.report({"epoch": epoch}, checkpoint=save({"epoch": epoch}))

    _, first = run(loop, tmp_path, n=1)
    prior = RunState.from_json((tmp_path / "run" / STATE_FILE).read_bytes())
    _, second = run(loop, tmp_path, n=1, prior=prior)
    assert list(second.metrics_dataframe["epoch"]) == [0, 1, 2, 3]
    assert list(second.metrics_dataframe["training_iteration"]) == [1, 2, 3, 4]
    assert load(second.checkpoint) == {"epoch": 3}
    assert second.checkpoint.path.endswith("checkpoint_000003")


def test_shipped_checkpoints_go_through_the_driver(tmp_path):
    def loop():
        ckpt = train.get_checkpoint()
        start = load(ckpt)["epoch"] + 1 if ckpt else 0
        train.report({"epoch": start}, checkpoint=save({"epoch": start}))

    _, first = run(loop, tmp_path, n=2, ship=True)
    assert load(first.checkpoint) == {"epoch": 0}
    prior = RunState.from_json((tmp_path / "run" / STATE_FILE).read_bytes())
    _, second = run(loop, tmp_path, n=2, ship=True, prior=prior)
    assert load(second.checkpoint) == {"epoch": 1}


def test_get_dataset_shard_unknown_name(tmp_path):
    def loop():
        train.get_dataset_shard("train")

    ctrl, _ = run(loop, tmp_path, n=1)
    assert "no dataset of that name" in str(ctrl.error)


def test_session_functions_outside_a_run():
    with pytest.raises(RuntimeError, match="inside a training loop"):
        train.report({"x": 1})
    assert train.get_checkpoint() is None


def test_result_from_path_and_large_shipped_checkpoint_warning(tmp_path, monkeypatch):
    from raylite.train import Result
    from raylite.train._internal import controller as controller_mod

    def loop():
        for loss in (0.5, 0.1, 0.3):
            train.report({"loss": loss}, checkpoint=save({"loss": loss}))

    monkeypatch.setattr(controller_mod, "SHIP_WARN_BYTES", 1)
    with pytest.warns(UserWarning, match="through the driver"):
        _, result = run(loop, tmp_path, n=1, ship=True, ckpt=CheckpointConfig(2, "loss", "min"))
    again = Result.from_path(str(tmp_path / "run"))
    assert again.metrics == result.metrics
    assert [m["loss"] for _, m in again.best_checkpoints] == [0.1, 0.3]
    assert load(again.checkpoint) == {"loss": 0.3}
    assert list(again.metrics_dataframe["loss"]) == [0.5, 0.1, 0.3]


def test_facades_are_lazy_and_honest():
    import subprocess
    import sys

    code = "import sys, raylite.train; assert 'torch' not in sys.modules, 'train imported torch'"
    subprocess.run([sys.executable, "-c", code], check=True)
    import raylite.train as t
    import raylite.train.torch as tt

    for mod in (t, tt):
        assert sorted(mod.__all__) == sorted(set(mod.__all__))
        for name in mod.__all__:
            assert getattr(mod, name) is not None
