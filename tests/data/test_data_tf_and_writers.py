"""TensorFlow views of a dataset (iter_tf_batches, to_tf, from_tf) and the ORC and Delta writers,
each checked against what the real library reads back. Each test skips, naming the package,
where its library is not installed (CI's test extra has no TensorFlow)."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pyarrow as pa
import pytest

import raylite.data as rd

pytestmark = pytest.mark.usefixtures("local")


def table(n: int = 20) -> pa.Table:
    return pa.table({"id": np.arange(n), "x": np.arange(n) * 0.5, "name": [f"r{i}" for i in range(n)]})


# ------------------------------------------------------------------ TensorFlow


def test_iter_tf_batches_gives_tensors_of_the_rows_every_epoch():
    tf = pytest.importorskip("tensorflow")
    ds = rd.from_arrow(table(10))
    batches = ds.iter_tf_batches(batch_size=4, dtypes={"x": tf.float32})
    for _ in range(2):  # each `for` is a full pass
        seen = list(batches)
        assert [int(b["id"].shape[0]) for b in seen] == [4, 4, 2]
        assert all(isinstance(b["x"], tf.Tensor) and b["x"].dtype == tf.float32 for b in seen)
        assert np.concatenate([b["id"].numpy() for b in seen]).tolist() == list(range(10))
        assert seen[0]["name"].numpy().tolist() == [b"r0", b"r1", b"r2", b"r3"]
    assert len(list(ds.iterator().iter_tf_batches(batch_size=3, drop_last=True))) == 3
    ragged = rd.from_items([{"v": [1, 2]}, {"v": [3]}])
    with pytest.raises(ValueError, match="'v' cannot become one tf.Tensor"):
        next(iter(ragged.iter_tf_batches()))


def test_to_tf_pairs_features_with_labels_for_keras():
    tf = pytest.importorskip("tensorflow")
    rows = pa.table({"a": np.arange(8, dtype=np.float32), "b": np.ones(8, np.float32),
                     "y": np.arange(8, dtype=np.float32) * 2, "w": np.arange(8)})
    ds = rd.from_arrow(rows)
    single = ds.to_tf("a", "y", batch_size=3)
    assert single.element_spec == (tf.TensorSpec((None,), tf.float32), tf.TensorSpec((None,), tf.float32))
    pairs = list(single)
    assert [int(f.shape[0]) for f, _ in pairs] == [3, 3, 2]
    assert np.concatenate([y.numpy() for _, y in pairs]).tolist() == [2.0 * i for i in range(8)]
    several = ds.iterator().to_tf(["a", "b"], "y", additional_columns="w", batch_size=8)
    features, labels, extra = next(iter(several))
    assert sorted(features) == ["a", "b"] and features["b"].numpy().tolist() == [1.0] * 8
    assert labels.numpy().tolist() == rows["y"].to_pylist() and extra.dtype == tf.int64
    # Keras trains on it directly: y = 2a is learnt by one Dense unit
    model = tf.keras.Sequential([tf.keras.Input((1,)), tf.keras.layers.Dense(1)])
    model.compile(optimizer=tf.keras.optimizers.SGD(0.01), loss="mse")
    history = model.fit(single.map(lambda f, y: (tf.reshape(f, (-1, 1)), y)), epochs=4, verbose=0)
    assert history.history["loss"][-1] < history.history["loss"][0]


def test_to_tf_names_a_missing_column_and_tensor_columns_keep_their_shape():
    tf = pytest.importorskip("tensorflow")
    ds = rd.from_numpy(np.arange(24, dtype=np.float64).reshape(4, 2, 3)).add_column(
        "label", lambda b: np.arange(len(b["data"])))
    spec = ds.to_tf("data", "label").element_spec
    assert spec[0] == tf.TensorSpec((None, 2, 3), tf.float64)
    first, label = next(iter(ds.to_tf("data", "label", batch_size=2)))
    assert first.numpy().tolist() == np.arange(12.0).reshape(2, 2, 3).tolist()
    with pytest.raises(ValueError, match=r"label_columns=.*\['nope'\].*columns are"):
        ds.to_tf("data", ["nope"])


def test_from_tf_reads_each_element_as_a_row():
    tf = pytest.importorskip("tensorflow")
    dicts = tf.data.Dataset.from_tensor_slices({"a": [1, 2, 3], "s": ["x", "y", "z"]})
    assert rd.from_tf(dicts).take_all() == [{"a": 1, "s": b"x"}, {"a": 2, "s": b"y"}, {"a": 3, "s": b"z"}]
    assert [r["item"] for r in rd.from_tf(tf.data.Dataset.range(4)).take_all()] == [0, 1, 2, 3]
    with pytest.raises(TypeError, match="tf.data.Dataset"):
        rd.from_tf([1, 2])


def test_tf_views_name_the_pip_command_without_tensorflow(monkeypatch):
    from tests.conftest import hide_module

    hide_module(monkeypatch, "tensorflow")
    with pytest.raises(ModuleNotFoundError, match="pip install tensorflow"):
        rd.from_arrow(table(3)).iter_tf_batches()


# ------------------------------------------------------------------ writers


def test_from_blocks_keeps_one_block_per_table_or_frame():
    ds = rd.from_blocks([table(3), pd.DataFrame({"id": [7], "x": [1.0], "name": ["p"]})])
    assert ds.num_blocks() == 2
    assert ds.to_pandas()["id"].tolist() == [0, 1, 2, 7]
    with pytest.raises(TypeError, match="block 0 is a list"):
        rd.from_blocks([[1, 2]])


def test_write_orc_files_read_back_with_pyarrow(tmp_path):
    import pyarrow.dataset as pads
    import pyarrow.orc as paorc

    rd.from_arrow(table(50)).repartition(3).write_orc(str(tmp_path / "orc"), compression="zstd")
    files = sorted((tmp_path / "orc").iterdir())
    assert len(files) == 3 and all(f.suffix == ".orc" for f in files)
    assert paorc.ORCFile(str(files[0])).compression == "ZSTD"
    back = pads.dataset(str(tmp_path / "orc"), format="orc").to_table().sort_by("id")
    assert back.equals(table(50))
    assert rd.read_orc(str(tmp_path / "orc")).count() == 50
    rd.from_arrow(table(50)).repartition(5).write_orc(str(tmp_path / "big"), min_rows_per_file=25)
    assert len(list((tmp_path / "big").iterdir())) == 2
    with pytest.raises(ValueError, match="mode="):
        rd.from_arrow(table(1)).write_orc(str(tmp_path / "orc"), mode="overwrite")


def test_write_delta_creates_appends_and_overwrites_a_table(tmp_path):
    deltalake = pytest.importorskip("deltalake")
    path = str(tmp_path / "delta")
    rd.from_arrow(table(30)).repartition(3).write_delta(path)
    dt = deltalake.DeltaTable(path)
    assert dt.version() == 0 and len(dt.file_uris()) == 3  # three tasks, one commit
    assert dt.to_pyarrow_table().sort_by("id").equals(table(30))
    rd.from_arrow(table(5)).write_delta(path)
    assert deltalake.DeltaTable(path).version() == 1 and len(deltalake.DeltaTable(path).to_pandas()) == 35
    rd.from_arrow(table(4)).write_delta(path, mode="overwrite")
    assert sorted(deltalake.DeltaTable(path).to_pandas()["id"]) == [0, 1, 2, 3]
    assert rd.read_delta(path).count() == 4
    with pytest.raises(ValueError, match="already there"):
        rd.from_arrow(table(1)).write_delta(path, mode="error")
    rd.from_arrow(table(9)).write_delta(path, mode="ignore")
    assert deltalake.DeltaTable(path).version() == 2


def test_write_delta_partitions_by_a_column(tmp_path):
    deltalake = pytest.importorskip("deltalake")
    path = str(tmp_path / "parts")
    rows = pa.table({"k": ["a", "b", "a", "c"], "v": [1, 2, 3, 4]})
    rd.from_arrow(rows).write_delta(path, partition_by=["k"], name="parts")
    dt = deltalake.DeltaTable(path)
    assert dt.metadata().partition_columns == ["k"] and dt.metadata().name == "parts"
    assert sorted(p.name for p in (tmp_path / "parts").iterdir() if p.is_dir()) == ["_delta_log", "k=a", "k=b",
                                                                                   "k=c"]
    got = dt.to_pandas(partitions=[("k", "=", "a")])
    assert sorted(got["v"]) == [1, 3]
    with pytest.raises(ValueError, match="no column"):
        rd.from_arrow(rows).write_delta(str(tmp_path / "bad"), partition_by=["zz"])


# ------------------------------------------------------------------ readers


def test_read_audio_decodes_each_file_like_soundfile(tmp_path):
    soundfile = pytest.importorskip("soundfile")
    t = np.linspace(0, 1, 800, dtype=np.float32)
    stereo = np.stack([np.sin(2 * np.pi * 5 * t), np.cos(2 * np.pi * 3 * t)], axis=1) * 0.5
    soundfile.write(tmp_path / "a.wav", stereo, 8000, subtype="FLOAT")
    soundfile.write(tmp_path / "b.flac", stereo[:400, :1], 16000)
    (tmp_path / "notes.txt").write_text("not audio")
    rows = sorted(rd.read_audio(str(tmp_path), include_paths=True).take_all(), key=lambda r: r["path"])
    assert [r["sample_rate"] for r in rows] == [8000, 16000]
    assert rows[0]["amplitude"].shape == (2, 800) and rows[1]["amplitude"].shape == (1, 400)
    expected, _ = soundfile.read(tmp_path / "b.flac", always_2d=True, dtype="float32")
    assert np.array_equal(rows[1]["amplitude"], expected.T)
    assert np.allclose(rows[0]["amplitude"], stereo.T)
    (tmp_path / "bad.wav").write_bytes(b"RIFF garbage")
    with pytest.raises(Exception, match="bad.wav could not be decoded"):
        rd.read_audio(str(tmp_path / "bad.wav")).take_all()
