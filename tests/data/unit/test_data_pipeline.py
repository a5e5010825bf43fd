"""Transforms, fusion and consumers on the in-process submitter (no cluster)."""

import numpy as np
import pandas as pd
import pyarrow as pa
import pytest
import torch

import raylite.data as rd
from raylite.data._internal.planner import plan
from raylite.data.block import BatchTypeError


def _ops(ds, local):
    return [op.name for op in plan(ds._logical, local, rd.DataContext.get_current())]


def test_range_map_filter_preserve_order(local):
    ds = rd.range(1000).map(lambda r: {"id": r["id"], "sq": r["id"] ** 2}).filter(lambda r: r["id"] % 7 == 0)
    rows = ds.take_all()
    assert [r["id"] for r in rows] == list(range(0, 1000, 7))
    assert all(r["sq"] == r["id"] ** 2 for r in rows)
    assert ds.count() == len(rows)


def test_read_map_filter_fuse_into_one_operator(local):
    ds = rd.range(100, override_num_blocks=4).map(lambda r: r).filter(lambda r: True)
    assert _ops(ds, local) == ["ReadRange->Map(<lambda>)->Filter(<lambda>)"]
    ds.take_all()
    assert local.tasks_submitted == 4  # one task per read task, nothing between operators


def test_different_resources_split_operators(local):
    ds = rd.range(10).map_batches(lambda b: b, num_cpus=0.5).map(lambda r: r, num_cpus=0.25)
    assert _ops(ds, local) == ["ReadRange->MapBatches(<lambda>)", "Map(<lambda>)"]
    assert ds.count() == 10


@pytest.mark.parametrize("fmt,check", [
    ("numpy", lambda b: isinstance(b["id"], np.ndarray)),
    ("default", lambda b: isinstance(b["id"], np.ndarray)),
    ("pandas", lambda b: isinstance(b, pd.DataFrame)),
    ("pyarrow", lambda b: isinstance(b, pa.Table)),
])
def test_map_batches_formats(local, fmt, check):
    seen = []

    def fn(batch):
        assert check(batch)
        seen.append(len(batch["id"]) if fmt != "pyarrow" else batch.num_rows)
        if fmt == "pyarrow":
            return batch.append_column("double", pa.compute.multiply(batch["id"], 2))
        batch["double"] = batch["id"] * 2
        return batch

    rows = rd.range(100, override_num_blocks=2).map_batches(fn, batch_format=fmt, batch_size=10).take_all()
    assert [r["double"] for r in rows] == [2 * i for i in range(100)]


def test_batch_size_bundles_small_blocks(local):
    sizes = []

    def fn(batch):
        sizes.append(len(batch["id"]))
        return batch

    rd.from_items([{"id": i} for i in range(64)], override_num_blocks=16).map_batches(fn, batch_size=32).count()
    assert sorted(sizes) == [32, 32]


def test_generator_udf_and_flat_map(local):
    def split_batches(batch):
        yield {"x": batch["id"]}
        yield {"x": batch["id"] + 1000}

    assert rd.range(4).map_batches(split_batches, batch_size=None).count() == 8
    rows = rd.from_items([{"n": 2}, {"n": 3}]).flat_map(lambda r: [{"v": r["n"]}] * r["n"]).take_all()
    assert [r["v"] for r in rows] == [2, 2, 3, 3, 3]


def test_callable_class_needs_concurrency_and_runs_in_actor_pool(local):
    class AddK:
        def __init__(self, k):
            self.k = k

        def __call__(self, batch):
            return {"id": batch["id"] + self.k}

    with pytest.raises(ValueError, match="concurrency"):
        rd.range(10).map_batches(AddK)
    ds = rd.range(40, override_num_blocks=4).map_batches(AddK, fn_constructor_args=(100,), concurrency=2,
                                                         batch_size=5)
    assert _ops(ds, local) == ["ReadRange->MapBatches(AddK)"]  # the read runs inside the actors
    assert [r["id"] for r in ds.take_all()] == list(range(100, 140))
    assert local.actors_started == 2


