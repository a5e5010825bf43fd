"""Readers and writers on small generated files, and their errors."""

import json

import fsspec
import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
import pytest

import raylite.data as rd


@pytest.fixture
def pq_dir(tmp_path):
    d = tmp_path / "pq"
    d.mkdir()
    for i in range(3):
        t = pa.table({"id": np.arange(i * 100, (i + 1) * 100), "text": [f"Row {j}" for j in range(100)]})
        pq.write_table(t, d / f"part-{i}.parquet", row_group_size=25)
    (d / "_SUCCESS").write_text("")
    (d / ".hidden.parquet").write_text("not parquet")
    return d


def test_read_parquet_dir_file_glob_list(local, pq_dir):
    ds = rd.read_parquet(str(pq_dir))
    assert ds.count() == 300 and ds.schema().names == ["id", "text"]
    assert [r["id"] for r in ds.take_all()] == list(range(300))
    assert rd.read_parquet(str(pq_dir / "part-1.parquet")).count() == 100
    assert rd.read_parquet(str(pq_dir / "part-[01].parquet")).count() == 200
    assert rd.read_parquet([str(pq_dir / "part-0.parquet"), str(pq_dir / "part-2.parquet")]).count() == 200
    assert rd.read_parquet("file://" + str(pq_dir)).count() == 300
    assert len(ds.input_files()) == 3


def test_read_parquet_projection_and_filter_pushdown(local, pq_dir):
    ds = rd.read_parquet(str(pq_dir), columns=["id"], filter=pc.field("id") >= 250)
    assert ds.columns() == ["id"]
    assert [r["id"] for r in ds.take_all()] == list(range(250, 300))
    with pytest.raises(KeyError, match="'nope'"):
        rd.read_parquet(str(pq_dir), columns=["nope"])


def test_read_parquet_splits_row_groups_for_parallelism(local, pq_dir):
    ds = rd.read_parquet(str(pq_dir / "part-0.parquet"), override_num_blocks=4)
    assert ds.materialize().num_blocks() == 4


def test_hive_partitions_become_columns(local, tmp_path):
    for year in (2023, 2024):
        p = tmp_path / "t" / f"year={year}"
        p.mkdir(parents=True)
        pq.write_table(pa.table({"v": [year * 10]}), p / "a.parquet")
    ds = rd.read_parquet(str(tmp_path / "t"))
    assert ds.take_all() == [{"v": 20230, "year": "2023"}, {"v": 20240, "year": "2024"}]
    assert ds.columns() == ["v", "year"]
    assert rd.read_parquet(str(tmp_path / "t"), columns=["year"]).take_all() == [{"year": "2023"}, {"year": "2024"}]


def test_read_errors_name_the_path_file_and_column(local, tmp_path, pq_dir):
    with pytest.raises(FileNotFoundError, match="does-not-exist"):
        rd.read_parquet(str(tmp_path / "does-not-exist"))
    bad = tmp_path / "bad"
    bad.mkdir()
    (bad / "notes.parquet").write_text("hello")
    with pytest.raises(ValueError, match="notes.parquet.*not a readable Parquet file"):
        rd.read_parquet(str(bad))
    mixed = tmp_path / "mixed"
    mixed.mkdir()
    pq.write_table(pa.table({"a": [1]}), mixed / "1.parquet")
    pq.write_table(pa.table({"a": ["x"]}), mixed / "2.parquet")
    with pytest.raises(ValueError, match="Column 'a'.*1.parquet.*2.parquet"):
        rd.read_parquet(str(mixed))
    with pytest.raises(FileNotFoundError, match="extensions"):
        rd.read_csv(str(pq_dir), file_extensions=["csv"])


