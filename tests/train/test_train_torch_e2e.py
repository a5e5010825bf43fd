"""TorchTrainer on a real local cluster: DDP over gloo, checkpoints, failures, restore."""

from __future__ import annotations

import json
import os
import sys
import tempfile

import cloudpickle
import pytest
import torch

from raylite import train
from raylite.train import (
    Checkpoint,
    CheckpointConfig,
    FailureConfig,
    RunConfig,
    ScalingConfig,
    TrainingFailedError,
)
from raylite.train.error import TrainingResourcesError
from raylite.train.torch import TorchTrainer

pytestmark = pytest.mark.usefixtures("cluster")
# Workers cannot import this test module by name: ship its functions by value.
cloudpickle.register_pickle_by_value(sys.modules[__name__])


def ddp_loop(config):
    """Linear regression with DDP; every rank saves what it saw and its final weights."""
    import raylite.train.torch as rt

    torch.manual_seed(0)
    n = 256
    x = torch.randn(n, 4)
    y = x @ torch.tensor([[1.0], [-2.0], [0.5], [3.0]])
    ids = torch.arange(n)
    loader = torch.utils.data.DataLoader(
        torch.utils.data.TensorDataset(x, y, ids), batch_size=16, shuffle=True
    )
    loader = rt.prepare_data_loader(loader)
    model = rt.prepare_model(torch.nn.Linear(4, 1))
    opt = torch.optim.SGD(model.parameters(), lr=0.05)
    ctx = train.get_context()
    seen = []
    for epoch in range(config["epochs"]):
        loader.sampler.set_epoch(epoch)
        total = 0.0
        for xb, yb, idb in loader:
            if epoch == 0:
                seen.extend(idb.tolist())
            loss = torch.nn.functional.mse_loss(model(xb), yb)
            opt.zero_grad()
            loss.backward()
            opt.step()
            total += loss.item()
        train.report({"loss": total / len(loader), "epoch": epoch, "rank": ctx.get_world_rank()})
    with tempfile.TemporaryDirectory() as d:
        with open(os.path.join(d, f"seen_{ctx.get_world_rank()}.json"), "w") as f:
            json.dump(seen, f)
        torch.save(model.module.state_dict(), os.path.join(d, f"weights_{ctx.get_world_rank()}.pt"))
        train.report({"done": True}, checkpoint=Checkpoint.from_directory(d))


def test_ddp_trains_on_disjoint_shards_with_identical_weights(tmp_path):
    result = TorchTrainer(
        ddp_loop,
        train_loop_config={"epochs": 4},
        scaling_config=ScalingConfig(num_workers=2),
        run_config=RunConfig(storage_path=str(tmp_path), name="ddp", verbose=0),
    ).fit()
    df = result.metrics_dataframe
    losses = list(df["loss"].dropna())
    assert len(losses) == 4 and losses[-1] < losses[0] * 0.5
    assert set(df["rank"].dropna()) == {0}
    with result.checkpoint.as_directory() as d:
        seen0 = json.load(open(os.path.join(d, "seen_0.json")))
        seen1 = json.load(open(os.path.join(d, "seen_1.json")))
        w0 = torch.load(os.path.join(d, "weights_0.pt"))
        w1 = torch.load(os.path.join(d, "weights_1.pt"))
    assert not set(seen0) & set(seen1)
    assert sorted(seen0 + seen1) == list(range(256))
    for key in w0:
        assert torch.equal(w0[key], w1[key])


