"""``Dataset.summary()``: per-column statistics gathered in one streaming pass.

Why one pass on the driver, block by block: the statistics are small mergeable
accumulators (count, nulls, zeros, sum, sum of squares, min, max, and a value
counter for strings), so nothing but the current block is held. Numbers get
count / mean / min / max / std / approx_quantile[0] (median of a bounded sample)
/ missing_pct / zero_pct; strings and binary get count / missing_pct /
approx_topk; temporal columns count / min / max / missing_pct; others count /
missing_pct. The layout follows Ray's ``DatasetSummary``: ``to_pandas()`` has
one row per statistic and one column per dataset column.
"""

from __future__ import annotations

import collections
from collections.abc import Iterable
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

TOP_K = 10
QUANTILE_SAMPLE = 100_000


def _kind(t: pa.DataType) -> str:
    if pa.types.is_integer(t) or pa.types.is_floating(t) or pa.types.is_boolean(t) or pa.types.is_decimal(t):
        return "numeric"
    if pa.types.is_string(t) or pa.types.is_large_string(t) or pa.types.is_binary(t) or pa.types.is_large_binary(t):
        return "string"
    if pa.types.is_temporal(t):
        return "temporal"
    return "other"


class _Column:
    def __init__(self, name: str, kind: str) -> None:
        self.name, self.kind = name, kind
        self.count = self.nulls = self.zeros = 0
        self.total = self.total_sq = 0.0
        self.min: Any = None
        self.max: Any = None
        self.sample: list[np.ndarray] = []
        self.sampled = 0
        self.values: collections.Counter[Any] = collections.Counter()

    def add(self, col: pa.ChunkedArray) -> None:
        self.count += len(col)
        self.nulls += col.null_count
        valid = pc.drop_null(col)
        if len(valid) == 0:
            return
        if self.kind == "numeric":
            values = valid.cast(pa.float64()).to_numpy()
            self.total += float(values.sum())
            self.total_sq += float((values * values).sum())
            self.zeros += int((values == 0).sum())
            self._minmax(float(values.min()), float(values.max()))
            if self.sampled < QUANTILE_SAMPLE:
                self.sample.append(values[: QUANTILE_SAMPLE - self.sampled])
                self.sampled += len(self.sample[-1])
        elif self.kind == "temporal":
            mm = pc.min_max(valid)
            self._minmax(mm["min"].as_py(), mm["max"].as_py())
        elif self.kind == "string":
            self.values.update(valid.to_pylist())

    def _minmax(self, lo: Any, hi: Any) -> None:
        self.min = lo if self.min is None or lo < self.min else self.min
        self.max = hi if self.max is None or hi > self.max else self.max

    def stats(self) -> dict[str, Any]:
        missing = 100.0 * self.nulls / self.count if self.count else 0.0
        out: dict[str, Any] = {"count": self.count, "missing_pct": missing}
        valid = self.count - self.nulls
        if self.kind == "numeric":
            mean = self.total / valid if valid else None
            var = max(self.total_sq / valid - mean * mean, 0.0) * valid / (valid - 1) if valid > 1 else None
            out.update(mean=mean, min=self.min, max=self.max, std=None if var is None else var ** 0.5,
                       zero_pct=100.0 * self.zeros / self.count if self.count else 0.0)
            if self.sample:
                out["approx_quantile[0]"] = float(np.median(np.concatenate(self.sample)))
        elif self.kind == "temporal":
            out.update(min=self.min, max=self.max)
        elif self.kind == "string":
            for i, (value, n) in enumerate(self.values.most_common(TOP_K)):
                out[f"approx_topk[{i}]"] = {self.name: value, "count": n}
        return out


class DatasetSummary:
    """Statistics per column; ``to_pandas()`` and ``get_column_stats(column)`` as in Ray."""

    def __init__(self, stats: dict[str, dict[str, Any]]) -> None:
        self._stats = stats

    def to_pandas(self) -> Any:
        import pandas as pd

        names = sorted({s for col in self._stats.values() for s in col})
        data = {"statistic": names}
        for column, stats in self._stats.items():
            data[column] = [stats.get(s) for s in names]
        return pd.DataFrame(data)

    def get_column_stats(self, column: str) -> Any:
        import pandas as pd

        if column not in self._stats:
            raise KeyError(f"summary has no column {column!r}; columns: {list(self._stats)}")
        stats = self._stats[column]
        return pd.DataFrame({"statistic": list(stats), "value": list(stats.values())})

    def __repr__(self) -> str:
        return repr(self.to_pandas())


def summarize(blocks: Iterable[pa.Table], columns: list[str] | None) -> DatasetSummary:
    acc: dict[str, _Column] = {}
    for block in blocks:
        if not block.num_columns:
            continue
        wanted = columns if columns is not None else block.column_names
        missing = [c for c in wanted if c not in block.column_names]
        if missing:
            raise KeyError(f"summary(columns=...) names {missing}, not in the dataset's columns {block.column_names}")
        for name in wanted:
            col = block.column(name)
            if name not in acc:
                acc[name] = _Column(name, _kind(col.type))
            acc[name].add(col)
    return DatasetSummary({name: c.stats() for name, c in acc.items()})
