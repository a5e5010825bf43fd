"""The connectors against real stores the tests make: Lance, SQLite, WebDataset and TFRecord
files, Delta and Iceberg tables, images; Dask/Modin/Daft frames. Each result is checked
against what the library itself reads or wrote."""

from __future__ import annotations

import io
import sqlite3
import tarfile

import numpy as np
import pandas as pd
import pyarrow as pa
import pytest

import raylite.data as rd

pytestmark = pytest.mark.usefixtures("local")


def table(n: int = 100) -> pa.Table:
    return pa.table({"id": np.arange(n), "x": np.arange(n) * 0.5, "name": [f"r{i}" for i in range(n)]})


# ------------------------------------------------------------------ Lance


def test_lance_fragments_become_read_tasks_with_pushdown(tmp_path):
    lance = pytest.importorskip("lance")
    uri = str(tmp_path / "t.lance")
    lance.write_dataset(table(100), uri, max_rows_per_file=25)  # 4 fragments
    ds = rd.read_lance(uri)
    source = ds._logical.datasource
    tasks = source.get_read_tasks(100)
    assert len(tasks) == 4 and [t.metadata.num_rows for t in tasks] == [25, 25, 25, 25]
    assert sorted(ds.to_pandas()["id"]) == list(range(100))
    got = rd.read_lance(uri, columns=["id", "name"], filter="id >= 90").to_pandas()
    assert list(got.columns) == ["id", "name"]
    assert sorted(got["id"]) == list(range(90, 100))
    expected = lance.dataset(uri).to_table(columns=["id", "name"], filter="id >= 90").to_pandas()
    assert sorted(got["name"]) == sorted(expected["name"])
    with pytest.raises(ValueError, match="not a valid Lance filter"):
        rd.read_lance(uri, filter="no_such_column > 3")
    with pytest.raises(ValueError, match=r"\['nope'\] not in the dataset"):
        rd.read_lance(uri, columns=["nope"])


def test_write_lance_commits_once_and_refuses_to_clobber(tmp_path):
    lance = pytest.importorskip("lance")
    uri = str(tmp_path / "w.lance")
    rd.from_arrow(table(60)).repartition(3).write_lance(uri)
    written = lance.dataset(uri)
    assert written.count_rows() == 60 and written.version == 1  # three tasks, one commit
    with pytest.raises(ValueError, match="mode='append'"):
        rd.from_arrow(table(5)).write_lance(uri)
    rd.from_arrow(table(5)).write_lance(uri, mode="append")
    assert lance.dataset(uri).count_rows() == 65
    rd.from_arrow(table(7)).write_lance(uri, mode="overwrite")
    assert sorted(lance.dataset(uri).to_table()["id"].to_pylist()) == list(range(7))


# ------------------------------------------------------------------ SQL


def test_sql_round_trip_through_sqlite(tmp_path):
    db = str(tmp_path / "t.db")
    with sqlite3.connect(db) as conn:
        conn.execute("CREATE TABLE t (id INTEGER, x REAL, name TEXT)")
    rd.from_arrow(table(200)).repartition(4).write_sql("INSERT INTO t VALUES (?, ?, ?)",
                                                        lambda: sqlite3.connect(db))
    with sqlite3.connect(db) as conn:
        assert conn.execute("SELECT COUNT(*), SUM(id) FROM t").fetchone() == (200, sum(range(200)))
    got = rd.read_sql("SELECT id, name FROM t WHERE id < ?", lambda: sqlite3.connect(db),
                      sql_params=(10,)).to_pandas()
    assert sorted(got["id"]) == list(range(10)) and set(got["name"]) == {f"r{i}" for i in range(10)}
    # SQLite has no MD5(): shard_keys falls back to one task that still reads every row
    sharded = rd.read_sql("SELECT * FROM t", lambda: sqlite3.connect(db), shard_keys=["id"],
                          override_num_blocks=4)
    assert len(sharded._logical.datasource.get_read_tasks(4)) == 1
    assert sharded.count() == 200


def test_sql_errors_name_the_statement_and_the_table(tmp_path):
    db = str(tmp_path / "e.db")
    with pytest.raises(sqlite3.OperationalError, match="no such table: missing") as info:
        rd.read_sql("SELECT * FROM missing", lambda: sqlite3.connect(db)).materialize()
    assert "SELECT * FROM missing" in "".join(getattr(info.value, "__notes__", []))
    with pytest.raises(ValueError, match="placeholder per column"):
        rd.from_arrow(table(3)).write_sql("INSERT INTO t SELECT 1", lambda: sqlite3.connect(db))
    with pytest.raises(ValueError, match="DB API 2"):
        rd.read_sql("SELECT 1", lambda: object()).materialize()


