"""``OneHotEncoder``, ``LabelEncoder``, ``OrdinalEncoder``, ``MultiHotEncoder`` and ``Categorizer``:
categories learned by ``fit``, applied per batch."""

from __future__ import annotations

import collections
from typing import Any

import numpy as np

from raylite.data.preprocessors.preprocessor import Preprocessor, check_columns, output_columns_for


def _hashable(value: Any) -> Any:
    if isinstance(value, (list, np.ndarray)):
        return tuple(_hashable(v) for v in value)
    return value


def _value_counts(ds: Any, columns: list[str]) -> dict[str, collections.Counter]:
    """Counts of each column's non-null values, one streaming pass over only those columns."""
    counts: dict[str, collections.Counter] = {c: collections.Counter() for c in columns}
    for batch in ds.select_columns(columns).iter_batches(batch_size=None, batch_format="pyarrow"):
        for c in columns:
            counts[c].update(_hashable(v) for v in batch.column(c).to_pylist() if v is not None)
    return counts


class OneHotEncoder(Preprocessor):
    """Each column becomes a one-hot vector over its fitted categories (unknown values: all zeros).

    Categories are sorted; with ``max_categories[col] = k`` only the k most frequent are kept,
    most frequent first.
    """

    def __init__(self, columns: list[str], *, max_categories: dict[str, int] | None = None,
                 output_columns: list[str] | None = None) -> None:
        super().__init__()
        self.columns = list(columns)
        self.max_categories = dict(max_categories or {})
        self.output_columns = output_columns_for(columns, output_columns)

    def _fit(self, ds: Any) -> dict[str, Any]:
        stats = {}
        for col, counter in _value_counts(ds, self.columns).items():
            k = self.max_categories.get(col)
            values = [v for v, _ in counter.most_common(k)] if k is not None else sorted(counter, key=_sort_key)
            stats[f"unique_values({col})"] = {v: i for i, v in enumerate(values)}
        return stats

    def _transform_pandas(self, df: Any) -> Any:
        check_columns(df, self.columns, "OneHotEncoder")
        assert self.stats_ is not None
        for col, out in zip(self.columns, self.output_columns):
            index = self.stats_[f"unique_values({col})"]
            encoded = np.zeros((len(df), len(index)), dtype=np.uint8)
            for row, value in enumerate(df[col]):
                j = index.get(_hashable(value)) if value is not None else None
                if j is not None:
                    encoded[row, j] = 1
            df[out] = list(encoded)
        return df


class LabelEncoder(Preprocessor):
    """Labels -> integers 0..n-1 in sorted label order; labels unseen by ``fit`` become null."""

    def __init__(self, label_column: str, *, output_column: str | None = None) -> None:
        super().__init__()
        self.label_column = label_column
        self.output_column = output_column or label_column

    def _fit(self, ds: Any) -> dict[str, Any]:
        counter = _value_counts(ds, [self.label_column])[self.label_column]
        return {f"unique_values({self.label_column})": {v: i for i, v in enumerate(sorted(counter, key=_sort_key))}}

    def _transform_pandas(self, df: Any) -> Any:
        check_columns(df, [self.label_column], "LabelEncoder")
        assert self.stats_ is not None
        index = self.stats_[f"unique_values({self.label_column})"]
        df[self.output_column] = df[self.label_column].map(lambda v: index.get(_hashable(v)))
        return df

    def inverse_transform(self, ds: Any) -> Any:
        """Integers back to the labels they encode."""
        self._check_fitted()
        assert self.stats_ is not None
        labels = {i: v for v, i in self.stats_[f"unique_values({self.label_column})"].items()}
        out = self.output_column

        def invert(df: Any) -> Any:
            df[self.label_column] = df[out].map(lambda i: labels.get(i))
            return df

        return ds.map_batches(invert, batch_format="pandas")


def _sort_key(value: Any) -> tuple[str, Any]:
    return (type(value).__name__, value)  # mixed types sort by type name first instead of failing


def _elements(ds: Any, columns: list[str]) -> dict[str, collections.Counter]:
    """Counts of the elements of list columns (one streaming pass)."""
    counts: dict[str, collections.Counter] = {c: collections.Counter() for c in columns}
    for batch in ds.select_columns(columns).iter_batches(batch_size=None, batch_format="pyarrow"):
        for c in columns:
            for value in batch.column(c).to_pylist():
                if isinstance(value, list):
                    counts[c].update(_hashable(v) for v in value if v is not None)
                elif value is not None:
                    counts[c][_hashable(value)] += 1
    return counts