def test_csv_json_text_round_trips(local, tmp_path):
    df = pd.DataFrame({"a": range(10), "b": [f"s{i}" for i in range(10)]})
    ds = rd.from_pandas(df, override_num_blocks=3)
    ds.write_csv(str(tmp_path / "csv"))
    ds.write_json(str(tmp_path / "json"))
    assert len(list((tmp_path / "csv").iterdir())) == 3
    assert rd.read_csv(str(tmp_path / "csv")).to_pandas().values.tolist() == df.values.tolist()
    assert rd.read_json(str(tmp_path / "json")).to_pandas().values.tolist() == df.values.tolist()
    (tmp_path / "arr.json").write_text(json.dumps([{"a": 1}, {"a": 2}]))
    assert rd.read_json(str(tmp_path / "arr.json")).take_all() == [{"a": 1}, {"a": 2}]
    (tmp_path / "t.txt").write_text("hello\n\nworld\n")
    assert rd.read_text(str(tmp_path / "t.txt")).take_all() == [{"text": "hello"}, {"text": "world"}]


def test_parquet_write_keeps_order_and_tensors(local, tmp_path):
    ds = rd.range_tensor(20, shape=(2, 2), override_num_blocks=4).map_batches(
        lambda b: {"data": b["data"], "id": b["data"][:, 0, 0]})
    ds.write_parquet(str(tmp_path / "out"))
    files = sorted((tmp_path / "out").iterdir())
    assert len(files) == 4 and all(f.suffix == ".parquet" for f in files)
    back = rd.read_parquet(str(tmp_path / "out"))
    assert [r["id"] for r in back.take_all()] == list(range(20))
    assert back.take_batch(20)["data"].shape == (20, 2, 2)


def test_numpy_and_binary_files(local, tmp_path):
    np.save(tmp_path / "x.npy", np.arange(12).reshape(4, 3))
    assert rd.read_numpy(str(tmp_path / "x.npy")).take_batch(4)["data"].shape == (4, 3)
    rd.range_tensor(5, shape=(3,)).write_numpy(str(tmp_path / "npout"), column="data")
    assert rd.read_numpy(str(tmp_path / "npout")).count() == 5
    (tmp_path / "b1.bin").write_bytes(b"\x00\x01")
    rows = rd.read_binary_files(str(tmp_path / "b1.bin"), include_paths=True).take_all()
    assert rows[0]["bytes"] == b"\x00\x01" and rows[0]["path"].endswith("b1.bin")


def test_fsspec_filesystem_and_uri(local):
    fs = fsspec.filesystem("memory")
    with fs.open("/bucket/data/a.parquet", "wb") as f:
        pq.write_table(pa.table({"x": [1, 2, 3]}), f)
    assert rd.read_parquet("/bucket/data", filesystem=fs).count() == 3
    assert rd.read_parquet("memory://bucket/data").take_all() == [{"x": 1}, {"x": 2}, {"x": 3}]
    rd.range(4).write_parquet("memory://bucket/out")
    assert rd.read_parquet("memory://bucket/out").count() == 4


def test_custom_datasource(local):
    class Squares(rd.Datasource):
        def get_read_tasks(self, parallelism):
            meta = rd.BlockMetadata(num_rows=3, size_bytes=24)
            return [rd.ReadTask(lambda i=i: [pa.table({"sq": [i * i]})], meta) for i in range(3)]

    assert rd.read_datasource(Squares()).take_all() == [{"sq": 0}, {"sq": 1}, {"sq": 4}]


def test_from_torch(local):
    import torch

    tds = torch.utils.data.TensorDataset(torch.arange(3))
    rows = rd.from_torch(tds).take_all()
    assert len(rows) == 3


def test_read_images(local, tmp_path):
    Image = pytest.importorskip("PIL.Image")
    for i in range(3):
        arr = np.full((4, 6, 3), i * 40, dtype=np.uint8)
        Image.fromarray(arr).save(tmp_path / f"img{i}.png")
    (tmp_path / "notes.txt").write_text("not an image")
    ds = rd.read_images(str(tmp_path), include_paths=True)
    batch = ds.take_batch(3)
    assert batch["image"].shape == (3, 4, 6, 3) and batch["image"].dtype == np.uint8
    assert [int(img[0, 0, 0]) for img in batch["image"]] == [0, 40, 80]
    assert all(p.endswith(".png") for p in batch["path"])
    small = rd.read_images(str(tmp_path), size=(2, 3), mode="L").take_batch(1)["image"]
    assert small.shape == (1, 2, 3)