# ------------------------------------------------------------------ WebDataset, TFRecord, images


def test_webdataset_round_trip_with_images(tmp_path):
    pytest.importorskip("PIL")
    from PIL import Image

    shard = tmp_path / "in" / "shard-000.tar"
    shard.parent.mkdir()
    images = [np.full((4, 5, 3), i * 20, np.uint8) for i in range(3)]
    with tarfile.open(shard, "w") as tar:
        for i, img in enumerate(images):
            buf = io.BytesIO()
            Image.fromarray(img).save(buf, format="PNG")
            for ext, data in (("png", buf.getvalue()), ("cls", str(i).encode()),
                              ("txt", f"caption {i}".encode()), ("json", b'{"k": %d}' % i)):
                info = tarfile.TarInfo(f"sample{i:03d}.{ext}")
                info.size = len(data)
                tar.addfile(info, io.BytesIO(data))
    rows = sorted(rd.read_webdataset(str(shard.parent)).take_all(), key=lambda r: r["__key__"])
    assert [r["__key__"] for r in rows] == ["sample000", "sample001", "sample002"]
    assert [r["cls"] for r in rows] == [0, 1, 2] and rows[2]["txt"] == "caption 2"
    assert rows[1]["json"] == {"k": 1}
    assert np.array_equal(rows[2]["png"], images[2])
    raw = rd.read_webdataset(str(shard.parent), decoder=False).take(1)[0]
    assert isinstance(raw["cls"], bytes)

    out = tmp_path / "out"
    rd.read_webdataset(str(shard.parent)).write_webdataset(str(out))
    again = sorted(rd.read_webdataset(str(out)).take_all(), key=lambda r: r["__key__"])
    assert [r["cls"] for r in again] == [0, 1, 2] and np.array_equal(again[0]["png"], images[0])
    names = tarfile.open(next(out.glob("*.tar"))).getnames()
    assert "sample000.png" in names and "sample000.txt" in names


def test_tfrecords_round_trip_and_a_hand_made_file(tmp_path):
    # the CRC is the one TFRecord specifies (CRC-32C of "123456789" is 0xE3069283)
    from raylite.data._connectors.tfrecords import (
        crc32c,
        decode_example,
        encode_example,
        frame_record,
        iter_records,
        masked_crc,
    )

    assert crc32c(b"123456789") == 0xE3069283
    assert masked_crc(b"") == 0xA282EAD8
    example = {"label": ("int", [-3]), "emb": ("float", [0.5, 1.5]), "key": ("bytes", [b"a"])}
    assert decode_example(encode_example(example)) == example
    path = tmp_path / "one.tfrecords"
    path.write_bytes(frame_record(encode_example(example)) * 2)
    assert len(list(iter_records(path.read_bytes(), str(path)))) == 2
    rows = rd.read_tfrecords(str(path)).take_all()
    assert rows[0]["label"] == -3 and list(rows[0]["emb"]) == [0.5, 1.5] and rows[0]["key"] == b"a"

    data = pa.table({"i": [1, 2, 3], "f": [0.25, 0.5, 0.75], "s": ["x", "y", "z"],
                     "v": [[1, 2], [3], []]})
    out = tmp_path / "tf"
    rd.from_arrow(data).write_tfrecords(str(out))
    back = rd.read_tfrecords(str(out)).to_pandas().sort_values("i")
    assert back["i"].tolist() == [1, 2, 3] and back["f"].tolist() == [0.25, 0.5, 0.75]
    assert back["s"].tolist() == [b"x", b"y", b"z"]
    assert [list(v) for v in back["v"]] == [[1, 2], [3], []]
    bad = tmp_path / "bad" / "x.tfrecords"
    bad.parent.mkdir()
    bad.write_bytes(b"this is not a tfrecord file")
    with pytest.raises(ValueError, match="CRC mismatch"):
        rd.read_tfrecords(str(bad)).materialize()