def test_columns_ops_and_expression_filter(local):
    ds = rd.from_items([{"a": i, "b": i * 10, "c": str(i)} for i in range(10)])
    assert ds.select_columns(["a", "c"]).columns() == ["a", "c"]
    assert ds.drop_columns(["b"]).columns() == ["a", "c"]
    assert ds.rename_columns({"a": "x"}).columns() == ["x", "b", "c"]
    assert ds.rename_columns(["p", "q", "r"]).columns() == ["p", "q", "r"]
    added = ds.add_column("d", lambda df: df["a"] + df["b"]).take(2)
    assert [r["d"] for r in added] == [0, 11]
    assert [r["a"] for r in ds.filter(expr="a >= 3 and b < 60").take_all()] == [3, 4, 5]
    assert [r["a"] for r in ds.filter(expr="c in ['1', '2'] or a == 9").take_all()] == [1, 2, 9]
    assert [r["a"] for r in ds.filter(expr="not (a < 8) and c not in ['9']").take_all()] == [8]
    assert [r["a"] for r in ds.filter(expr="-a * 2 + b / 10 > -3").take_all()] == [0, 1, 2]
    nulls = rd.from_items([{"v": 1}, {"v": None}, {"v": 3}])
    assert nulls.filter(expr="v is None").count() == 1 and nulls.filter(expr="v is not None").count() == 2
    assert nulls.filter(expr="1 < v <= 3").take_all() == [{"v": 3}]
    with pytest.raises(KeyError, match="'nope'"):
        nulls.filter(expr="nope > 1").take_all()
    with pytest.raises(KeyError, match="'zzz'.*columns"):
        ds.select_columns(["zzz"]).take_all()
    with pytest.raises(ValueError, match="unsupported syntax"):
        ds.filter(expr="len(c) > 1")


def test_limit_stops_reading_early(local):
    ds = rd.range(10_000, override_num_blocks=100)
    assert [r["id"] for r in ds.limit(3).take_all()] == [0, 1, 2]
    assert local.tasks_submitted < 20
    assert ds.limit(0).take_all() == []
    assert ds.limit(5).count() == 5


def test_udf_errors_keep_type_and_name_operator_and_row(local):
    def boom(row):
        if row["id"] == 3:
            raise ValueError("bad row")
        return row

    with pytest.raises(ValueError, match="bad row") as info:
        rd.range(10).map(boom).take_all()
    notes = "".join(getattr(info.value, "__notes__", []))
    assert "Map(boom)" in notes and "'id': 3" in notes


def test_udf_wrong_return_type_names_operator(local):
    with pytest.raises(BatchTypeError, match="MapBatches\\(<lambda>\\)"):
        rd.range(10).map_batches(lambda b: [1, 2, 3]).take_all()
    with pytest.raises(BatchTypeError, match="Map\\(<lambda>\\).*must return a dict"):
        rd.range(10).map(lambda r: 5).take_all()
    with pytest.raises(BatchTypeError, match="filter\\(\\) functions must return a bool"):
        rd.range(10).filter(lambda r: "yes").take_all()


def test_iter_batches_sizes_drop_last_and_local_shuffle(local):
    ds = rd.range(100, override_num_blocks=3)
    sizes = [len(b["id"]) for b in ds.iter_batches(batch_size=30)]
    assert sizes == [30, 30, 30, 10]
    assert [len(b["id"]) for b in ds.iter_batches(batch_size=30, drop_last=True)] == [30, 30, 30]
    shuffled = np.concatenate([b["id"] for b in ds.iter_batches(batch_size=10, local_shuffle_buffer_size=50,
                                                                 local_shuffle_seed=0)])
    assert sorted(shuffled.tolist()) == list(range(100)) and shuffled.tolist() != list(range(100))
    blocks = list(ds.iter_batches(batch_size=None, batch_format="pyarrow"))
    assert sum(b.num_rows for b in blocks) == 100


