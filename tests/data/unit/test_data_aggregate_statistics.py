"""Ray 2.60's aggregations (Quantile, sketches, value counts, percentages) and AggregateFnV2,
checked against numpy / plain Python over several blocks and groups."""

from __future__ import annotations

import collections

import numpy as np
import pyarrow.compute as pc
import pytest

import raylite.data as rd
from raylite.data.aggregate import (
    AggregateFnV2,
    ApproximateQuantile,
    ApproximateTopK,
    AsList,
    Count,
    CountDistinct,
    MissingValuePercentage,
    Quantile,
    Unique,
    ValueCounter,
    ZeroPercentage,
)
from raylite.data.block import BlockAccessor

ROWS = [{"g": i % 3, "x": None if i % 7 == 0 else float(i), "s": "abcab"[i % 5], "z": i % 4}
        for i in range(60)]


def _ds(rows=ROWS, blocks=6):
    return rd.from_items(rows, override_num_blocks=blocks)


def _xs(rows, drop_nulls=True):
    return [r["x"] for r in rows if r["x"] is not None or not drop_nulls]


def test_quantile_interpolates_like_numpy_and_honours_nulls(local):
    for q in (0.0, 0.25, 0.5, 0.75, 1.0):
        got = _ds().aggregate(Quantile("x", q=q))["quantile(x)"]
        assert got == pytest.approx(np.quantile(_xs(ROWS), q))
    assert rd.range(100).aggregate(Quantile(on="id", q=0.75)) == {"quantile(id)": 74.25}
    assert _ds().aggregate(Quantile("x", ignore_nulls=False)) == {"quantile(x)": None}
    with pytest.raises(ValueError, match="between 0 and 1"):
        Quantile("x", q=1.5)


def test_per_group_statistics(local):
    out = {r["g"]: r for r in _ds().groupby("g").aggregate(
        Quantile("x"), CountDistinct("s"), AsList("z"), ValueCounter("s"), MissingValuePercentage("x"),
        ZeroPercentage("z")).take_all()}
    assert sorted(out) == [0, 1, 2]
    for g, row in out.items():
        mine = [r for r in ROWS if r["g"] == g]
        assert row["quantile(x)"] == pytest.approx(np.quantile(_xs(mine), 0.5))
        assert row["count_distinct(s)"] == len({r["s"] for r in mine})
        assert sorted(row["list(z)"]) == sorted(r["z"] for r in mine)
        counts = collections.Counter(r["s"] for r in mine)
        assert dict(zip(row["value_counter(s)"]["values"], row["value_counter(s)"]["counts"])) == counts
        assert row["missing_pct(x)"] == pytest.approx(100 * sum(r["x"] is None for r in mine) / len(mine))
        assert row["zero_pct(z)"] == pytest.approx(100 * sum(r["z"] == 0 for r in mine) / len(mine))


def test_count_and_unique_keep_nulls_by_default_as_in_ray(local):
    assert _ds().aggregate(Count("x")) == {"count(x)": 60}
    assert _ds().aggregate(Count("x", ignore_nulls=True)) == {"count(x)": len(_xs(ROWS))}
    assert None in _ds().aggregate(Unique("x"))["unique(x)"]
    assert None not in _ds().aggregate(Unique("x", ignore_nulls=True))["unique(x)"]
    assert sorted(_ds().aggregate(AsList("x", ignore_nulls=True))["list(x)"]) == sorted(_xs(ROWS))


def test_approximate_quantile_and_top_k(local):
    ds = rd.range(20_000, override_num_blocks=8)
    got = ds.aggregate(ApproximateQuantile("id", [0.1, 0.5, 0.9], quantile_precision=200))
    for value, q in zip(got["approx_quantile(id)"], (0.1, 0.5, 0.9)):
        assert abs(value - q * 20_000) < 20_000 * 0.03  # rank error of a few percent at most
    top = _ds().aggregate(ApproximateTopK("s", k=2))["approx_topk(s)"]
    expected = collections.Counter(r["s"] for r in ROWS).most_common(2)
    assert top == [{"s": v, "count": c} for v, c in expected]


class SumOfSquares(AggregateFnV2):
    """A user-defined aggregation written against Ray's interface."""

    def __init__(self, on, ignore_nulls=True):
        super().__init__(f"sum_sq({on})", lambda: 0.0, on=on, ignore_nulls=ignore_nulls)

    def aggregate_block(self, block):
        col = block.column(self.get_target_column())
        if col.null_count and not self._ignore_nulls:
            return None
        if BlockAccessor.for_block(block).count(self.get_target_column(), True) == 0:
            return None
        return pc.sum(pc.multiply(col, col)).as_py()

    def combine(self, current_accumulator, new):
        return current_accumulator + new

    def finalize(self, accumulator):
        return round(accumulator, 6)