def test_write_images_writes_files_pillow_reads_back(tmp_path):
    pytest.importorskip("PIL")
    from PIL import Image

    imgs = np.stack([np.full((6, 7, 3), v, np.uint8) for v in (10, 200)])
    rd.from_numpy(imgs).write_images(str(tmp_path / "img"), column="data")
    files = sorted((tmp_path / "img").glob("*.png"))
    assert len(files) == 2
    assert {int(np.asarray(Image.open(f))[0, 0, 0]) for f in files} == {10, 200}
    assert sorted(int(r["image"][0, 0, 0]) for r in rd.read_images(str(tmp_path / "img")).take_all()) == [10, 200]
    with pytest.raises(KeyError, match="no such column"):
        rd.from_numpy(imgs).write_images(str(tmp_path / "x"), column="nope")


# ------------------------------------------------------------------ Delta, Iceberg


def test_read_delta_reads_the_version_asked_for(tmp_path):
    deltalake = pytest.importorskip("deltalake")
    path = str(tmp_path / "delta")
    deltalake.write_deltalake(path, table(10))
    deltalake.write_deltalake(path, table(5), mode="append")
    assert rd.read_delta(path).count() == 15
    assert rd.read_delta(path, version=0).count() == 10
    got = rd.read_delta(path, columns=["id"]).to_pandas()
    assert list(got.columns) == ["id"]
    assert sorted(got["id"]) == sorted(deltalake.DeltaTable(path).to_pandas()["id"])
    with pytest.raises(ValueError, match="no Delta table there"):
        rd.read_delta(str(tmp_path / "nothing"))


def test_iceberg_round_trip_with_a_sqlite_catalog(tmp_path):
    pytest.importorskip("pyiceberg")
    from pyiceberg.catalog.sql import SqlCatalog

    kwargs = {"name": "default", "type": "sql", "uri": f"sqlite:///{tmp_path}/catalog.db",
              "warehouse": f"file://{tmp_path}/warehouse"}
    catalog = SqlCatalog("default", **{k: v for k, v in kwargs.items() if k not in ("name", "type")})
    catalog.create_namespace("db")
    iceberg_table = catalog.create_table("db.t", schema=table(1).schema)
    iceberg_table.append(table(30))
    iceberg_table.append(table(10))
    ds = rd.read_iceberg(table_identifier="db.t", catalog_kwargs=kwargs)
    assert ds.count() == 40
    got = rd.read_iceberg(table_identifier="db.t", catalog_kwargs=kwargs, row_filter="id >= 25",
                          selected_fields=("id",)).to_pandas()
    assert list(got.columns) == ["id"] and sorted(got["id"]) == list(range(25, 30))
    rd.from_arrow(table(4)).write_iceberg("db.t", catalog_kwargs=kwargs)
    assert len(catalog.load_table("db.t").scan().to_arrow()) == 44
    rd.from_arrow(table(3)).write_iceberg("db.t", catalog_kwargs=kwargs, mode="overwrite")
    assert sorted(catalog.load_table("db.t").scan().to_arrow()["id"].to_pylist()) == [0, 1, 2]
    with pytest.raises(ValueError, match="'db.missing' cannot be loaded"):
        rd.read_iceberg(table_identifier="db.missing", catalog_kwargs=kwargs)


# ------------------------------------------------------------------ dataframe engines


def test_dask_modin_daft_round_trips():
    dd = pytest.importorskip("dask.dataframe")
    df = pd.DataFrame({"a": range(20), "b": [f"s{i}" for i in range(20)]})
    ds = rd.from_dask(dd.from_pandas(df, npartitions=4))
    assert ds.count() == 20 and len(ds._block_refs()) == 4
    back = ds.to_dask().compute()
    assert back.sort_values("a")["b"].tolist() == df["b"].tolist()

    daft = pytest.importorskip("daft")
    ds = rd.from_daft(daft.from_pandas(df))
    assert sorted(ds.to_pandas()["a"]) == list(range(20))
    assert sorted(ds.to_daft().to_pandas()["a"]) == list(range(20))


def test_missing_package_names_the_pip_command(monkeypatch):
    from tests.conftest import hide_module

    hide_module(monkeypatch, "lance", ImportError)
    with pytest.raises(ImportError, match="pip install pylance"):
        rd.read_lance("/nowhere")


def test_modin_round_trip():
    pytest.importorskip("modin")
    import modin.config
    import modin.pandas as mpd

    modin.config.Engine.put("Python")  # modin's in-process engine: no second cluster in a unit test
    df = pd.DataFrame({"a": range(12), "b": np.arange(12) * 2.0})
    ds = rd.from_modin(mpd.DataFrame(df))
    assert ds.to_pandas().sort_values("a")["b"].tolist() == df["b"].tolist()
    back = ds.to_modin()
    assert isinstance(back, mpd.DataFrame) and back["b"].sum() == df["b"].sum()