def test_iter_torch_batches_keeps_strings_as_numpy(local):
    ds = rd.from_items([{"text": f"row {i}", "label": i, "f": float(i)} for i in range(10)])
    batches = list(ds.iter_torch_batches(batch_size=4, dtypes={"f": torch.float32}))
    assert len(batches) == 3
    first = batches[0]
    assert isinstance(first["label"], torch.Tensor) and first["label"].tolist() == [0, 1, 2, 3]
    assert first["f"].dtype == torch.float32
    assert isinstance(first["text"], np.ndarray) and first["text"].tolist() == ["row 0", "row 1", "row 2", "row 3"]
    collated = next(iter(ds.iter_torch_batches(batch_size=5, collate_fn=lambda b: len(b["label"]))))
    assert collated == 5


def test_tensor_columns_flow_to_torch(local):
    ds = rd.range_tensor(8, shape=(2, 3))
    batch = next(iter(ds.iter_torch_batches(batch_size=8)))
    assert batch["data"].shape == (8, 2, 3) and batch["data"][5].sum().item() == 30
    assert rd.from_numpy(np.ones((6, 4))).take(1)[0]["data"].shape == (4,)


def test_consumers(local, capsys):
    ds = rd.from_pandas(pd.DataFrame({"a": range(5), "b": list("vwxyz")}))
    assert ds.take_batch(2)["b"].tolist() == ["v", "w"]
    assert isinstance(ds.take_batch(2, batch_format="pandas"), pd.DataFrame)
    pd.testing.assert_frame_equal(ds.to_pandas(), pd.DataFrame({"a": range(5), "b": list("vwxyz")}))
    with pytest.raises(ValueError, match="limit of 3"):
        ds.take_all(limit=3)
    ds.show(2)
    assert capsys.readouterr().out.splitlines() == ["{'a': 0, 'b': 'v'}", "{'a': 1, 'b': 'w'}"]
    types = ds.schema().types
    assert ds.schema().names == ["a", "b"] and types[0] == pa.int64()
    assert pa.types.is_string(types[1]) or pa.types.is_large_string(types[1])  # pandas 3 strings are large
    mat = ds.map(lambda r: r).materialize()
    assert mat.count() == 5 and mat.num_blocks() == 1 and "Operator" in mat.stats()
    assert rd.from_arrow(pa.table({"x": [1]})).take() == [{"x": 1}]
    with pytest.raises(ValueError, match="empty"):
        rd.range(3).filter(lambda r: False).take_batch()
    with pytest.raises(TypeError, match="iter_rows"):
        iter(ds)
    assert "Map(<lambda>)" in repr(ds.map(lambda r: r))


def test_union_zip(local):
    a, b = rd.range(5), rd.range(3).map(lambda r: {"id": r["id"] + 100})
    assert [r["id"] for r in a.union(b).take_all()] == [0, 1, 2, 3, 4, 100, 101, 102]
    assert a.union(a).count() == 10
    z = rd.range(6, override_num_blocks=2).zip(rd.range(6, override_num_blocks=3).map(lambda r: {"v": -r["id"]}))
    assert z.take_all() == [{"id": i, "v": -i} for i in range(6)]
    with pytest.raises(ValueError, match="same number of rows"):
        rd.range(3).zip(rd.range(4)).take_all()


def test_dataset_is_rerunnable_and_lazy(local):
    calls = []
    ds = rd.range(10).map(lambda r: calls.append(1) or r)
    assert calls == []
    assert ds.count() == 10 and ds.count() == 10
    assert len(calls) == 20


def test_iter_methods_return_reiterables_one_epoch_per_for(local):
    """A loader built once and looped over per epoch sees every row each epoch (as in Ray)."""
    ds = rd.range(20, override_num_blocks=3)
    loader = ds.iter_torch_batches(batch_size=6)
    epochs = [[int(x) for b in loader for x in b["id"]] for _ in range(3)]
    assert epochs == [list(range(20))] * 3
    batches = ds.iter_batches(batch_size=7)
    assert [len(b["id"]) for b in batches] == [7, 7, 6] and [len(b["id"]) for b in batches] == [7, 7, 6]
    rows = ds.iter_rows()
    assert len(list(rows)) == 20 and len(list(rows)) == 20
    assert next(ds.iter_batches(batch_size=4))["id"].tolist() == [0, 1, 2, 3]  # next() on it still works
    it = ds.iterator().iter_batches(batch_size=10)
    assert [b["id"][0] for b in it] == [0, 10] and [b["id"][0] for b in it] == [0, 10]


