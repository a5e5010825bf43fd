"""``CustomKBinsDiscretizer`` and ``UniformKBinsDiscretizer``: numeric values -> bin numbers
(``pandas.cut`` with ``labels=False``; values outside every bin become NaN)."""

from __future__ import annotations

from typing import Any

import numpy as np

from raylite.data.preprocessors.preprocessor import Preprocessor, check_columns, output_columns_for


class _Discretizer(Preprocessor):
    def __init__(self, columns: list[str], *, right: bool, include_lowest: bool, duplicates: str,
                 dtypes: dict[str, Any] | None, output_columns: list[str] | None) -> None:
        super().__init__()
        if duplicates not in ("raise", "drop"):
            raise ValueError(f"duplicates={duplicates!r}: use 'raise' or 'drop'.")
        self.columns = list(columns)
        self.right = right
        self.include_lowest = include_lowest
        self.duplicates = duplicates
        self.dtypes = dict(dtypes or {})
        self.output_columns = output_columns_for(columns, output_columns)

    def _bins_for(self, col: str) -> Any:
        raise NotImplementedError

    def _transform_pandas(self, df: Any) -> Any:
        import pandas as pd

        check_columns(df, self.columns, type(self).__name__)
        for col, out in zip(self.columns, self.output_columns):
            binned = pd.cut(df[col], self._bins_for(col), right=self.right, include_lowest=self.include_lowest,
                            duplicates=self.duplicates, labels=False)
            df[out] = binned.astype(self.dtypes[col]) if col in self.dtypes else binned
        return df


class CustomKBinsDiscretizer(_Discretizer):
    """Bins given as edges (one list for all columns, or one per column), or an IntervalIndex."""

    _is_fittable = False

    def __init__(self, columns: list[str], bins: Any, *, right: bool = True, include_lowest: bool = False,
                 duplicates: str = "raise", dtypes: dict[str, Any] | None = None,
                 output_columns: list[str] | None = None) -> None:
        super().__init__(columns, right=right, include_lowest=include_lowest, duplicates=duplicates,
                         dtypes=dtypes, output_columns=output_columns)
        if isinstance(bins, dict):
            missing = [c for c in self.columns if c not in bins]
            if missing:
                raise ValueError(f"CustomKBinsDiscretizer bins has no edges for column(s) {missing}.")
        self.bins = bins

    def _bins_for(self, col: str) -> Any:
        return self.bins[col] if isinstance(self.bins, dict) else self.bins


class UniformKBinsDiscretizer(_Discretizer):
    """``bins`` equal-width bins between each column's fitted min and max (the first edge moved
    out by 0.1% of the range so the minimum falls in bin 0, as pandas does)."""

    def __init__(self, columns: list[str], bins: int | dict[str, int], *, right: bool = True,
                 include_lowest: bool = False, duplicates: str = "raise", dtypes: dict[str, Any] | None = None,
                 output_columns: list[str] | None = None) -> None:
        super().__init__(columns, right=right, include_lowest=include_lowest, duplicates=duplicates,
                         dtypes=dtypes, output_columns=output_columns)
        self.bins = bins

    def _fit(self, ds: Any) -> dict[str, Any]:
        from raylite.data.aggregate import Max, Min

        return dict(ds.aggregate(*[a for c in self.columns for a in (Min(c), Max(c))]) or {})

    def _bins_for(self, col: str) -> Any:
        assert self.stats_ is not None
        k = self.bins[col] if isinstance(self.bins, dict) else self.bins
        lo, hi = float(self.stats_[f"min({col})"]), float(self.stats_[f"max({col})"])
        edges = np.linspace(lo, hi, int(k) + 1)
        adjust = (hi - lo) * 0.001 if hi != lo else max(abs(lo) * 0.001, 0.001)
        if self.right:
            edges[0] -= adjust
        else:
            edges[-1] += adjust
        return edges
