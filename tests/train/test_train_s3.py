"""Train with storage on s3:// against a real S3 API server (moto's; see tests/s3_server.py).

What the user's documents do: RunConfig(storage_path="s3://my-bucket/ray-results"), a run
that fails once and resumes from its S3 checkpoint, TorchTrainer.restore("s3://...") — and
the errors for a bucket that does not exist and credentials S3 refuses."""

from __future__ import annotations

import os
import sys
import tempfile

import cloudpickle
import pytest

import raylite
from raylite import train
from raylite.train import Checkpoint, CheckpointConfig, FailureConfig, RunConfig, ScalingConfig
from raylite.train.torch import TorchTrainer
from tests.cluster.conftest import make_cluster, wait_until  # noqa: F401 - make_cluster is a fixture
from tests.s3_server import start_s3_server

torch = pytest.importorskip("torch")
pytestmark = pytest.mark.timeout(240)
cloudpickle.register_pickle_by_value(sys.modules[__name__])

S3_CLUSTER_CPUS = 4


def counting_loop(config):
    """Reports epochs start..end-1 with a checkpoint each; fails once at `fail_at`."""
    import raylite.train.torch as rt

    rank = train.get_context().get_world_rank()
    model = rt.prepare_model(torch.nn.Linear(2, 1))
    start = 0
    ckpt = train.get_checkpoint()
    if ckpt is not None:
        with ckpt.as_directory() as d:
            start = int(open(os.path.join(d, "epoch.txt")).read()) + 1
    for epoch in range(start, config["end"]):
        if epoch == config.get("fail_at") and rank == 0 and not os.path.exists(config["marker"]):
            open(config["marker"], "w").close()
            raise RuntimeError("injected failure")
        model(torch.ones(1, 2)).sum().backward()
        with tempfile.TemporaryDirectory() as d:
            with open(os.path.join(d, "epoch.txt"), "w") as f:
                f.write(str(epoch))
            with open(os.path.join(d, f"rank_{rank}.txt"), "w") as f:
                f.write(str(raylite.get_runtime_context().get_node_id()))
            train.report({"epoch": epoch, "start": start}, checkpoint=Checkpoint.from_directory(d))


def _checkpoint_dirs(server, bucket: str, run: str) -> list[str]:
    return sorted({k.split("/")[2] for k in server.keys(bucket, f"results/{run}/") if k.count("/") >= 3})


def test_checkpoints_on_s3_keep_num_to_keep_and_a_failure_resumes_from_s3(s3_cluster, tmp_path):
    bucket = s3_cluster.make_bucket("train-results")
    result = TorchTrainer(
        counting_loop,
        train_loop_config={"end": 4, "fail_at": 2, "marker": str(tmp_path / "failed_once")},
        scaling_config=ScalingConfig(num_workers=2),
        run_config=RunConfig(storage_path=f"s3://{bucket}/results", name="run1", verbose=0,
                             checkpoint_config=CheckpointConfig(num_to_keep=2),
                             failure_config=FailureConfig(max_failures=1)),
    ).fit()
    assert result.error is None
    assert list(result.metrics_dataframe["epoch"]) == [0, 1, 2, 3]
    assert list(result.metrics_dataframe["start"]) == [0, 0, 2, 2]  # resumed from epoch 1's checkpoint
    assert result.path == f"s3://{bucket}/results/run1"
    # only the two newest checkpoints are left in the bucket; both ranks' files in each
    assert _checkpoint_dirs(s3_cluster, bucket, "run1") == ["checkpoint_000002", "checkpoint_000003"]
    keys = s3_cluster.keys(bucket, "results/run1/checkpoint_000003/")
    assert {k.rsplit("/", 1)[-1] for k in keys} >= {"epoch.txt", "rank_0.txt", "rank_1.txt"}
    assert "results/run1/run_state.json" in s3_cluster.keys(bucket, "results/run1/")
    assert str(result.checkpoint).endswith("checkpoint_000003)") and result.checkpoint._uri.startswith("s3://")
    with result.checkpoint.as_directory() as d:
        assert open(os.path.join(d, "epoch.txt")).read() == "3"

    # TorchTrainer.restore from the S3 URI continues from the newest kept checkpoint
    assert TorchTrainer.can_restore(f"s3://{bucket}/results/run1")
    restored = TorchTrainer.restore(f"s3://{bucket}/results/run1/", train_loop_config={"end": 6})
    again = restored.fit()
    assert list(again.metrics_dataframe["epoch"])[-2:] == [4, 5]
    assert list(again.metrics_dataframe["start"])[-2:] == [4, 4]
    assert _checkpoint_dirs(s3_cluster, bucket, "run1") == ["checkpoint_000004", "checkpoint_000005"]


