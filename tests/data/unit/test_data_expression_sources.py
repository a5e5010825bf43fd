"""Ray 2.60's other expression kinds and Expr methods: math, cast/DataType, bracket access,
.arr/.map, udf, unnest, random/uuid/ids, download, and GroupedData.with_column."""

from __future__ import annotations

import math
import re

import pyarrow as pa
import pyarrow.compute as pc
import pytest

import raylite.data as rd
from raylite.data.datatype import DataType
from raylite.data.expressions import (
    col,
    download,
    monotonically_increasing_id,
    random,
    udf,
    unnest,
    uuid,
)


def _col(ds, expr):
    return [r["out"] for r in ds.with_column("out", expr).take_all()]


def test_math_methods(local):
    ds = rd.from_items([{"x": -2.5}, {"x": 4.0}])
    assert _col(ds, col("x").abs()) == [2.5, 4.0]
    assert _col(ds, col("x").negate()) == [2.5, -4.0]
    assert _col(ds, col("x").sign()) == [-1.0, 1.0]
    assert _col(ds, col("x").power(2)) == [6.25, 16.0]
    assert _col(ds, col("x").floor()) == [-3.0, 4.0]
    assert _col(ds, col("x").ceil()) == [-2.0, 4.0]
    assert _col(ds, col("x").trunc()) == [-2.0, 4.0]
    assert _col(ds, col("x").abs().log2()) == [pytest.approx(math.log2(2.5)), 2.0]
    assert _col(ds, col("x").sin()) == [pytest.approx(math.sin(-2.5)), pytest.approx(math.sin(4.0))]


def test_cast_with_datatype(local):
    ds = rd.range(3)
    assert _col(ds, col("id").cast(DataType.string())) == ["0", "1", "2"]
    assert _col(ds, (col("id") % 2).cast(DataType.float64())) == [0.0, 1.0, 0.0]
    assert DataType.list(DataType.int64()).to_arrow_dtype() == pa.list_(pa.int64())
    assert DataType.from_numpy("float32").is_floating_type()
    assert DataType.struct([("a", DataType.int32())]).is_struct_type()
    with pytest.raises(TypeError, match="DataType"):
        col("id").cast("int")


def test_bracket_access_and_array_map_namespaces(local):
    ds = rd.from_arrow(pa.table({
        "items": [[1, 2, 3], [4, 5]],
        "user": pa.array([{"name": "a", "age": 3}, {"name": "b", "age": 4}]),
        "vec": pa.array([[1, 2], [3, 4]], type=pa.list_(pa.int64(), 2)),
        "hdr": pa.array([[("k", 1)], [("j", 2), ("l", 3)]], type=pa.map_(pa.string(), pa.int64())),
    }))
    assert _col(ds, col("items").list[0]) == [1, 4]
    assert _col(ds, col("items").list[1:3]) == [[2, 3], [5]]
    assert _col(ds, col("user").struct["age"]) == [3, 4]
    assert _col(ds, col("user").struct[0]) == ["a", "b"]
    out = ds.with_column("out", col("vec").arr.to_list()).take_all()
    assert [r["out"] for r in out] == [[1, 2], [3, 4]]
    assert _col(ds, col("hdr").map.keys()) == [["k"], ["j", "l"]]
    assert _col(ds, col("hdr").map.values()) == [[1], [2, 3]]


def test_udf_functions_classes_and_unnest(local):
    @udf(return_dtype=DataType.int64())
    def add(a, b):
        return pc.add(a, b)

    @udf(return_dtype=DataType.int64())
    class Offset:
        def __init__(self, by):
            self.by = by

        def __call__(self, x):
            return pc.add(x, self.by)

    @udf(return_dtype=DataType.struct([("s", DataType.int64()), ("p", DataType.int64())]))
    def both(a, b):
        return pa.StructArray.from_arrays([pc.add(a, b).combine_chunks(), pc.multiply(a, b).combine_chunks()],
                                          names=["s", "p"])

    ds = rd.from_items([{"a": 2, "b": 10}, {"a": 3, "b": 20}])
    assert _col(ds, add(col("a"), col("b"))) == [12, 23]
    assert _col(ds, Offset(5)(col("a"))) == [7, 8]
    rows = ds.with_columns({"a2": col("a") * 2}, unnest(both(col("a"), col("b")))).take_all()
    assert rows == [{"a": 2, "b": 10, "a2": 4, "s": 12, "p": 20}, {"a": 3, "b": 20, "a2": 6, "s": 23, "p": 60}]
    with pytest.raises(TypeError, match="struct"):
        ds.with_columns(unnest(col("a"))).take_all()


def test_generated_columns(local, tmp_path):
    ids = _col(rd.range(6, override_num_blocks=3), monotonically_increasing_id())
    assert len(set(ids)) == 6
    per_task: dict[int, list[int]] = {}  # task index in the high bits, row number in the low 33
    for i in ids:
        per_task.setdefault(i >> 33, []).append(i & ((1 << 33) - 1))
    assert all(sorted(rows) == list(range(len(rows))) for rows in per_task.values())
    seeded = [_col(rd.range(5), random(seed=7)) for _ in range(2)]
    assert seeded[0] == seeded[1] and all(0 <= v < 1 for v in seeded[0])
    uuids = _col(rd.range(3), uuid())
    assert len(set(uuids)) == 3 and all(re.fullmatch(r"[0-9a-f-]{36}", u) for u in uuids)
    path = tmp_path / "blob.bin"
    path.write_bytes(b"\x00payload")
    assert _col(rd.from_items([{"uri": str(path)}, {"uri": None}]), download("uri")) == [b"\x00payload", None]


def test_grouped_with_column_then_sort(local):
    ds = (rd.from_items([{"g": 2, "v": 5}, {"g": 1, "v": 1}, {"g": 1, "v": 2}])
          .groupby("g").with_column("v2", col("v") * 2).sort(["g", "v"]))
    assert ds.take_all() == [{"g": 1, "v": 1, "v2": 2}, {"g": 1, "v": 2, "v2": 4}, {"g": 2, "v": 5, "v2": 10}]
