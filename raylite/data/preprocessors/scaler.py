"""``StandardScaler`` and ``MinMaxScaler``: per-column affine scaling from fitted statistics."""

from __future__ import annotations

from typing import Any

import numpy as np

from raylite.data.preprocessors.preprocessor import (
    Preprocessor,
    as_float,
    check_columns,
    output_columns_for,
)


class StandardScaler(Preprocessor):
    """``(x - mean) / std`` per column (population std); a constant column becomes zeros."""

    def __init__(self, columns: list[str], output_columns: list[str] | None = None) -> None:
        super().__init__()
        self.columns = list(columns)
        self.output_columns = output_columns_for(columns, output_columns)

    def _fit(self, ds: Any) -> dict[str, Any]:
        from raylite.data.aggregate import Mean, Std

        aggs = [a for c in self.columns for a in (Mean(c), Std(c, ddof=0))]
        return dict(ds.aggregate(*aggs) or {})

    def _transform_pandas(self, df: Any) -> Any:
        check_columns(df, self.columns, "StandardScaler")
        assert self.stats_ is not None
        for col, out in zip(self.columns, self.output_columns):
            mean, std = self.stats_[f"mean({col})"], self.stats_[f"std({col})"]
            values = as_float(df[col])
            df[out] = np.zeros_like(values) if not std else (values - mean) / std
        return df


class MinMaxScaler(Preprocessor):
    """``(x - min) / (max - min)`` per column, into [0, 1]; a constant column becomes zeros."""

    def __init__(self, columns: list[str], output_columns: list[str] | None = None) -> None:
        super().__init__()
        self.columns = list(columns)
        self.output_columns = output_columns_for(columns, output_columns)

    def _fit(self, ds: Any) -> dict[str, Any]:
        from raylite.data.aggregate import Max, Min

        aggs = [a for c in self.columns for a in (Min(c), Max(c))]
        return dict(ds.aggregate(*aggs) or {})

    def _transform_pandas(self, df: Any) -> Any:
        check_columns(df, self.columns, "MinMaxScaler")
        assert self.stats_ is not None
        for col, out in zip(self.columns, self.output_columns):
            lo, hi = self.stats_[f"min({col})"], self.stats_[f"max({col})"]
            values = as_float(df[col])
            df[out] = np.zeros_like(values) if hi == lo else (values - lo) / (hi - lo)
        return df
