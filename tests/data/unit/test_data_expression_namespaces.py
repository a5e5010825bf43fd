"""Expression namespaces (.str, .list, .struct, .dt): Ray 2.60's methods, evaluated per block."""

from __future__ import annotations

import datetime
import pickle

import pytest

import raylite.data as rd
from raylite.data.expressions import col

ROWS = [
    {"s": " Hello World ", "tags": [3, 1, 2], "nested": [[1, 2], [3]], "point": {"x": 1, "y": "a"},
     "ts": datetime.datetime(2024, 5, 6, 7, 8, 9)},
    {"s": "yo", "tags": [9], "nested": [[4]], "point": {"x": 2, "y": "b"},
     "ts": datetime.datetime(2023, 1, 2, 23, 59, 59)},
]


def _column(expr):
    return [r["out"] for r in rd.from_items(ROWS).with_column("out", expr).take_all()]


@pytest.mark.parametrize(("expr", "expected"), [
    (col("s").str.upper(), [" HELLO WORLD ", "YO"]),
    (col("s").str.strip(), ["Hello World", "yo"]),
    (col("s").str.lstrip(" H"), ["ello World ", "yo"]),
    (col("s").str.len(), [13, 2]),
    (col("s").str.contains("World"), [True, False]),
    (col("s").str.starts_with("y"), [False, True]),
    (col("s").str.replace("o", "0"), [" Hell0 W0rld ", "y0"]),
    (col("s").str.pad(4, "*", "left"), [" Hello World ", "**yo"]),
    (col("s").str.split_whitespace(), [["", "Hello", "World", ""], ["yo"]]),  # Arrow keeps the ends
    (col("s").str.match("%World%"), [True, False]),
    (col("tags").list.len(), [3, 1]),
    (col("tags").list.get(0), [3, 9]),
    (col("tags").list.get(-1), [2, 9]),
    (col("tags").list.get(5), [None, None]),
    (col("tags").list.slice(1), [[1, 2], []]),
    (col("tags").list.sort(), [[1, 2, 3], [9]]),
    (col("tags").list.sort("descending"), [[3, 2, 1], [9]]),
    (col("nested").list.flatten(), [[1, 2, 3], [4]]),
    (col("point").struct.field("y"), ["a", "b"]),
    (col("point").struct.field_by_index(0), [1, 2]),
    (col("ts").dt.year(), [2024, 2023]),
    (col("ts").dt.hour(), [7, 23]),
    (col("ts").dt.strftime("%Y-%m"), ["2024-05", "2023-01"]),
])
def test_namespace_methods(local, expr, expected):
    assert _column(expr) == expected


def test_namespace_calls_filter_compose_and_travel(local):
    ds = rd.from_items(ROWS)
    assert [r["s"] for r in ds.filter(expr=col("s").str.len() < 5).take_all()] == ["yo"]
    assert _column(col("s").str.strip().str.lower().str.len() + 1) == [12, 3]
    expr = col("tags").list.get(0)
    assert repr(pickle.loads(pickle.dumps(expr))) == "col('tags').list.get(0)"


def test_namespace_set_matches_ray_2_60():
    ray_str = {"byte_len", "capitalize", "center", "contains", "count", "count_regex", "ends_with", "extract",
               "find", "find_regex", "is_alnum", "is_alpha", "is_ascii", "is_decimal", "is_digit", "is_lower",
               "is_numeric", "is_printable", "is_space", "is_title", "is_upper", "len", "lower", "lpad",
               "lstrip", "match", "match_regex", "pad", "repeat", "replace", "replace_regex", "replace_slice",
               "reverse", "rpad", "rstrip", "slice", "split", "split_regex", "split_whitespace",
               "starts_with", "strip", "swapcase", "title", "upper"}
    public = {ns: {m for m in dir(getattr(col("x"), ns)) if not m.startswith("_")}
              for ns in ("str", "list", "struct", "dt")}
    assert public["str"] == ray_str
    assert public["list"] == {"flatten", "get", "len", "slice", "sort"}
    assert public["struct"] == {"field", "field_by_index"}
    assert public["dt"] == {"ceil", "day", "floor", "hour", "minute", "month", "round", "second",
                            "strftime", "year"}