def test_user_defined_aggregate_fn_v2(local):
    out = _ds().groupby("g").aggregate(SumOfSquares("x")).take_all()
    for row in out:
        mine = [r for r in ROWS if r["g"] == row["g"]]
        assert row["sum_sq(x)"] == pytest.approx(sum(x * x for x in _xs(mine)))
    assert _ds().aggregate(SumOfSquares("x", ignore_nulls=False)) == {"sum_sq(x)": None}
    assert SumOfSquares("x").get_agg_name() == "sum_sq"

    class Unnamed(SumOfSquares):
        def __init__(self):
            AggregateFnV2.__init__(self, "", float, on="x", ignore_nulls=True)

    with pytest.raises(ValueError, match="non-empty name"):
        Unnamed()


def test_block_accessor_column_statistics():
    import pyarrow as pa

    acc = BlockAccessor.for_block(pa.table({"x": [1, None, 3]}))
    assert (acc.count("x"), acc.count("x", True)) == (3, 2)
    assert (acc.sum("x", True), acc.sum("x", False), acc.min("x", True), acc.mean("x", True)) == (4, None, 1, 2.0)
    empty = BlockAccessor.for_block(pa.table({"x": pa.array([None], pa.int64())}))
    assert empty.sum("x", True) is None


def test_ray_docs_mean_written_with_agg_type_and_column_accessor(local):
    """Ray's aggregation docs write a user-defined Mean with `ray.data.block`'s AggType, Block
    and BlockColumnAccessor: the same program runs here under raylite.data.block."""
    from raylite.data.block import AggType, Block, BlockColumnAccessor

    class Mean(AggregateFnV2):
        def __init__(self, on, ignore_nulls=True, alias_name=None):
            super().__init__(alias_name or f"mean({on})", on=on, ignore_nulls=ignore_nulls,
                             zero_factory=lambda: [0, 0])

        def aggregate_block(self, block: Block) -> AggType:
            col = BlockColumnAccessor.for_column(block[self._target_col_name])
            count = col.count(ignore_nulls=self._ignore_nulls)
            if count == 0:
                return [0, 0]
            total = col.sum(ignore_nulls=self._ignore_nulls)
            return [0, 0] if total is None else [total, count]

        def combine(self, current_accumulator: AggType, new: AggType) -> AggType:
            return [current_accumulator[0] + new[0], current_accumulator[1] + new[1]]

        def finalize(self, accumulator: AggType):
            return accumulator[0] / accumulator[1] if accumulator[1] else None

    xs = _xs(ROWS)
    assert _ds().aggregate(Mean("x")) == {"mean(x)": pytest.approx(sum(xs) / len(xs))}


def test_block_module_offers_rays_public_names():
    import pyarrow as pa

    from raylite.data import block

    for name in ("T", "U", "KeyType", "AggType", "Block", "Schema", "BlockColumn", "BatchColumn",
                 "DataBatch", "DataBatchColumn", "CallableClass", "UserDefinedFunction",
                 "BlockPartition", "BlockPartitionMetadata", "BlockType", "BatchFormat",
                 "VALID_BATCH_FORMATS", "DEFAULT_BATCH_FORMAT", "BlockMetadata", "BlockAccessor",
                 "BlockColumnAccessor"):
        assert hasattr(block, name), name
    assert block.BatchFormat.ARROW == "pyarrow" and block.DEFAULT_BATCH_FORMAT == "numpy"
    col = block.BlockColumnAccessor.for_column(pa.chunked_array([[1.0, None, 3.0]]))
    assert col.sum(ignore_nulls=True) == 4.0 and col.sum(ignore_nulls=False) is None
    assert col.count(ignore_nulls=True) == 2 and col.count(ignore_nulls=False) == 3
    assert col.sum_of_squared_diffs_from_mean(True) == 2.0
    assert col.quantile(q=0.5, ignore_nulls=True) == 2.0
    assert col.dropna().to_pylist() == [1.0, 3.0]
    assert col.value_counts() == {"values": [1.0, None, 3.0], "counts": [1, 1, 1]}
    lists = block.BlockColumnAccessor.for_column(pa.array([[1, 2], [1, 2], [3]]))
    assert lists.is_composed_of_lists() and lists.unique().to_pylist() == [[1, 2], [3]]
    assert lists.flatten().to_pylist() == [1, 2, 1, 2, 3]
    with pytest.raises(TypeError, match="Arrow array"):
        block.BlockColumnAccessor.for_column([1, 2])
