"""random_sample, streaming_train_test_split, summary, explain, write_datasink, ORC/Avro, Hugging Face,
preprocessors, and the Train v2 import path (in-process submitter)."""

import sys

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.orc as orc
import pytest

import raylite.data as rd
from raylite.data.datasource import Datasink, WriteResult
from raylite.data.preprocessors import (
    Chain,
    Concatenator,
    LabelEncoder,
    MinMaxScaler,
    OneHotEncoder,
    PreprocessorNotFittedException,
    StandardScaler,
)


def test_random_sample_fraction_seed_and_order(local):
    ds = rd.range(4000, override_num_blocks=4)
    a = [r["id"] for r in ds.random_sample(0.25, seed=7).take_all()]
    assert a == sorted(a) and 800 < len(a) < 1200
    assert a == [r["id"] for r in ds.random_sample(0.25, seed=7).take_all()]  # seeded: same rows every run
    assert ds.random_sample(0.0).count() == 0 and ds.random_sample(1.0).count() == 4000
    with pytest.raises(ValueError, match="between 0 and 1"):
        ds.random_sample(1.5)


@pytest.mark.parametrize("kwargs", [{"seed": 3}, {}, {"split_type": "hash", "hash_column": "id"}])
def test_streaming_train_test_split_halves_are_complementary(local, kwargs):
    ds = rd.range(2000, override_num_blocks=4)
    train, test = ds.streaming_train_test_split(0.25, **kwargs)
    tr, te = [r["id"] for r in train.take_all()], [r["id"] for r in test.take_all()]
    assert sorted(tr + te) == list(range(2000)) and 350 < len(te) < 650


def test_streaming_train_test_split_errors(local):
    with pytest.raises(ValueError, match="test_size"):
        rd.range(10).streaming_train_test_split(1.0)
    with pytest.raises(ValueError, match="needs hash_column"):
        rd.range(10).streaming_train_test_split(0.5, split_type="hash")


def test_summary_and_explain(local, capsys):
    ds = rd.from_items([{"age": 25, "salary": 50000, "name": "Alice"}, {"age": 30, "salary": 60000, "name": None},
                        {"age": 0, "salary": None, "name": "Bob"}])
    s = ds.summary()
    age = s.get_column_stats("age").set_index("statistic")["value"]
    assert age["count"] == 3 and age["min"] == 0 and age["max"] == 30
    assert age["mean"] == pytest.approx(55 / 3) and age["zero_pct"] == pytest.approx(100 / 3)
    df = s.to_pandas().set_index("statistic")
    assert df.loc["missing_pct", "salary"] == pytest.approx(100 / 3)
    assert df.loc["approx_topk[0]", "name"]["count"] == 1
    ds.map(lambda r: r).filter(lambda r: True).explain()
    out = capsys.readouterr().out
    assert "-------- Logical Plan --------" in out and "-------- Physical Plan --------" in out
    assert "Map(<lambda>)->Filter(<lambda>)" in out


class _CollectSink(Datasink):
    def __init__(self, fail_on=None, distributed=True):
        self.events, self.fail_on, self.distributed = [], fail_on, distributed

    def on_write_start(self, schema=None):
        self.events.append("start")

    def write(self, blocks, ctx):
        rows = [r for b in blocks for r in b.column("id").to_pylist()]
        if self.fail_on is not None and self.fail_on in rows:
            raise RuntimeError("sink broke")
        return (ctx.task_idx, rows)

    def on_write_complete(self, write_result):
        self.events.append(("complete", write_result))

    def on_write_failed(self, error):
        self.events.append(("failed", str(error)))

    @property
    def supports_distributed_writes(self):
        return self.distributed


@pytest.mark.parametrize("distributed", [True, False])
def test_write_datasink(local, distributed):
    sink = _CollectSink(distributed=distributed)
    rd.range(100, override_num_blocks=4).write_datasink(sink)
    assert sink.events[0] == "start"
    kind, result = sink.events[1]
    assert kind == "complete" and isinstance(result, WriteResult) and result.num_rows == 100
    assert sorted(i for _, rows in result.write_returns for i in rows) == list(range(100))
    assert len(result.write_returns) == (4 if distributed else 1)


def test_write_datasink_failure_is_reported_then_raised(local):
    sink = _CollectSink(fail_on=42)
    with pytest.raises(RuntimeError, match="sink broke"):
        rd.range(100, override_num_blocks=4).write_datasink(sink)
    assert sink.events[0] == "start" and sink.events[-1][0] == "failed"
    with pytest.raises(TypeError, match="needs a raylite.data.Datasink"):
        rd.range(3).write_datasink(object())


def test_read_orc(local, tmp_path):
    for i in range(2):
        orc.write_table(pa.table({"x": np.arange(i * 10, i * 10 + 10), "s": [f"v{j}" for j in range(10)]}),
                        str(tmp_path / f"part-{i}.orc"))
    ds = rd.read_orc(str(tmp_path))
    assert sorted(r["x"] for r in ds.take_all()) == list(range(20))
    assert rd.read_orc(str(tmp_path), columns=["s"]).columns() == ["s"]


