"""TorchTrainer(datasets=...) with raylite.data: each worker streams its own shard."""

from __future__ import annotations

import json
import os
import sys
import tempfile

import cloudpickle
import pytest

from raylite import train
from raylite.train import Checkpoint, DataConfig, RunConfig, ScalingConfig
from raylite.train.torch import TorchTrainer

rdata = pytest.importorskip("raylite.data", reason="raylite.data is not importable yet")
pytestmark = pytest.mark.usefixtures("cluster")
cloudpickle.register_pickle_by_value(sys.modules[__name__])


def shard_loop(config):
    ctx = train.get_context()
    shard = train.get_dataset_shard("train")
    val = train.get_dataset_shard("val")
    epochs = []
    loader = shard.iter_torch_batches(batch_size=16)  # built once, looped per epoch (seed T.5.2)
    for _ in range(config["epochs"]):
        ids = []
        for batch in loader:
            assert batch["x"].dtype.is_floating_point
            assert batch["pair"].shape == (len(batch["id"]), 2)  # list column -> 2-d tensor
            ids += batch["id"].tolist()
        epochs.append(ids)
    val_ids = [row["id"] for row in val.iter_rows()]
    with tempfile.TemporaryDirectory() as d:
        with open(os.path.join(d, f"rank_{ctx.get_world_rank()}.json"), "w") as f:
            json.dump({"epochs": epochs, "val": val_ids}, f)
        train.report({"rows": len(epochs[0])}, checkpoint=Checkpoint.from_directory(d))


def test_streaming_split_gives_disjoint_shards_every_epoch(tmp_path):
    ds = rdata.range(200).map_batches(
        lambda b: {"id": b["id"], "x": b["id"] * 0.5, "pair": [[i, -i] for i in b["id"]]}
    )
    val = rdata.range(10)
    result = TorchTrainer(
        shard_loop,
        train_loop_config={"epochs": 3},
        scaling_config=ScalingConfig(num_workers=2),
        datasets={"train": ds, "val": val},
        dataset_config=DataConfig(datasets_to_split=["train"]),
        run_config=RunConfig(storage_path=str(tmp_path), name="data", verbose=0),
    ).fit()
    with result.checkpoint.as_directory() as d:
        r0 = json.load(open(os.path.join(d, "rank_0.json")))
        r1 = json.load(open(os.path.join(d, "rank_1.json")))
    assert len(r0["epochs"]) == len(r1["epochs"]) == 3
    for epoch in range(3):
        a, b = r0["epochs"][epoch], r1["epochs"][epoch]
        assert not set(a) & set(b)
        assert sorted(a + b) == list(range(200))
        assert len(a) == len(b) == 100  # equal=True
    assert sorted(r0["val"]) == sorted(r1["val"]) == list(range(10))  # not split
