"""TorchTrainer across two real node processes on loopback (tests/cluster's fixtures).

The rank on the second node does not use the storage path, which is local to the
driver's (head) node: its checkpoint files reach storage through raylite, and the
run resumes from them. Here both nodes share one filesystem, so the worker is made
unable to write storage itself, as it would be on a real second machine.
"""

from __future__ import annotations

import os
import sys
import tempfile

import cloudpickle
import pytest

import raylite
from raylite import train
from raylite.train import Checkpoint, FailureConfig, RunConfig, ScalingConfig
from raylite.train.torch import TorchTrainer
from tests.cluster.conftest import make_cluster, wait_until  # noqa: F401 - make_cluster is a fixture

torch = pytest.importorskip("torch")
cloudpickle.register_pickle_by_value(sys.modules[__name__])


def two_node_loop(config):
    import raylite.train.torch as rt
    from raylite.train._internal import storage as storage_mod

    node = raylite.get_runtime_context().get_node_id()
    remote = node != config["head_node"]
    if remote:
        def refuse(self, local_dir, dir_name):
            raise FileNotFoundError(f"{self.storage_path} does not exist on node {node[:8]}")

        storage_mod.StorageContext.persist_directory = refuse
    rank = train.get_context().get_world_rank()
    model = rt.prepare_model(torch.nn.Linear(2, 1))
    start = 0
    ckpt = train.get_checkpoint()
    if ckpt is not None:
        with ckpt.as_directory() as d:
            start = int(open(os.path.join(d, "rank_0.txt")).read()) + 1
    for epoch in range(start, 3):
        if epoch == 1 and rank == 0 and not os.path.exists(config["marker"]):
            open(config["marker"], "w").close()
            raise RuntimeError("injected failure")
        model(torch.ones(1, 2)).sum().backward()  # DDP all-reduce across the two nodes
        with tempfile.TemporaryDirectory() as d:
            with open(os.path.join(d, f"rank_{rank}.txt"), "w") as f:
                f.write(str(epoch))
            with open(os.path.join(d, f"node_rank_{rank}.txt"), "w") as f:
                f.write(f"{train.get_context().get_node_rank()} {int(remote)}")
            train.report({"epoch": epoch, "start": start}, checkpoint=Checkpoint.from_directory(d))


@pytest.mark.slow
def test_checkpoints_from_a_second_node_reach_head_local_storage(make_cluster, tmp_path, capsys):  # noqa: F811
    c = make_cluster()
    c.add_head(num_cpus=1)
    c.add_node(num_cpus=1)
    wait_until(lambda: len(c.alive_ids()) == 2, what="two alive nodes")
    raylite.init(address="auto")
    storage = str(tmp_path / "results")
    result = TorchTrainer(
        two_node_loop,
        train_loop_config={"head_node": raylite.get_runtime_context().get_node_id(),
                           "marker": str(tmp_path / "failed_once")},
        scaling_config=ScalingConfig(num_workers=2, placement_strategy="STRICT_SPREAD"),
        run_config=RunConfig(storage_path=storage, name="two_nodes", verbose=1,
                             failure_config=FailureConfig(max_failures=1)),
    ).fit()
    assert list(result.metrics_dataframe["epoch"]) == [0, 1, 2]
    assert list(result.metrics_dataframe["start"]) == [0, 1, 1]  # resumed from epoch 0's checkpoint
    with result.checkpoint.as_directory() as d:
        files = sorted(os.listdir(d))
        assert files == ["node_rank_0.txt", "node_rank_1.txt", "rank_0.txt", "rank_1.txt"]
        placed = [open(os.path.join(d, f"node_rank_{r}.txt")).read().split() for r in (0, 1)]
    # one rank per node (node ranks 0 and 1), one of them on the node that could not write storage
    assert sorted(p[0] for p in placed) == ["0", "1"] and sorted(p[1] for p in placed) == ["0", "1"]
    assert "through the driver" in capsys.readouterr().out