def test_read_avro(local, tmp_path, monkeypatch):
    fastavro = pytest.importorskip("fastavro", reason="fastavro is not installed")
    schema = {"type": "record", "name": "R", "fields": [{"name": "a", "type": "long"}, {"name": "b", "type": "string"}]}
    with open(tmp_path / "one.avro", "wb") as f:
        fastavro.writer(f, schema, [{"a": i, "b": str(i)} for i in range(30)])
    assert rd.read_avro(str(tmp_path / "one.avro")).take_all() == [{"a": i, "b": str(i)} for i in range(30)]
    monkeypatch.setitem(sys.modules, "fastavro", None)  # as if it were not installed
    with pytest.raises(ImportError, match="pip install fastavro"):
        rd.read_avro(str(tmp_path / "one.avro"))


def test_from_huggingface(local):
    datasets = pytest.importorskip("datasets", reason="the 'datasets' package is not installed")
    hf = datasets.Dataset.from_dict({"text": [f"t{i}" for i in range(50)], "label": [i % 2 for i in range(50)]})
    assert rd.from_huggingface(hf).take_all() == [{"text": f"t{i}", "label": i % 2} for i in range(50)]
    odd = hf.filter(lambda r: r["label"] == 1)  # an indices mapping over the same table
    assert rd.from_huggingface(odd).count() == 25
    assert rd.from_huggingface(hf, override_num_blocks=5).materialize().num_blocks() == 5
    with pytest.raises(TypeError, match="pass one split"):
        rd.from_huggingface(datasets.DatasetDict({"train": hf}))


def test_preprocessors_match_rays_documented_outputs(local):
    ds = rd.from_pandas(pd.DataFrame({"X1": [-2, 0, 2], "X2": [-3, -3, 3], "X3": [1, 1, 1]}))
    scaled = StandardScaler(columns=["X1", "X2"]).fit_transform(ds).to_pandas()
    np.testing.assert_allclose(scaled["X1"], [-1.224745, 0.0, 1.224745], atol=1e-6)
    np.testing.assert_allclose(scaled["X2"], [-0.707107, -0.707107, 1.414214], atol=1e-6)
    mm = MinMaxScaler(columns=["X1", "X3"], output_columns=["a", "b"]).fit_transform(ds).to_pandas()
    assert list(mm["a"]) == [0.0, 0.5, 1.0] and list(mm["b"]) == [0.0, 0.0, 0.0] and list(mm["X1"]) == [-2, 0, 2]

    colors = rd.from_pandas(pd.DataFrame({"color": ["red", "green", "red", "red", "blue", "green"]}))
    enc = OneHotEncoder(columns=["color"])
    assert [list(v) for v in enc.fit_transform(colors).to_pandas()["color"]] == [
        [0, 0, 1], [0, 1, 0], [0, 0, 1], [0, 0, 1], [1, 0, 0], [0, 1, 0]]
    assert [list(v) for v in enc.transform_batch(pd.DataFrame({"color": ["yellow"]}))["color"]] == [[0, 0, 0]]
    top2 = OneHotEncoder(columns=["color"], max_categories={"color": 2}).fit_transform(colors).to_pandas()
    assert [list(v) for v in top2["color"]][:5] == [[1, 0], [0, 1], [1, 0], [1, 0], [0, 0]]
    le = LabelEncoder("color")
    assert list(le.fit_transform(colors).to_pandas()["color"]) == [2, 1, 2, 2, 0, 1]
    assert le.stats_ == {"unique_values(color)": {"blue": 0, "green": 1, "red": 2}}


def test_chain_concatenator_transform_batch_and_not_fitted(local):
    ds = rd.from_pandas(pd.DataFrame({"X1": [-2.0, 0.0, 2.0], "X2": [1.0, 2.0, 3.0], "y": [0, 1, 0]}))
    chain = Chain(StandardScaler(["X1"]), Concatenator(["X1", "X2"], output_column_name="features", dtype=np.float32))
    with pytest.raises(PreprocessorNotFittedException, match="fit"):
        chain.transform(ds)
    rows = chain.fit_transform(ds).take_all()
    assert list(rows[0]) == ["y", "features"] and rows[0]["features"].dtype == np.float32
    np.testing.assert_allclose(rows[2]["features"], [1.224745, 3.0], atol=1e-6)
    batch = chain.transform_batch({"X1": np.array([2.0]), "X2": np.array([5.0]), "y": np.array([1])})
    assert isinstance(batch, dict) and batch["features"].shape == (1, 2)
    assert chain.fit_status().value == "FITTED"


def test_train_v2_import_path_is_the_same_trainer():
    from raylite.train.data_parallel_trainer import DataParallelTrainer
    from raylite.train.v2.api.data_parallel_trainer import DataParallelTrainer as V2

    assert V2 is DataParallelTrainer
