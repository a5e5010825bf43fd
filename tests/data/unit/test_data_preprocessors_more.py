"""Ray 2.60's other preprocessors, checked against the outputs Ray's documentation shows."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

import raylite.data as rd
from raylite.data.preprocessors import (
    Categorizer,
    CountVectorizer,
    CustomKBinsDiscretizer,
    FeatureHasher,
    HashingVectorizer,
    MaxAbsScaler,
    MultiHotEncoder,
    Normalizer,
    OrdinalEncoder,
    RobustScaler,
    SimpleImputer,
    Tokenizer,
    UniformKBinsDiscretizer,
)

CORPUS = pd.DataFrame({"corpus": ["Jimmy likes volleyball", "Bob likes volleyball too",
                                  "Bob also likes fruit jerky"]})
GENRES = pd.DataFrame({"genre": [["comedy", "action", "sports"], ["animation", "comedy", "action"],
                                 ["documentary"]]})
LEVELS = pd.DataFrame({"sex": ["male", "female", "male", "female"], "level": ["L4", "L5", "L3", "L4"]})
VALUES = pd.DataFrame({"value_1": [0.2, 1.4, 2.5, 6.2, 9.7, 2.1], "value_2": [10, 15, 13, 12, 23, 25]})


def _out(preprocessor, df, column):
    return [list(v) if isinstance(v, (list, np.ndarray)) else v
            for v in preprocessor.fit_transform(rd.from_pandas(df)).to_pandas()[column]]


def test_scalers(local):
    df = pd.DataFrame({"X1": [1, 2, 3, 4, 5], "X2": [13, 5, 14, 2, 8]})
    assert _out(RobustScaler(["X1", "X2"]), df, "X2") == [0.625, -0.375, 0.75, -0.75, 0.0]
    df = pd.DataFrame({"X1": [-6, 3], "X3": [0, 0]})
    assert _out(MaxAbsScaler(["X1", "X3"]), df, "X1") == [-1.0, 0.5]
    assert _out(MaxAbsScaler(["X3"]), df, "X3") == [0.0, 0.0]


def test_normalizer_and_imputer(local):
    df = pd.DataFrame({"X1": [1, 1], "X2": [1, 0], "X3": [0, 1]})
    assert _out(Normalizer(["X1", "X2"]), df, "X1") == pytest.approx([0.7071068, 1.0])
    assert _out(Normalizer(["X1", "X2"], norm="l1"), df, "X2") == [0.5, 0.0]
    df = pd.DataFrame({"X": [0, None, 3, 3], "Y": [None, "b", "c", "c"]})
    assert _out(SimpleImputer(["X"], strategy="mean"), df, "X") == [0.0, 2.0, 3.0, 3.0]
    assert _out(SimpleImputer(["X", "Y"], strategy="most_frequent"), df, "Y") == ["c", "b", "c", "c"]
    assert _out(SimpleImputer(["Y"], strategy="constant", fill_value="?"), df, "Y") == ["?", "b", "c", "c"]
    with pytest.raises(ValueError, match="fill_value"):
        SimpleImputer(["Y"], strategy="constant")


def test_discretizers(local):
    assert _out(UniformKBinsDiscretizer(["value_1", "value_2"], bins=4), VALUES, "value_1") == [0, 0, 0, 2, 3, 0]
    assert _out(UniformKBinsDiscretizer(["value_1", "value_2"], bins=4), VALUES, "value_2") == [0, 1, 0, 0, 3, 3]
    binned = _out(CustomKBinsDiscretizer(["value_1"], bins=[0, 1, 4, 10]), VALUES, "value_1")
    assert binned == [0, 1, 1, 2, 2, 1]


def test_encoders(local):
    assert _out(OrdinalEncoder(["sex", "level"]), LEVELS, "level") == [1, 2, 0, 1]
    assert _out(MultiHotEncoder(["genre"]), GENRES, "genre") == [[1, 0, 1, 0, 1], [1, 1, 1, 0, 0],
                                                                  [0, 0, 0, 1, 0]]
    assert _out(OrdinalEncoder(["genre"]), GENRES, "genre") == [[2, 0, 4], [1, 2, 0], [3]]
    cat = Categorizer(["sex"]).fit(rd.from_pandas(LEVELS))
    out = cat.transform_batch(LEVELS.copy())
    assert list(out["sex"].cat.categories) == ["female", "male"]


def test_text_and_hashing(local):
    assert _out(Tokenizer(["corpus"]), CORPUS.head(1), "corpus") == [["Jimmy", "likes", "volleyball"]]
    assert _out(CountVectorizer(["corpus"]), CORPUS, "corpus") == [[1, 0, 1, 1, 0, 0, 0, 0],
                                                                   [1, 1, 1, 0, 0, 0, 0, 1],
                                                                   [1, 1, 0, 0, 1, 1, 1, 0]]
    assert _out(CountVectorizer(["corpus"], max_features=3), CORPUS, "corpus") == [[1, 0, 1], [1, 1, 1], [1, 1, 0]]
    # what Ray 2.60 computes (its docstring shows an older hash's slots)
    assert _out(HashingVectorizer(["corpus"], num_features=8), CORPUS, "corpus") == [
        [0, 0, 1, 1, 0, 0, 1, 0], [1, 1, 0, 1, 0, 0, 1, 0], [1, 1, 0, 2, 1, 0, 0, 0]]
    counts = pd.DataFrame({"I": [1, 1], "like": [1, 0], "dislike": [0, 1], "Python": [1, 1]})
    # each column's count lands in the slot its name hashes to; "like" and "dislike" share one
    # (what Ray 2.60 computes: its docstring shows an older hash's slots)
    hashed = _out(FeatureHasher(["I", "like", "dislike", "Python"], num_features=8, output_column="hashed"),
                  counts, "hashed")
    assert hashed == [[0, 0, 0, 1, 1, 0, 0, 1], [0, 0, 0, 1, 1, 0, 0, 1]]
