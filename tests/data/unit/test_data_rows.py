"""Row-wise map / filter / flat_map: rows are lazy dict views; what a UDF sees must not change."""

import copy
import datetime
import json
import pickle

import numpy as np
import pyarrow as pa
import pytest

import raylite.data as rd
from raylite.data._internal.rows import LazyRow, iter_lazy_rows
from raylite.data.block import BatchTypeError, iter_table_rows


def _table():
    return pa.table({
        "i": pa.array([1, None, 3], pa.int64()),
        "i32": pa.array([1, 2, 3], pa.int32()),
        "f": pa.array([0.5, 1.5, float("nan")], pa.float32()),
        "b": [True, False, None],
        "s": ["a", None, "ccc"],
        "ts": pa.array([datetime.datetime(2024, 1, 1, 12), None, datetime.datetime(2024, 3, 1)], pa.timestamp("us")),
        "lst": [[1, 2], [], None],
        "st": [{"x": 1, "y": "a"}, None, {"x": 3, "y": "c"}],
        "tensor": pa.FixedShapeTensorArray.from_numpy_ndarray(np.arange(12, dtype=np.float32).reshape(3, 2, 2)),
    })


def _same(a, b):
    """Equality that treats NaN as equal and compares numpy arrays by value."""
    assert a.keys() == b.keys()
    for k in a:
        x, y = a[k], b[k]
        assert type(x) is type(y), (k, type(x), type(y))
        if isinstance(x, np.ndarray):
            np.testing.assert_array_equal(x, y)
        elif isinstance(x, float) and x != x:
            assert y != y
        else:
            assert x == y, k


def test_lazy_rows_hold_exactly_the_values_of_plain_rows():
    table = _table()
    for lazy, plain in zip(iter_lazy_rows(table), iter_table_rows(table)):
        assert isinstance(lazy, dict)
        _same(dict(lazy), plain)
        assert list(lazy.keys()) == list(plain.keys())


def test_dict_protocol_without_reading_every_column():
    row = next(iter_lazy_rows(_table()))
    assert "s" in row and "nope" not in row
    assert row.get("nope", 7) == 7 and row.get("s") == "a"
    assert row["i"] == 1 and type(row["i"]) is int
    with pytest.raises(KeyError, match="nope"):
        row["nope"]
    assert dict.__len__(row) == 2  # only the two columns read so far were converted
    assert len(row) == 9 and set(row) == set(_table().column_names)
    assert dict(row.items())["st"] == {"x": 1, "y": "a"}


def test_mutation_json_pickle_copy_and_equality():
    row = next(iter_lazy_rows(_table().select(["i", "s", "lst"])))
    row["new"] = 5
    row["s"] = "changed"  # set before ever being read: the block's value must not come back
    assert row["s"] == "changed"
    assert list(row) == ["i", "s", "lst", "new"]  # a plain dict's order: columns, then added keys
    assert json.loads(json.dumps(row)) == {"i": 1, "s": "changed", "lst": [1, 2], "new": 5}
    assert {**row} == row == {"i": 1, "s": "changed", "lst": [1, 2], "new": 5}
    assert pickle.loads(pickle.dumps(row)) == row and type(pickle.loads(pickle.dumps(row))) is dict
    assert copy.deepcopy(row) == row and row.copy() == row
    del row["lst"]
    assert "lst" not in row and row.pop("new") == 5 and row == {"i": 1, "s": "changed"}
    assert repr(row) == "{'i': 1, 's': 'changed'}"
    assert (row | {"z": 1}) == {"i": 1, "s": "changed", "z": 1}
    other = next(iter_lazy_rows(pa.table({"i": [1], "s": ["changed"]})))
    assert row == other and not (row != other)


def test_map_sees_python_values_and_returned_rows_become_new_rows(local):
    seen = []

    def fn(row):
        seen.append({k: type(v).__name__ for k, v in row.items()})
        row["i2"] = None if row["i"] is None else row["i"] * 2
        return row

    source = rd.from_arrow(_table())
    out = source.map(fn).take_all()
    assert seen[0] == {"i": "int", "i32": "int", "f": "float", "b": "bool", "s": "str", "ts": "datetime",
                       "lst": "list", "st": "dict", "tensor": "ndarray"}
    assert seen[1]["i"] == "NoneType" and seen[1]["s"] == "NoneType"
    assert [r["i2"] for r in out] == [2, None, 6]
    assert list(out[0]) == [*_table().column_names, "i2"]
    assert out[2]["st"] == {"x": 3, "y": "c"} and out[0]["ts"] == datetime.datetime(2024, 1, 1, 12)
    assert "i2" not in source.take_all()[0]  # the input dataset is untouched