def test_uniform_list_columns_stack_ragged_stay_objects(local):
    """Equal-length list columns batch as n-d arrays and tensors; ragged ones stay object arrays."""
    rows = [{"ids": [i, i + 1, i + 2], "emb": [[float(i)] * 2] * 2, "ragged": list(range(i % 3 + 1)),
             "text": f"t{i}"} for i in range(6)]
    ds = rd.from_items(rows)
    batch = ds.take_batch(6)
    assert batch["ids"].shape == (6, 3) and batch["ids"].dtype == np.int64
    assert batch["emb"].shape == (6, 2, 2)
    assert batch["ragged"].dtype == object and batch["ragged"][2].tolist() == [0, 1, 2]
    tb = next(iter(ds.iter_torch_batches(batch_size=4)))
    assert isinstance(tb["ids"], torch.Tensor) and tb["ids"].shape == (4, 3) and tb["ids"][1].tolist() == [1, 2, 3]
    assert isinstance(tb["emb"], torch.Tensor) and tb["emb"].shape == (4, 2, 2)
    assert isinstance(tb["ragged"], np.ndarray) and tb["ragged"].dtype == object
    assert isinstance(tb["text"], np.ndarray) and tb["text"].tolist() == ["t0", "t1", "t2", "t3"]
    # a batch sliced from the middle of a block stacks the right rows
    tail = list(ds.iter_batches(batch_size=4))[1]
    assert tail["ids"].tolist() == [[4, 5, 6], [5, 6, 7]]


def test_tokenizer_style_pandas_udf_gives_2d_tensors(local):
    """The seeds' tokenize pattern: a pandas UDF stores (rows, 8) arrays -> (batch, 8) tensors."""
    def tokenize(batch):
        n = len(batch)
        batch["input_ids"] = np.arange(n * 8).reshape(n, 8)
        batch["attention_mask"] = np.ones((n, 8), dtype=np.int64)
        return batch

    ds = rd.from_items([{"instruction": f"do {i}"} for i in range(10)])
    out = ds.map_batches(tokenize, batch_format="pandas", batch_size=4)
    batch = next(iter(out.iter_torch_batches(batch_size=8)))
    assert batch["input_ids"].shape == (8, 8) and batch["attention_mask"].dtype == torch.int64


def test_task_outputs_are_cut_near_target_max_block_size(local, data_context, tmp_path):
    """One read task of a big file yields several blocks near the target (not one huge block)."""
    data_context.target_max_block_size = 100_000
    ds = rd.range(100_000, override_num_blocks=1)  # 800 kB from one read task
    mat = ds.materialize()
    sizes = [m.size_bytes for b in mat._bundles() for _, m in b.blocks]
    assert 6 <= len(sizes) <= 10 and max(sizes) <= 150_000
    assert [r["id"] for r in mat.take_all()] == list(range(100_000))
    # many small outputs are gathered up to the target instead of one block per batch
    small = rd.range(20_000, override_num_blocks=1).map_batches(lambda b: b, batch_size=100).materialize()
    assert 1 <= small.num_blocks() <= 3
    # a flat_map that multiplies rows is cut too
    grown = rd.range(1000, override_num_blocks=1).flat_map(lambda r: [{"v": float(r["id"])}] * 50)
    assert grown.materialize().num_blocks() >= 3 and grown.count() == 50_000
    # a single big CSV file
    pd.DataFrame({"a": np.arange(50_000), "b": np.arange(50_000) * 0.5}).to_csv(tmp_path / "big.csv", index=False)
    csv = rd.read_csv(str(tmp_path / "big.csv")).materialize()
    assert csv.num_blocks() >= 4 and csv.count() == 50_000
    assert csv.take_batch(50_000)["a"].tolist() == list(range(50_000))
