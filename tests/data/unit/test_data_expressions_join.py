"""Expressions (filter(expr=...), with_column(s)) and Dataset.join, on the in-process submitter."""

import pandas as pd
import pyarrow as pa
import pytest

import raylite.data as rd
from raylite.data.expressions import BinaryExpr, Operation, col, lit


def _people():
    return rd.from_items([{"name": n, "age": a, "score": s}
                          for n, a, s in [("ann", 31, 1.5), ("bob", 17, None), ("cy", 45, 3.0), ("di", 22, 0.5)]])


def test_expression_tree_repr_and_to_pyarrow():
    e = ((col("a") + 1) * 2 > lit(3)) & ~col("b").is_null()
    assert isinstance(e, BinaryExpr) and e.op is Operation.AND
    assert repr(e) == "((((col('a') + lit(1)) * lit(2)) > lit(3)) & ~col('b').is_null())"
    assert e.columns() == {"a", "b"}
    table = pa.table({"a": [1, 5], "b": [None, 1]})
    assert table.filter(e.to_pyarrow()).to_pydict() == {"a": [5], "b": [1]}
    assert (col("x") * 2).alias("y").name == "y"
    with pytest.raises(TypeError, match="no truth value"):
        bool(col("a") > 1)


def test_filter_with_expr_and_string_forms(local):
    ds = _people()
    assert [r["name"] for r in ds.filter(expr=(col("age") >= 22) & (col("score") > 1)).take_all()] == ["ann", "cy"]
    assert [r["name"] for r in ds.filter(expr=col("name").is_in(["bob", "di"])).take_all()] == ["bob", "di"]
    assert [r["name"] for r in ds.filter(expr=col("score").is_null() | (col("age") % 2 == 1)).take_all()] == [
        "ann", "bob", "cy"]
    assert [r["name"] for r in ds.filter(expr="age > 30 and score is not None").take_all()] == ["ann", "cy"]


def test_with_column_and_with_columns(local):
    ds = _people()
    out = ds.with_column("next_age", col("age") + 1).with_columns(
        {"double": col("score") * 2, "tag": col("name") + lit("!"), "age": col("age") * 10, "one": lit(1)})
    rows = out.take_all()
    assert list(rows[0]) == ["name", "age", "score", "next_age", "double", "tag", "one"]
    assert rows[0] == {"name": "ann", "age": 310, "score": 1.5, "next_age": 32, "double": 3.0, "tag": "ann!",
                       "one": 1}
    assert rows[1]["double"] is None  # nulls propagate
    assert out.count() == 4


def test_expression_errors_are_clear(local):
    ds = _people()
    with pytest.raises(KeyError, match=r"\['nope'\] not in"):
        ds.filter(expr=col("nope") > 1).take_all()
    with pytest.raises(TypeError, match="not booleans"):
        ds.filter(expr=col("age") + 1).take_all()
    with pytest.raises(TypeError, match="expected an Expr"):
        ds.with_column("x", lambda r: 1)
    with pytest.raises(TypeError, match="takes an Expr"):
        ds.filter(expr=3)
    with pytest.raises(ValueError, match="exactly one of fn or expr"):
        ds.filter()


def test_documentation_join_example(local):
    doubles_ds = rd.range(4).map(lambda row: {"id": row["id"], "double": int(row["id"]) * 2})
    squares_ds = rd.range(4).map(lambda row: {"id": row["id"], "square": int(row["id"]) ** 2})
    joined = doubles_ds.join(squares_ds, join_type="inner", num_partitions=2, on=("id",))
    assert sorted(joined.take_all(), key=lambda r: r["id"]) == [
        {"id": i, "double": 2 * i, "square": i * i} for i in range(4)]
    assert joined.materialize().num_blocks() == 2  # one block per partition


@pytest.mark.parametrize("join_type,how", [("inner", "inner"), ("left_outer", "left"), ("right_outer", "right"),
                                           ("full_outer", "outer")])
def test_join_types_match_pandas_merge(local, join_type, how):
    left = pd.DataFrame({"k": [i % 7 for i in range(40)], "a": range(40), "tags": [[i] for i in range(40)]})
    right = pd.DataFrame({"k": [3, 4, 5, 9, 9, 11], "b": ["x", "y", "z", "p", "q", "r"]})
    got = rd.from_pandas(left, override_num_blocks=3).join(
        rd.from_pandas(right, override_num_blocks=2), join_type, num_partitions=4, on=("k",)).to_pandas()
    want = left.merge(right, on="k", how=how)
    key = ["k", "a", "b"]
    got = got[["k", "a", "b"]].sort_values(key, na_position="last").reset_index(drop=True)
    want = want[["k", "a", "b"]].sort_values(key, na_position="last").reset_index(drop=True)
    assert len(got) == len(want)
    pd.testing.assert_frame_equal(got, want, check_dtype=False)


def test_join_right_on_suffixes_semi_anti_and_errors(local):
    left = rd.from_items([{"k": i, "v": i} for i in range(6)])
    right = rd.from_items([{"key": i, "v": -i} for i in range(3, 9)])
    rows = left.join(right, "inner", 2, on=("k",), right_on=("key",), left_suffix="_l", right_suffix="_r").take_all()
    assert sorted(rows, key=lambda r: r["k"]) == [{"k": i, "v_l": i, "v_r": -i} for i in (3, 4, 5)]
    default = left.join(right, "inner", 2, on=("k",), right_on=("key",)).take_all()
    assert set(default[0]) == {"k", "v", "v_right"}
    assert sorted(r["k"] for r in left.join(right, "left_semi", 3, on=("k",), right_on=("key",)).take_all()) == [
        3, 4, 5]
    assert sorted(r["k"] for r in left.join(right, "left_anti", 3, on=("k",), right_on=("key",)).take_all()) == [
        0, 1, 2]
    with pytest.raises(ValueError, match="join_type must be one of"):
        left.join(right, "cross", 2)
    with pytest.raises(ValueError, match="num_partitions must be a positive int"):
        left.join(right, "inner", 0)
    with pytest.raises(KeyError, match="join key"):
        left.join(right, "inner", 2, on=("nope",)).take_all()
