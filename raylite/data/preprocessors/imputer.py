"""``SimpleImputer``: missing values (None / NaN) replaced by the column's mean, its most
frequent value, or a constant."""

from __future__ import annotations

import collections
from numbers import Number
from typing import Any

from raylite.data.preprocessors.preprocessor import Preprocessor, check_columns, output_columns_for

_STRATEGIES = ("mean", "most_frequent", "constant")


class SimpleImputer(Preprocessor):
    """``strategy="mean"`` (numeric columns), ``"most_frequent"`` (ties: the smallest value) or
    ``"constant"`` with ``fill_value`` (nothing to fit then)."""

    def __init__(self, columns: list[str], strategy: str = "mean", fill_value: str | Number | None = None,
                 *, output_columns: list[str] | None = None) -> None:
        super().__init__()
        if strategy not in _STRATEGIES:
            raise ValueError(f"SimpleImputer(strategy={strategy!r}): use one of {list(_STRATEGIES)}.")
        if strategy == "constant" and fill_value is None:
            raise ValueError('SimpleImputer(strategy="constant") needs a fill_value.')
        self.columns = list(columns)
        self.strategy = strategy
        self.fill_value = fill_value
        self.output_columns = output_columns_for(columns, output_columns)
        self._is_fittable = strategy != "constant"

    def _fit(self, ds: Any) -> dict[str, Any]:
        if self.strategy == "mean":
            from raylite.data.aggregate import Mean

            return dict(ds.aggregate(*[Mean(c) for c in self.columns]) or {})
        counts: dict[str, collections.Counter] = {c: collections.Counter() for c in self.columns}
        for batch in ds.select_columns(self.columns).iter_batches(batch_size=None, batch_format="pandas"):
            for c in self.columns:
                counts[c].update(v for v in batch[c].dropna().tolist())
        stats = {}
        for c, counter in counts.items():
            top = max(counter.values(), default=0)
            stats[f"most_frequent({c})"] = min((v for v, n in counter.items() if n == top), default=None)
        return stats

    def _fill(self, col: str) -> Any:
        if self.strategy == "constant":
            return self.fill_value
        assert self.stats_ is not None
        return self.stats_[f"{'mean' if self.strategy == 'mean' else 'most_frequent'}({col})"]

    def _transform_pandas(self, df: Any) -> Any:
        check_columns(df, self.columns, "SimpleImputer")
        for col, out in zip(self.columns, self.output_columns):
            df[out] = df[col].fillna(self._fill(col))
        return df