def test_filter_and_flat_map_with_args_and_nested_values(local):
    ds = rd.from_items([{"text": "x" * n, "tags": list(range(n % 3))} for n in range(20)])
    kept = ds.filter(lambda r, m: len(r["text"]) > m, fn_args=(10,)).take_all()
    assert [len(r["text"]) for r in kept] == list(range(11, 20))
    flat = ds.flat_map(lambda r: [{"t": t, "n": len(r["text"])} for t in r["tags"]]).take_all()
    assert flat == [{"t": t, "n": n} for n in range(20) for t in range(n % 3)]
    assert ds.flat_map(lambda r: [r, r]).count() == 40
    assert ds.filter(lambda r: np.bool_(len(r["tags"]) == 2)).count() == 6


def test_udf_reading_columns_conditionally_and_across_blocks(local):
    ds = rd.range(1000, override_num_blocks=4).map(lambda r: {"id": r["id"], "even": r["id"] % 2 == 0})
    out = ds.map(lambda r: {"v": r["id"] if r["even"] else -r["id"]}).take_all()
    assert [r["v"] for r in out] == [i if i % 2 == 0 else -i for i in range(1000)]


def test_row_udf_errors_name_the_row_and_keep_their_type(local):
    ds = rd.range(10)

    def bad(row):
        if row["id"] == 7:
            raise ValueError("boom")
        return True

    with pytest.raises(ValueError, match="boom") as info:
        ds.filter(bad).take_all()
    assert any("{'id': 7}" in n for n in info.value.__notes__)
    with pytest.raises(BatchTypeError, match="must return a bool"):
        ds.filter(lambda r: 1).take_all()
    with pytest.raises(BatchTypeError, match="must return a dict"):
        ds.map(lambda r: [r]).take_all()
    with pytest.raises(BatchTypeError, match="list of dicts"):
        ds.flat_map(lambda r: r).take_all()
    with pytest.raises(KeyError, match="missing"):
        ds.map(lambda r: {"x": r["missing"]}).take_all()


def test_lazy_row_type_is_internal():
    assert LazyRow.__module__ == "raylite.data._internal.rows"


def test_rows_a_udf_keeps_stay_intact(local):
    kept, every_other = [], []

    def keep_some(row):
        if row["id"] % 2 == 0:
            every_other.append(row)  # a row still referenced must never be reused for the next one
        kept.append(dict(row))
        return True

    assert rd.range(50, override_num_blocks=2).filter(keep_some).count() == 50
    # the two blocks run on two threads, in either order: compare what was kept, not its order
    assert sorted(r["id"] for r in every_other) == list(range(0, 50, 2))
    assert sorted(kept, key=lambda r: r["id"]) == [{"id": i} for i in range(50)]


def test_a_row_stored_inside_the_output_is_whole(local):
    out = rd.from_items([{"a": 1, "b": "x"}, {"a": 2, "b": "y"}]).map(lambda r: {"orig": r, "a2": r["a"] * 2})
    assert out.take_all() == [{"orig": {"a": 1, "b": "x"}, "a2": 2}, {"orig": {"a": 2, "b": "y"}, "a2": 4}]


def test_rows_returned_as_views_give_the_same_block_as_plain_dicts(local):
    from raylite.data.block import rows_to_block

    table = pa.table({"a": list(range(10)), "s": [f"v{i}" for i in range(10)], "f": [i / 2 for i in range(10)]})
    held = []

    def fn(row):
        row["a"] = row["a"] * 10  # override a column (keeps its place)
        if row["a"] % 20 == 0:
            row["extra"] = "x"  # a key only some rows have: None elsewhere
        if not held:
            held.append(row)
        return row if row["a"] != 90 else held[0]  # one row returned twice

    got = rd.from_arrow(table).map(fn).take_all()
    held.clear()
    want = rows_to_block([fn(r) for r in iter_table_rows(table)]).to_pylist()
    assert got == want and list(got[0]) == ["a", "s", "f", "extra"]
    assert got[9] == got[0] and got[1]["extra"] is None
