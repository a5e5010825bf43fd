"""BlockColumnAccessor: statistics over one column of a block, for AggregateFnV2 authors.

Ray's aggregation docs write custom aggregations against this accessor
(`BlockColumnAccessor.for_column(block[col]).sum(ignore_nulls=True)`); it is exported from
`raylite.data.block` under Ray's name. Columns are Arrow arrays (a pandas Series or numpy
array is converted once), so every statistic is one pyarrow.compute kernel.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc


class BlockColumnAccessor:
    """Column-wide statistics. Nulls follow Arrow (and Ray): with `ignore_nulls=False` a
    column that holds a null gives None; with True the nulls are skipped."""

    def __init__(self, col: Any) -> None:
        self._column = _as_arrow(col)

    @staticmethod
    def for_column(col: Any) -> BlockColumnAccessor:
        return BlockColumnAccessor(col)

    def _out(self, scalar: pa.Scalar, as_py: bool) -> Any:
        return scalar.as_py() if as_py else scalar

    def count(self, *, ignore_nulls: bool, as_py: bool = True) -> Any:
        return self._out(pc.count(self._column, mode="only_valid" if ignore_nulls else "all"), as_py)

    def sum(self, *, ignore_nulls: bool, as_py: bool = True) -> Any:
        return self._out(pc.sum(self._column, skip_nulls=ignore_nulls), as_py)

    def min(self, *, ignore_nulls: bool, as_py: bool = True) -> Any:
        return self._out(pc.min(self._column, skip_nulls=ignore_nulls), as_py)

    def max(self, *, ignore_nulls: bool, as_py: bool = True) -> Any:
        return self._out(pc.max(self._column, skip_nulls=ignore_nulls), as_py)

    def mean(self, *, ignore_nulls: bool, as_py: bool = True) -> Any:
        return self._out(pc.mean(self._column, skip_nulls=ignore_nulls), as_py)

    def sum_of_squared_diffs_from_mean(self, ignore_nulls: bool, mean: Any = None,
                                       as_py: bool = True) -> Any:
        """The M2 term of a variance (Welford/Chan): sum((x - mean)^2), None when no mean."""
        if mean is None:
            mean = self.mean(ignore_nulls=ignore_nulls)
        if mean is None:
            return None
        diffs = pc.power(pc.subtract(self._column, mean), 2)
        return self._out(pc.sum(diffs, skip_nulls=ignore_nulls), as_py)

    def quantile(self, *, q: float, ignore_nulls: bool, as_py: bool = True) -> Any:
        return self._out(pc.quantile(self._column, q=q, skip_nulls=ignore_nulls)[0], as_py)

    def unique(self) -> pa.Array:
        if self.is_composed_of_lists():  # Arrow has no unique kernel for lists: compare as Python
            seen: dict = {}
            for item in self._column.to_pylist():
                seen.setdefault(repr(item), item)
            return pa.array(list(seen.values()), type=self._column.type)
        return pc.unique(self._column)

    def value_counts(self) -> dict[str, list] | None:
        counts = pc.value_counts(self._column)
        if len(counts) == 0:
            return None
        return {"values": counts.field("values").to_pylist(), "counts": counts.field("counts").to_pylist()}

    def flatten(self) -> pa.Array:
        return pc.list_flatten(self._column)

    def dropna(self) -> pa.Array:
        return pc.drop_null(self._column)

    def is_composed_of_lists(self) -> bool:
        return pa.types.is_list(self._column.type) or pa.types.is_large_list(self._column.type)

    def to_pylist(self) -> list[Any]:
        return self._column.to_pylist()

    def to_numpy(self, zero_copy_only: bool = False) -> np.ndarray:
        return self._column.to_numpy(zero_copy_only=zero_copy_only)


def _as_arrow(col: Any) -> pa.Array | pa.ChunkedArray:
    if isinstance(col, (pa.Array, pa.ChunkedArray)):
        return col
    if isinstance(col, np.ndarray):
        return pa.array(col)
    if type(col).__module__.startswith("pandas"):
        return pa.array(col, from_pandas=True)
    raise TypeError(f"BlockColumnAccessor takes an Arrow array, a pandas Series or a numpy array, "
                    f"not {type(col).__name__}.")
