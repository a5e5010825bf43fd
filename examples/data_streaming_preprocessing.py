"""Seed sample "Ray Data: Streaming Preprocessing", run on raylite.

The user's code is unchanged except for the imports (``raylite`` for ``ray``),
a local Parquet directory instead of ``s3://my-bucket/training-data/`` (the
script writes it first), and ``ScalingConfig(num_workers=2, use_gpu=False)``
for a CPU-only laptop. ``raylite.init(num_cpus=4)`` gives the two training
workers and Data's read/map tasks CPUs of their own (with every CPU held by a
trainer, Data's tasks would have nowhere to run).

``batch["text"]`` holds strings: raylite's ``iter_torch_batches`` keeps columns
that cannot become tensors as numpy arrays (Ray 2.60 raises a TypeError here).
"""

import os
import sys
import tempfile

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

import raylite as ray
import raylite.train
from raylite.train import ScalingConfig
from raylite.train.torch import TorchTrainer


def write_training_data(path: str, files: int = 4, rows: int = 500) -> None:
    rng = np.random.default_rng(0)
    words = ["Ray", "Data", "STREAMS", "batches", "Into", "training", "without", "materializing"]
    for i in range(files):
        texts = [" ".join(rng.choice(words, size=rng.integers(1, 6))) for _ in range(rows)]
        table = pa.table({"text": texts, "label": rng.integers(0, 2, rows)})
        pq.write_table(table, os.path.join(path, f"part-{i:03d}.parquet"))


def train_func():
    train_ds = ray.train.get_dataset_shard("train")
    rows = 0
    for epoch in range(10):  # noqa: B007  (the seed's loop, unchanged)
        for batch in train_ds.iter_torch_batches(batch_size=64):
            # batch is a dict of tensors
            inputs = batch["text"]
            labels = batch["label"]
            assert len(inputs) == len(labels)
            rows += len(labels)
    ray.train.report({"rows_seen": rows})


if __name__ == "__main__":
    data_dir = sys.argv[1] if len(sys.argv) > 1 else tempfile.mkdtemp(prefix="training-data-")
    write_training_data(data_dir)
    ray.init(num_cpus=4)

    ds = ray.data.read_parquet(data_dir)

    ds = ds.map(lambda row: {"text": row["text"].lower(), "label": row["label"]})
    ds = ds.filter(lambda row: len(row["text"]) > 10)

    # Stream directly to training workers
    trainer = TorchTrainer(
        train_func,
        scaling_config=ScalingConfig(num_workers=2, use_gpu=False),
        datasets={"train": ds},
        run_config=raylite.train.RunConfig(storage_path=tempfile.mkdtemp(prefix="runs-"), verbose=0),
    )
    result = trainer.fit()
    print(f"rank 0 saw {result.metrics['rows_seen']} rows over 10 epochs; {ds.count()} rows per epoch in all")
    ray.shutdown()
