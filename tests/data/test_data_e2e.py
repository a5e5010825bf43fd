"""Data on a real local cluster (2 CPUs): tasks, actor pools, budget, shuffles, splits, errors."""

import os
import sys

import cloudpickle
import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
import torch

import raylite
import raylite.data as rd

pytestmark = pytest.mark.usefixtures("ray_cluster")
cloudpickle.register_pickle_by_value(sys.modules[__name__])  # workers cannot import test modules


@pytest.fixture(scope="module")
def text_parquet(tmp_path_factory):
    d = tmp_path_factory.mktemp("training-data")
    rng = np.random.default_rng(0)
    for i in range(4):
        n = 250
        texts = [("Hello World " * int(rng.integers(0, 3))) + f"sample {i}-{j}" for j in range(n)]
        pq.write_table(pa.table({"text": texts, "label": rng.integers(0, 2, n)}), d / f"part-{i}.parquet")
    return d


def test_seed_pipeline_read_map_filter_to_torch(text_parquet):
    ds = rd.read_parquet(str(text_parquet))
    ds = ds.map(lambda row: {"text": row["text"].lower(), "label": row["label"]})
    ds = ds.filter(lambda row: len(row["text"]) > 20)
    expected = pd.concat(pd.read_parquet(f) for f in sorted(text_parquet.iterdir()))
    expected = expected[expected.text.str.len() > 20]
    seen = 0
    for batch in ds.iter_torch_batches(batch_size=64):
        assert isinstance(batch["label"], torch.Tensor)
        assert isinstance(batch["text"], np.ndarray) and all(t == t.lower() for t in batch["text"])
        seen += len(batch["label"])
    assert seen == len(expected) > 0


def test_map_batches_pandas_with_num_cpus_2(text_parquet):
    def tokenize_batch(batch):
        ids = np.array([[len(w) for w in (t.split() + [""] * 8)[:8]] for t in batch["text"]])
        batch["input_ids"] = ids  # a 2-D array in a pandas column
        batch["attention_mask"] = (ids > 0).astype(np.int64)
        return batch

    ds = rd.read_parquet(str(text_parquet)).map_batches(tokenize_batch, batch_format="pandas", batch_size=256,
                                                         num_cpus=2)
    batch = next(iter(ds.iter_torch_batches(batch_size=8)))
    assert batch["input_ids"].shape == (8, 8) and batch["attention_mask"].dtype == torch.int64


def test_actor_pool_builds_the_class_once_per_actor():
    class Tag:
        def __init__(self):
            self.pid = os.getpid()
            self.calls = 0

        def __call__(self, batch):
            self.calls += 1
            return {"id": batch["id"], "pid": np.full(len(batch["id"]), self.pid), "calls": np.full(len(batch["id"]), self.calls)}

    rows = rd.range(400, override_num_blocks=8).map_batches(Tag, concurrency=2, batch_size=50).take_all()
    assert [r["id"] for r in rows] == list(range(400))
    pids = {r["pid"] for r in rows}
    assert 1 <= len(pids) <= 2 and os.getpid() not in pids
    assert max(r["calls"] for r in rows) > 1  # state kept across batches in one actor


def test_actor_pool_udf_uses_the_cpus_its_actors_reserve():
    """Each actor's intra-op threads match its num_cpus (as Ray's OMP_NUM_THREADS does)."""
    class Threads:
        def __call__(self, batch):
            n = len(batch["id"])
            return {"torch": np.full(n, torch.get_num_threads()), "omp": np.full(n, int(os.environ["OMP_NUM_THREADS"]))}

    for cpus in (1, 2):
        rows = rd.range(20, override_num_blocks=2).map_batches(Threads, concurrency=1, num_cpus=cpus).take_all()
        assert {(r["torch"], r["omp"]) for r in rows} == {(cpus, cpus)}


def test_task_whose_worker_dies_is_retried(tmp_path):
    marker = str(tmp_path / "died_once")

    def die_once(batch):
        if batch["id"][0] == 0 and not os.path.exists(marker):
            open(marker, "w").close()
            os._exit(1)  # the worker process dies mid-task
        return batch

    ids = [r["id"] for r in rd.range(20, override_num_blocks=2).map_batches(die_once).take_all()]
    assert ids == list(range(20)) and os.path.exists(marker)