def test_storage_filesystem_is_used_for_a_server_the_environment_does_not_name(s3_cluster):
    other = start_s3_server()
    try:
        other.make_bucket("elsewhere")
        result = TorchTrainer(
            counting_loop,
            train_loop_config={"end": 2},
            scaling_config=ScalingConfig(num_workers=1),
            run_config=RunConfig(storage_path="elsewhere/results", name="fs_run", verbose=0,
                                 storage_filesystem=other.arrow_filesystem()),  # Ray's type
        ).fit()
        assert list(result.metrics_dataframe["epoch"]) == [0, 1]
        assert "results/fs_run/checkpoint_000001/epoch.txt" in other.keys("elsewhere")
        with result.checkpoint.as_directory() as d:
            assert open(os.path.join(d, "epoch.txt")).read() == "1"
    finally:
        other.stop()


def test_missing_bucket_fails_before_any_worker_starts_naming_it(s3_cluster):
    trainer = TorchTrainer(counting_loop, train_loop_config={"end": 1}, scaling_config=ScalingConfig(num_workers=1),
                           run_config=RunConfig(storage_path="s3://no-such-bucket/ray-results", name="x"))
    with pytest.raises(OSError, match=r"S3 bucket 'no-such-bucket' does not exist.*aws s3 mb s3://no-such-bucket"):
        trainer.fit()


def test_refused_credentials_name_the_bucket_and_the_variables(s3_cluster, monkeypatch):
    locked = start_s3_server(check_credentials=True)
    try:
        monkeypatch.setenv("AWS_ENDPOINT_URL", locked.endpoint)  # the driver checks storage first
        trainer = TorchTrainer(counting_loop, train_loop_config={"end": 1},
                               scaling_config=ScalingConfig(num_workers=1),
                               run_config=RunConfig(storage_path="s3://locked-bucket/ray-results", name="x"))
        with pytest.raises(PermissionError, match=r"bucket 'locked-bucket'.*AWS_ACCESS_KEY_ID and "
                                                  r"AWS_SECRET_ACCESS_KEY.*storage_filesystem"):
            trainer.fit()
    finally:
        locked.stop()


@pytest.mark.slow
def test_two_nodes_write_one_runs_checkpoints_to_the_same_bucket(s3_env, make_cluster, tmp_path):  # noqa: F811
    if raylite.is_initialized():
        raylite.shutdown()
    bucket = s3_env.make_bucket("two-nodes")
    c = make_cluster()
    c.add_head(num_cpus=1)
    c.add_node(num_cpus=1)
    wait_until(lambda: len(c.alive_ids()) == 2, what="two alive nodes")
    raylite.init(address="auto")
    result = TorchTrainer(
        counting_loop,
        train_loop_config={"end": 3, "fail_at": 1, "marker": str(tmp_path / "failed_once")},
        scaling_config=ScalingConfig(num_workers=2, placement_strategy="STRICT_SPREAD"),
        run_config=RunConfig(storage_path=f"s3://{bucket}/results", name="spread", verbose=0,
                             failure_config=FailureConfig(max_failures=1)),
    ).fit()
    assert list(result.metrics_dataframe["epoch"]) == [0, 1, 2]
    assert list(result.metrics_dataframe["start"]) == [0, 1, 1]  # resumed from S3 after the failure
    with result.checkpoint.as_directory() as d:
        nodes = {open(os.path.join(d, f"rank_{r}.txt")).read() for r in (0, 1)}
    assert len(nodes) == 2  # each rank wrote from its own node into the same S3 checkpoint
    for index in range(3):
        names = {k.rsplit("/", 1)[-1] for k in s3_env.keys(bucket, f"results/spread/checkpoint_00000{index}/")}
        assert {"rank_0.txt", "rank_1.txt"} <= names
