"""``StandardScaler``, ``MinMaxScaler``, ``MaxAbsScaler`` and ``RobustScaler``: per-column affine
scaling from fitted statistics."""

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


class MaxAbsScaler(Preprocessor):
    """``x / max(|x|)`` per column, into [-1, 1]; an all-zero column is left as zeros."""

    def __init__(self, columns: list[str], output_columns: list[str] | None = None) -> None:
        super().__init__()
        self.columns = list(columns)
        self.output_columns = output_columns_for(columns, output_columns)

    def _fit(self, ds: Any) -> dict[str, Any]:
        from raylite.data.aggregate import AbsMax

        return dict(ds.aggregate(*[AbsMax(c) for c in self.columns]) or {})

    def _transform_pandas(self, df: Any) -> Any:
        check_columns(df, self.columns, "MaxAbsScaler")
        assert self.stats_ is not None
        for col, out in zip(self.columns, self.output_columns):
            scale = self.stats_[f"abs_max({col})"]
            values = as_float(df[col])
            df[out] = values if not scale else values / scale
        return df


class RobustScaler(Preprocessor):
    """``(x - median) / (q_high - q_low)`` per column, robust to outliers; quantiles from
    ``quantile_range`` (default the interquartile range). A column whose range is 0 becomes zeros."""

    def __init__(self, columns: list[str], quantile_range: tuple[float, float] = (0.25, 0.75),
                 output_columns: list[str] | None = None, quantile_precision: int = 800) -> None:
        super().__init__()
        low, high = quantile_range
        if not 0 <= low <= high <= 1:
            raise ValueError(f"RobustScaler quantile_range {quantile_range} must be two quantiles in "
                             "[0, 1], low first.")
        self.columns = list(columns)
        self.quantile_range = (low, high)
        self.quantile_precision = quantile_precision
        self.output_columns = output_columns_for(columns, output_columns)

    def _fit(self, ds: Any) -> dict[str, Any]:
        from raylite.data.aggregate import Quantile

        low, high = self.quantile_range
        aggs = [Quantile(c, q=q, alias_name=f"{name}({c})") for c in self.columns
                for q, name in ((low, "low_quantile"), (0.5, "median"), (high, "high_quantile"))]
        return dict(ds.aggregate(*aggs) or {})

    def _transform_pandas(self, df: Any) -> Any:
        check_columns(df, self.columns, "RobustScaler")
        assert self.stats_ is not None
        for col, out in zip(self.columns, self.output_columns):
            median = self.stats_[f"median({col})"]
            spread = self.stats_[f"high_quantile({col})"] - self.stats_[f"low_quantile({col})"]
            values = as_float(df[col])
            df[out] = np.zeros_like(values) if not spread else (values - median) / spread
        return df
