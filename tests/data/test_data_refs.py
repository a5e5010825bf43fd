"""Datasets from object refs and back (Ray's ``from_*_refs`` / ``Dataset.to_*_refs``).

Ray's contract: ``from_*_refs`` takes one ref or a list of refs, one block per object, and the
refs stay the caller's (still readable after the dataset is gone); ``to_*_refs`` gives one ref
per block; ``to_arrow_refs`` hands out the blocks themselves.
"""

import gc
import sys

import cloudpickle
import numpy as np
import pandas as pd
import pyarrow as pa
import pytest

import raylite
import raylite.data as rd

pytestmark = pytest.mark.usefixtures("ray_cluster")
cloudpickle.register_pickle_by_value(sys.modules[__name__])  # workers cannot import test modules


def _frames():
    return [pd.DataFrame({"a": [1, 2, 3], "b": ["x", "y", "z"]}), pd.DataFrame({"a": [4], "b": ["w"]})]


def test_from_pandas_refs_one_block_per_frame_and_refs_stay_the_callers():
    frames = _frames()
    refs = [raylite.put(df) for df in frames]
    ds = rd.from_pandas_refs(refs)
    assert ds.num_blocks() == 2 and ds.count() == 4
    pd.testing.assert_frame_equal(ds.to_pandas(), pd.concat(frames, ignore_index=True))
    del ds
    gc.collect()
    for ref, df in zip(refs, frames):
        pd.testing.assert_frame_equal(raylite.get(ref), df)


def test_from_pandas_refs_takes_a_single_ref():
    df = _frames()[0]
    ds = rd.from_pandas_refs(raylite.put(df))
    assert ds.take_all() == df.to_dict("records")


def test_from_numpy_refs_rows_are_the_first_axis_in_column_data():
    grid = np.arange(12, dtype=np.float32).reshape(4, 3)
    ds = rd.from_numpy_refs([raylite.put(grid), raylite.put(np.arange(2, dtype=np.float32).repeat(3).reshape(2, 3))])
    assert ds.columns() == ["data"] and ds.num_blocks() == 2
    rows = [r["data"].tolist() for r in ds.take_all()]
    assert rows == grid.tolist() + [[0, 0, 0], [1, 1, 1]]
    assert rd.from_numpy_refs(raylite.put(np.arange(5))).sum("data") == 10


def test_from_arrow_refs_uses_the_tables_as_blocks():
    tables = [pa.table({"x": [1, 2]}), pa.table({"x": [3]})]
    refs = [raylite.put(t) for t in tables]
    ds = rd.from_arrow_refs(refs)
    assert ds.to_arrow_refs() == refs  # the caller's objects are the blocks: no copy
    assert ds.sum("x") == 6
    assert rd.from_arrow_refs(refs[0]).count() == 2


def test_from_arrow_refs_reads_the_ipc_stream_format():
    table = pa.table({"x": [5, 6, 7]})
    sink = pa.BufferOutputStream()
    with pa.ipc.new_stream(sink, table.schema) as writer:
        writer.write_table(table)
    ds = rd.from_arrow_refs(raylite.put(sink.getvalue().to_pybytes()))
    assert ds.take_all() == [{"x": 5}, {"x": 6}, {"x": 7}]


def test_empty_list_is_an_empty_dataset():
    assert rd.from_pandas_refs([]).count() == 0
    assert rd.from_arrow_refs([]).count() == 0


def test_to_refs_give_one_ref_per_block():
    ds = rd.range(10, override_num_blocks=3).map(lambda r: {"id": r["id"], "sq": r["id"] ** 2})
    n = ds.materialize().num_blocks()
    pandas_refs = ds.to_pandas_refs()
    arrow_refs = ds.to_arrow_refs()
    numpy_refs = ds.to_numpy_refs()
    column_refs = ds.to_numpy_refs(column="sq")
    assert n == 3 and len(pandas_refs) == len(arrow_refs) == len(numpy_refs) == len(column_refs) == n
    frames = raylite.get(pandas_refs)
    assert all(isinstance(f, pd.DataFrame) for f in frames)
    assert pd.concat(frames, ignore_index=True)["sq"].tolist() == [i * i for i in range(10)]
    assert all(isinstance(t, pa.Table) for t in raylite.get(arrow_refs))
    dicts = raylite.get(numpy_refs)
    assert sorted(dicts[0]) == ["id", "sq"] and isinstance(dicts[0]["id"], np.ndarray)
    assert np.concatenate(raylite.get(column_refs)).tolist() == [i * i for i in range(10)]


def test_to_refs_of_a_dataset_held_in_this_process():
    ds = rd.from_items([{"v": i} for i in range(6)], override_num_blocks=2)
    refs = ds.to_arrow_refs()
    assert len(refs) == 2 and sum(t.num_rows for t in raylite.get(refs)) == 6
    assert pd.concat(raylite.get(ds.to_pandas_refs()))["v"].tolist() == list(range(6))


def test_round_trip_through_refs():
    frames = _frames()
    back = rd.from_pandas_refs(rd.from_pandas_refs([raylite.put(f) for f in frames]).to_pandas_refs())
    pd.testing.assert_frame_equal(back.to_pandas(), pd.concat(frames, ignore_index=True))


def test_values_instead_of_refs_are_a_clear_error():
    df = _frames()[0]
    with pytest.raises(ValueError, match=r"raylite.put\(value\).*from_pandas\(\)"):
        rd.from_pandas_refs(df)
    with pytest.raises(ValueError, match="list containing a ndarray"):
        rd.from_numpy_refs([raylite.put(np.arange(3)), np.arange(3)])
    with pytest.raises(TypeError, match="holds a builtins.dict, not a pandas DataFrame"):
        rd.from_pandas_refs(raylite.put({"a": [1]}))
    with pytest.raises(ValueError, match="no such column"):
        rd.range(3).to_numpy_refs(column="nope")
