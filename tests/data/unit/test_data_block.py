"""Blocks: conversions between Arrow and the user's rows/batches, and their errors."""

import numpy as np
import pandas as pd
import pyarrow as pa
import pytest

from raylite.data.block import (
    BatchTypeError,
    SchemaMismatchError,
    batch_to_block,
    concat_blocks,
    items_to_block,
    iter_table_rows,
    rows_to_block,
    table_to_batch,
    table_to_pandas,
    unify_schemas,
)


def test_numpy_batch_round_trip_keeps_tensors_and_strings():
    images = np.arange(24, dtype=np.float32).reshape(4, 2, 3)
    block = batch_to_block({"img": images, "text": np.array(["a", "b", "c", "d"]), "y": [1, 2, 3, 4]})
    assert block.num_rows == 4
    batch = table_to_batch(block, "numpy")
    assert batch["img"].shape == (4, 2, 3) and batch["img"].dtype == np.float32
    np.testing.assert_array_equal(batch["img"], images)
    assert list(batch["text"]) == ["a", "b", "c", "d"]
    assert batch["y"].tolist() == [1, 2, 3, 4]


def test_writable_batches_are_copies():
    block = pa.table({"x": np.arange(5)})
    ro = table_to_batch(block, "numpy")["x"]
    rw = table_to_batch(block, "numpy", writable=True)["x"]
    rw[0] = 100
    assert rw.flags.writeable and block.column("x")[0].as_py() == 0 and ro[0] == 0


def test_pandas_batch_accepts_2d_column_assignment():
    df = table_to_pandas(pa.table({"instruction": ["a", "b", "c"]}))
    df["input_ids"] = np.ones((3, 5), dtype=np.int64)  # plain pandas refuses this
    assert isinstance(df, pd.DataFrame)
    block = batch_to_block(df)
    out = table_to_batch(block, "numpy")
    assert out["input_ids"].shape == (3, 5)
    assert list(out["instruction"]) == ["a", "b", "c"]


def test_rows_with_missing_keys_become_nulls_and_arbitrary_objects_survive():
    class Thing:
        def __init__(self, v):
            self.v = v

    block = rows_to_block([{"a": 1, "o": Thing(1)}, {"a": 2, "b": "x", "o": Thing(2)}])
    rows = list(iter_table_rows(block))
    assert rows[0]["b"] is None and rows[1]["b"] == "x"
    assert [r["o"].v for r in rows] == [1, 2]


def test_items_without_dicts_go_to_item_column():
    assert list(iter_table_rows(items_to_block([1, 2]))) == [{"item": 1}, {"item": 2}]


def test_ragged_arrays_become_list_columns():
    block = batch_to_block({"tok": np.array([np.arange(2), np.arange(3)], dtype=object)})
    rows = list(iter_table_rows(block))
    assert [list(r["tok"]) for r in rows] == [[0, 1], [0, 1, 2]]


@pytest.mark.parametrize("bad", [[1, 2, 3], 7, None, "text"])
def test_non_batch_return_is_a_clear_type_error(bad):
    with pytest.raises(BatchTypeError, match="operator MapBatches\\(f\\).*dict of"):
        batch_to_block(bad, where="operator MapBatches(f)")


def test_scalar_column_and_unequal_lengths_are_rejected():
    with pytest.raises(BatchTypeError, match="Column 'x'.*scalar"):
        batch_to_block({"x": 3})
    with pytest.raises(ValueError, match="different lengths"):
        batch_to_block({"x": [1, 2], "y": [1]})


def test_concat_unifies_compatible_and_names_conflicting_columns():
    a = pa.table({"x": [1], "y": ["a"]})
    b = pa.table({"x": [2]})
    assert concat_blocks([a, b]).column("y").to_pylist() == ["a", None]
    c = pa.table({"x": ["not a number"]})
    with pytest.raises(SchemaMismatchError, match="Column 'x'"):
        unify_schemas([a.schema, c.schema], ["file1.parquet", "file2.parquet"])


def test_batch_formats():
    block = pa.table({"x": [1, 2]})
    assert isinstance(table_to_batch(block, "pandas"), pd.DataFrame)
    assert table_to_batch(block, "pyarrow") is block
    with pytest.raises(ValueError, match="batch_format"):
        table_to_batch(block, "torch")


def test_compact_block_copies_only_slices_that_view_much_more():
    """A slice serializes its parent's whole buffers; compact_block makes it its own size."""
    import pickle

    from raylite.data.block import compact_block

    big = pa.table({"x": np.arange(1_000_000), "s": pa.array([str(i) for i in range(1_000_000)])})
    part = big.slice(500_000, 1000)
    small = compact_block(part)
    assert small.equals(part) and len(pickle.dumps(small, protocol=5)) < 100_000
    assert len(pickle.dumps(part, protocol=5)) > 1_000_000  # why it is needed
    assert compact_block(big) is big  # a whole table is left alone
    chunks = pa.concat_tables([big.slice(i * 250_000, 250_000) for i in range(4)])
    assert len(pickle.dumps(compact_block(chunks), protocol=5)) < 1.5 * big.nbytes  # not 4x
    from raylite.data.block import to_arrow_array

    tensor = pa.table({"d": to_arrow_array(np.ones((100_000, 2, 2)))}).slice(5, 3)
    assert compact_block(tensor).equals(tensor) and compact_block(tensor).nbytes == tensor.nbytes