def rank0_checkpoint_loop(config):
    """The user's documents' pattern: only rank 0 reports, with a checkpoint."""
    import raylite.train.torch as rt

    model = rt.prepare_model(torch.nn.Linear(2, 1))
    start = 0
    ckpt = train.get_checkpoint()
    if ckpt:
        with ckpt.as_directory() as d:
            state = torch.load(os.path.join(d, "checkpoint.pt"))
        model.load_state_dict(state["model"])
        start = state["epoch"] + 1
    marker = config.get("fail_marker")
    for epoch in range(start, config["epochs"]):
        if marker and epoch == config["fail_at"] and not os.path.exists(marker):
            if train.get_context().get_world_rank() == config.get("fail_rank", 1):
                open(marker, "w").close()
                if config.get("hard"):
                    os._exit(1)
                raise RuntimeError("injected failure")
        x = torch.ones(4, 2)
        loss = model(x).sum()
        loss.backward()  # DDP's all-reduce: no rank gets past an epoch its peer never reached
        if train.get_context().get_world_rank() == 0:
            with tempfile.TemporaryDirectory() as d:
                torch.save({"model": model.state_dict(), "epoch": epoch}, os.path.join(d, "checkpoint.pt"))
                train.report(
                    {"val_loss": config["losses"][epoch], "epoch": epoch, "start": start},
                    checkpoint=Checkpoint.from_directory(d),
                )


@pytest.mark.parametrize(
    "hard",
    [True, pytest.param(False, marks=pytest.mark.slow)],
    ids=["process-dies", "exception"],
)
def test_worker_failure_restarts_from_latest_checkpoint(tmp_path, hard):
    config = {
        "epochs": 4,
        "losses": [1.0] * 4,
        "fail_marker": str(tmp_path / "failed_once"),
        "fail_at": 2,
        "hard": hard,
    }
    result = TorchTrainer(
        rank0_checkpoint_loop,
        train_loop_config=config,
        scaling_config=ScalingConfig(num_workers=2),
        run_config=RunConfig(
            storage_path=str(tmp_path), name="ft", verbose=0, failure_config=FailureConfig(max_failures=1)
        ),
    ).fit()
    df = result.metrics_dataframe
    assert os.path.exists(config["fail_marker"])
    assert list(df["epoch"]) == [0, 1, 2, 3]
    assert list(df["start"]) == [0, 0, 2, 2]  # the second attempt resumed after epoch 1
    assert result.checkpoint.path.endswith("checkpoint_000003")


def test_exception_after_max_failures_names_rank_and_traceback(tmp_path):
    def loop():
        if train.get_context().get_world_rank() == 1:
            raise ValueError("shape mismatch in batch 3")
        train.report({"ok": 1})

    trainer = TorchTrainer(
        loop,
        scaling_config=ScalingConfig(num_workers=2),
        run_config=RunConfig(storage_path=str(tmp_path), name="err", verbose=0),
    )
    with pytest.raises(TrainingFailedError) as info:
        trainer.fit()
    err = info.value
    assert err.rank == 1 and "rank 1" in str(err)
    assert "shape mismatch in batch 3" in str(err) and "in loop" in err.traceback_str
    assert isinstance(err.__cause__, ValueError)


def test_restore_resumes_a_failed_run_keeping_the_best_checkpoints(tmp_path):
    """Rank 0 alone reports; num_to_keep=2 by min val_loss; the run dies at epoch 3 and
    TorchTrainer.restore(path) finishes it from the latest kept checkpoint."""
    config = {
        "epochs": 5,
        "losses": [0.9, 0.3, 0.7, 0.2, 0.8],
        "fail_marker": str(tmp_path / "failed_once"),
        "fail_at": 3,
        "fail_rank": 0,
    }
    run_config = RunConfig(
        storage_path=str(tmp_path),
        name="resume",
        verbose=0,
        checkpoint_config=CheckpointConfig(
            num_to_keep=2, checkpoint_score_attribute="val_loss", checkpoint_score_order="min"
        ),
    )
    trainer = TorchTrainer(
        rank0_checkpoint_loop,
        train_loop_config=config,
        scaling_config=ScalingConfig(num_workers=2),
        run_config=run_config,
    )
    with pytest.raises(TrainingFailedError, match="injected failure"):
        trainer.fit()
    path = str(tmp_path / "resume")
    kept = sorted(p for p in os.listdir(path) if p.startswith("checkpoint_"))
    assert kept == ["checkpoint_000001", "checkpoint_000002"]
    assert TorchTrainer.can_restore(path)
    assert not TorchTrainer.can_restore(str(tmp_path / "nothing"))

    result = TorchTrainer.restore(path).fit()
    df = result.metrics_dataframe
    assert list(df["epoch"]) == [0, 1, 2, 3, 4]
    assert list(df["start"]) == [0, 0, 0, 3, 3]
    kept = sorted(p for p in os.listdir(path) if p.startswith("checkpoint_"))
    assert kept == ["checkpoint_000001", "checkpoint_000003"]
    assert [m["val_loss"] for _, m in result.best_checkpoints] == [0.2, 0.3]
    assert result.path == path and result.metrics["epoch"] == 4