class OrdinalEncoder(Preprocessor):
    """Each value becomes its index among the column's sorted values (unseen values: NaN). With
    ``encode_lists`` (default) each element of a list is encoded; otherwise a list is one value."""

    def __init__(self, columns: list[str], *, encode_lists: bool = True,
                 output_columns: list[str] | None = None) -> None:
        super().__init__()
        self.columns = list(columns)
        self.encode_lists = encode_lists
        self.output_columns = output_columns_for(columns, output_columns)

    def _fit(self, ds: Any) -> dict[str, Any]:
        counts = _elements(ds, self.columns) if self.encode_lists else _value_counts(ds, self.columns)
        return {f"unique_values({c})": {v: i for i, v in enumerate(sorted(counter, key=_sort_key))}
                for c, counter in counts.items()}

    def _transform_pandas(self, df: Any) -> Any:
        check_columns(df, self.columns, "OrdinalEncoder")
        assert self.stats_ is not None
        for col, out in zip(self.columns, self.output_columns):
            index = self.stats_[f"unique_values({col})"]

            def encode(value: Any, index: dict = index) -> Any:
                if self.encode_lists and isinstance(value, (list, np.ndarray)):
                    return [index.get(_hashable(v), float("nan")) for v in value]
                return index.get(_hashable(value), float("nan")) if value is not None else float("nan")

            df[out] = [encode(v) for v in df[col]]
        return df


class MultiHotEncoder(Preprocessor):
    """A list column becomes a vector of counts over its fitted categories (sorted; with
    ``max_categories[col] = k`` only the k most frequent, most frequent first)."""

    def __init__(self, columns: list[str], *, max_categories: dict[str, int] | None = None,
                 output_columns: list[str] | None = None) -> None:
        super().__init__()
        self.columns = list(columns)
        self.max_categories = dict(max_categories or {})
        self.output_columns = output_columns_for(columns, output_columns)

    def _fit(self, ds: Any) -> dict[str, Any]:
        stats = {}
        for col, counter in _elements(ds, self.columns).items():
            k = self.max_categories.get(col)
            values = [v for v, _ in counter.most_common(k)] if k is not None else sorted(counter, key=_sort_key)
            stats[f"unique_values({col})"] = {v: i for i, v in enumerate(values)}
        return stats

    def _transform_pandas(self, df: Any) -> Any:
        check_columns(df, self.columns, "MultiHotEncoder")
        assert self.stats_ is not None
        for col, out in zip(self.columns, self.output_columns):
            index = self.stats_[f"unique_values({col})"]
            encoded = np.zeros((len(df), len(index)), dtype=np.int64)
            for row, values in enumerate(df[col]):
                for v in values if isinstance(values, (list, np.ndarray)) else [values]:
                    j = index.get(_hashable(v)) if v is not None else None
                    if j is not None:
                        encoded[row, j] += 1
            df[out] = list(encoded)
        return df


class Categorizer(Preprocessor):
    """Columns become pandas categoricals over their fitted (sorted) values, or over the
    categories given in ``dtypes``."""

    def __init__(self, columns: list[str], dtypes: dict[str, Any] | None = None,
                 output_columns: list[str] | None = None) -> None:
        super().__init__()
        self.columns = list(columns)
        self.dtypes = dict(dtypes or {})
        self.output_columns = output_columns_for(columns, output_columns)

    def _fit(self, ds: Any) -> dict[str, Any]:
        import pandas as pd

        to_learn = [c for c in self.columns if c not in self.dtypes]
        counts = _value_counts(ds, to_learn) if to_learn else {}
        stats = {c: pd.CategoricalDtype(sorted(counter, key=_sort_key)) for c, counter in counts.items()}
        return {**stats, **self.dtypes}

    def _transform_pandas(self, df: Any) -> Any:
        check_columns(df, self.columns, "Categorizer")
        assert self.stats_ is not None
        for col, out in zip(self.columns, self.output_columns):
            df[out] = df[col].astype(self.stats_[col])
        return df
