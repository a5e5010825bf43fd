"""Sort, groupby aggregations, shuffles and splits, checked against pandas."""

import numpy as np
import pandas as pd
import pytest

import raylite.data as rd
from raylite.data.aggregate import AggregateFn, Count, Max, Mean, Std, Sum


@pytest.fixture
def frame():
    rng = np.random.default_rng(7)
    n = 2000
    return pd.DataFrame({
        "k": rng.integers(0, 13, n),
        "s": rng.choice(["ant", "bee", "cat", "dog"], n),
        "x": rng.normal(10, 3, n),
        "y": rng.integers(-50, 50, n),
    })


def _ds(df, blocks=8):
    return rd.from_pandas(df, override_num_blocks=blocks)


def test_sort_matches_pandas_single_and_multi_key(local, frame):
    out = _ds(frame).sort("x").to_pandas()
    pd.testing.assert_frame_equal(out, frame.sort_values("x").reset_index(drop=True), check_dtype=False)
    out = _ds(frame).sort(["s", "y"], descending=[False, True]).to_pandas()
    exp = frame.sort_values(["s", "y"], ascending=[True, False]).reset_index(drop=True)
    assert out[["s", "y"]].values.tolist() == exp[["s", "y"]].values.tolist()
    assert _ds(frame).sort("y", descending=True).take(1)[0]["y"] == frame.y.max()


def test_sort_puts_nulls_last_and_checks_key(local):
    ds = rd.from_items([{"v": 3}, {"v": None}, {"v": 1}, {"v": 2}], override_num_blocks=2)
    assert [r["v"] for r in ds.sort("v").take_all()] == [1, 2, 3, None]
    with pytest.raises(KeyError, match="sort key.*'nope'"):
        ds.sort("nope").take_all()


def test_groupby_aggregations_match_pandas(local, frame):
    ds = _ds(frame)
    got = ds.groupby("k").aggregate(Count(), Sum("y"), Max("x"), Mean("x"), Std("x")).to_pandas()
    g = frame.groupby("k")
    assert got["k"].tolist() == sorted(frame.k.unique())
    assert got["count()"].tolist() == g.size().tolist()
    assert got["sum(y)"].tolist() == g.y.sum().tolist()
    np.testing.assert_allclose(got["max(x)"], g.x.max())
    np.testing.assert_allclose(got["mean(x)"], g.x.mean())
    np.testing.assert_allclose(got["std(x)"], g.x.std(ddof=1))
    by_two = ds.groupby(["s", "k"]).count().to_pandas()
    exp = frame.groupby(["s", "k"]).size().reset_index(name="count()")
    assert by_two.values.tolist() == exp.values.tolist()
    assert ds.groupby("s").min("y").to_pandas()["min(y)"].tolist() == frame.groupby("s").y.min().tolist()


def test_groupby_with_many_partitions_matches_pandas(local, frame, data_context):
    data_context.target_shuffle_max_block_size = 2000  # force a key-range shuffle of the partials
    got = _ds(frame).groupby("k").aggregate(Count(), Mean("x")).to_pandas()
    assert got["k"].tolist() == sorted(frame.k.unique())
    assert got["count()"].tolist() == frame.groupby("k").size().tolist()
    np.testing.assert_allclose(got["mean(x)"], frame.groupby("k").x.mean())


def test_dataset_level_aggregates(local, frame):
    ds = _ds(frame)
    assert ds.sum("y") == frame.y.sum()
    assert ds.min("y") == frame.y.min() and ds.max("y") == frame.y.max()
    assert ds.mean("x") == pytest.approx(frame.x.mean())
    assert ds.std("x") == pytest.approx(frame.x.std())
    assert ds.sum(["y", "k"]) == {"sum(y)": frame.y.sum(), "sum(k)": frame.k.sum()}
    assert sorted(ds.unique("s")) == ["ant", "bee", "cat", "dog"]
    assert ds.aggregate(Count(), Sum("y")) == {"count()": len(frame), "sum(y)": frame.y.sum()}
    assert rd.range(5).filter(lambda r: False).sum("id") is None


def test_custom_aggregate_fn(local):
    product = AggregateFn(init=lambda k: 1, accumulate_row=lambda a, r: a * r["v"], merge=lambda a, b: a * b,
                          name="prod")
    ds = rd.from_items([{"g": i % 2, "v": i} for i in range(1, 9)], override_num_blocks=3)
    assert ds.groupby("g").aggregate(product).take_all() == [{"g": 0, "prod": 2 * 4 * 6 * 8},
                                                              {"g": 1, "prod": 1 * 3 * 5 * 7}]


def test_map_groups_sees_whole_groups(local, frame):
    def summarize(group):
        return {"k": group["k"][:1], "n": np.array([len(group["k"])]), "total": np.array([group["y"].sum()])}

    got = _ds(frame).groupby("k").map_groups(summarize).to_pandas().sort_values("k")
    exp = frame.groupby("k").agg(n=("y", "size"), total=("y", "sum")).reset_index()
    assert got.values.tolist() == exp.values.tolist()
    pdf = _ds(frame).groupby("s").map_groups(lambda df: df.head(1), batch_format="pandas").to_pandas()
    assert sorted(pdf.s) == ["ant", "bee", "cat", "dog"]


def test_random_shuffle_is_a_seeded_permutation(local):
    ds = rd.range(500, override_num_blocks=5)
    a = [r["id"] for r in ds.random_shuffle(seed=3).take_all()]
    b = [r["id"] for r in ds.random_shuffle(seed=3).take_all()]
    c = [r["id"] for r in ds.random_shuffle(seed=4).take_all()]
    assert sorted(a) == list(range(500)) and a == b and a != c and a != list(range(500))
    blocks = ds.randomize_block_order(seed=1).materialize()
    assert sorted(r["id"] for r in blocks.take_all()) == list(range(500))


def test_repartition(local):
    ds = rd.range(103, override_num_blocks=2)
    mat = ds.repartition(5).materialize()
    assert mat.num_blocks() == 5
    assert [r["id"] for r in mat.take_all()] == list(range(103))
    shuffled = ds.repartition(4, shuffle=True).materialize()
    assert shuffled.num_blocks() == 4 and sorted(r["id"] for r in shuffled.take_all()) == list(range(103))


def test_splits(local):
    ds = rd.range(10, override_num_blocks=3)
    parts = ds.split(3)
    assert [[r["id"] for r in p.take_all()] for p in parts] == [[0, 1, 2], [3, 4, 5, 6], [7, 8, 9]]
    assert [p.count() for p in ds.split(3, equal=True)] == [3, 3, 3]
    parts = ds.split_at_indices([2, 7])
    assert [[r["id"] for r in p.take_all()] for p in parts] == [[0, 1], [2, 3, 4, 5, 6], [7, 8, 9]]
    assert [p.count() for p in ds.split_at_indices([0, 20])] == [0, 10, 0]
    with pytest.raises(ValueError, match="sorted"):
        ds.split_at_indices([5, 2])
    train, test = ds.train_test_split(test_size=0.3)
    assert [r["id"] for r in test.take_all()] == [7, 8, 9] and train.count() == 7
    train, test = ds.train_test_split(test_size=2, shuffle=True, seed=0)
    assert sorted(r["id"] for r in train.take_all() + test.take_all()) == list(range(10))
    assert [p.count() for p in ds.split_proportionately([0.2, 0.5])] == [2, 5, 3]