def test_too_many_workers_is_a_clear_error_not_a_hang(tmp_path):
    trainer = TorchTrainer(
        lambda: None,
        scaling_config=ScalingConfig(num_workers=9),
        run_config=RunConfig(storage_path=str(tmp_path), name="big", verbose=0),
    )
    # raised by the check against the cluster's resources before anything starts (the
    # message carries the cluster's figures), not by a timeout
    with pytest.raises(TrainingResourcesError) as info:
        trainer.fit()
    msg = str(info.value)
    assert "9 workers" in msg and "{CPU: 9}" in msg and "at most 4" in msg


def test_gpu_request_on_cpu_cluster_is_a_clear_error(tmp_path):
    trainer = TorchTrainer(
        lambda: None,
        scaling_config=ScalingConfig(num_workers=1, use_gpu=True),
        run_config=RunConfig(storage_path=str(tmp_path), name="gpu", verbose=0),
    )
    with pytest.raises(TrainingResourcesError, match="no GPUs"):
        trainer.fit()


def test_unwritable_storage_fails_before_workers_start(tmp_path):
    blocker = tmp_path / "a_file"
    blocker.write_text("not a directory")
    started = []

    def loop():
        started.append(1)

    trainer = TorchTrainer(
        loop,
        scaling_config=ScalingConfig(num_workers=2),
        run_config=RunConfig(storage_path=str(blocker), name="x", verbose=0),
    )
    with pytest.raises(OSError, match="not writable"):
        trainer.fit()


def test_unpicklable_loop_is_a_clear_error_before_workers_start(tmp_path):
    import threading

    lock = threading.Lock()

    def loop():
        with lock:
            pass

    trainer = TorchTrainer(
        loop,
        scaling_config=ScalingConfig(num_workers=2),
        run_config=RunConfig(storage_path=str(tmp_path), name="pickle", verbose=0),
    )
    with pytest.raises(TypeError, match="must be picklable"):
        trainer.fit()


@pytest.mark.slow
def test_fsdp_shards_parameters_on_cpu(tmp_path):
    def loop():
        import raylite.train.torch as rt

        model = torch.nn.Sequential(torch.nn.Linear(8, 8), torch.nn.Linear(8, 1))
        full = sum(p.numel() for p in model.parameters())
        model = rt.prepare_model(model, parallel_strategy="fsdp")
        local = sum(p.to_local().numel() for p in model.parameters())
        opt = torch.optim.SGD(model.parameters(), lr=0.1)
        for _ in range(3):
            loss = model(torch.ones(4, 8)).pow(2).mean()
            opt.zero_grad()
            loss.backward()
            opt.step()
            train.report({"loss": loss.item(), "full": full, "local": local})

    result = TorchTrainer(
        loop,
        scaling_config=ScalingConfig(num_workers=2),
        run_config=RunConfig(storage_path=str(tmp_path), name="fsdp", verbose=0),
    ).fit()
    df = result.metrics_dataframe
    assert df["local"].iloc[0] < df["full"].iloc[0]
    assert df["loss"].iloc[-1] < df["loss"].iloc[0]