def test_udf_error_is_the_users_type_and_names_the_operator():
    def boom(row):
        if row["id"] == 3:
            raise ValueError("bad row")
        return row

    with pytest.raises(ValueError, match="bad row") as info:
        rd.range(10).map(boom).take_all()
    assert "Map(boom)" in str(info.value) and "'id': 3" in str(info.value)
    with pytest.raises(TypeError, match="MapBatches"):
        rd.range(10).map_batches(lambda b: 42).take_all()
    with pytest.raises(raylite.exceptions.TaskUnschedulableError, match="MapBatches.*GPU: 1"):
        rd.range(10).map_batches(lambda b: b, num_gpus=1).take_all()  # at once, not a hang
    assert rd.range(5).count() == 5  # the cluster still works


def test_stream_larger_than_budget_keeps_held_bytes_bounded(data_context):
    mb = 1024 * 1024
    data_context.execution_options.resource_limits.object_store_memory = 8 * mb
    ds = rd.range_tensor(96 * 1024, shape=(128,), override_num_blocks=96).map_batches(lambda b: {"x": b["data"] * 2})
    total = sum(len(b["x"]) for b in ds.iter_batches(batch_size=8192))
    assert total == 96 * 1024  # 96 MiB through an 8 MiB budget
    peak_mb = float(ds.stats().split("peak held ")[1].split(" MB")[0])
    assert peak_mb <= (8 + 2) * mb / 1e6


def test_shuffle_sort_groupby_match_pandas():
    rng = np.random.default_rng(1)
    df = pd.DataFrame({"k": rng.integers(0, 10, 3000), "v": rng.normal(size=3000)})
    ds = rd.from_pandas(df, override_num_blocks=6)
    got = ds.random_shuffle(seed=5).sort("v").to_pandas()
    np.testing.assert_allclose(got.v, np.sort(df.v))
    agg = ds.groupby("k").mean("v").to_pandas()
    np.testing.assert_allclose(agg["mean(v)"], df.groupby("k").v.mean())
    assert ds.groupby("k").count().to_pandas()["count()"].tolist() == df.groupby("k").size().tolist()


def test_write_read_round_trip_on_cluster(tmp_path):
    rd.range(1000, override_num_blocks=4).map(lambda r: {"id": r["id"], "s": str(r["id"])}).write_parquet(
        str(tmp_path / "out"))
    back = rd.read_parquet(str(tmp_path / "out"))
    assert back.count() == 1000 and back.sum("id") == sum(range(1000))
    assert [r["s"] for r in back.take(3)] == ["0", "1", "2"]


def test_streaming_split_consumed_by_two_actors_over_two_epochs():
    @raylite.remote(num_cpus=0)
    class Consumer:
        def __init__(self, shard):
            self.shard = shard

        def epoch(self):
            return [int(x) for b in self.shard.iter_batches(batch_size=32) for x in b["id"]]

    ds = rd.range(1000, override_num_blocks=10).map_batches(lambda b: b)
    shards = ds.streaming_split(2, equal=True)
    consumers = [Consumer.remote(s) for s in shards]
    for _ in range(2):
        a, b = raylite.get([c.epoch.remote() for c in consumers], timeout=60)
        assert len(a) == len(b) == 500
        assert sorted(a + b) == list(range(1000))


def test_materialize_and_refs():
    mat = rd.range(100).map(lambda r: {"id": r["id"] * 2}).materialize()
    assert mat.count() == 100 and mat.num_blocks() >= 1
    refs = mat.to_arrow_refs()
    assert sum(t.num_rows for t in raylite.get(refs)) == 100
    assert rd.from_arrow_refs(refs).sum("id") == 2 * sum(range(100))


def test_documentation_join_example_and_row_views_on_the_cluster():
    from raylite.data.expressions import col

    doubles_ds = rd.range(4).map(lambda row: {"id": row["id"], "double": int(row["id"]) * 2})
    squares_ds = rd.range(4).map(lambda row: {"id": row["id"], "square": int(row["id"]) ** 2})
    doubles_and_squares_ds = doubles_ds.join(squares_ds, join_type="inner", num_partitions=2, on=("id",))
    rows = sorted(doubles_and_squares_ds.take_all(), key=lambda r: r["id"])
    assert rows == [{"id": i, "double": 2 * i, "square": i * i} for i in range(4)]
    kept = rd.range(100).filter(lambda r: r["id"] % 3 == 0).with_column("x", col("id") * 2)
    assert [r["x"] for r in kept.filter(expr=col("id") > 90).take_all()] == [186, 192, 198]
