"""Ray 2.60's statistical aggregations, written as AggregateFnV2 subclasses (see custom.py).

    Quantile(on, q=0.5)                 exact quantile, linearly interpolated (numpy's default)
    ApproximateQuantile(on, quantiles)  mergeable sketch (below); a list, one value per quantile
    ApproximateTopK(on, k)              the k most frequent values: [{on: value, "count": n}, ...]
    ValueCounter(on)                    {"values": [...], "counts": [...]} in first-seen order
    MissingValuePercentage(on)          percent of rows whose value is null
    ZeroPercentage(on)                  percent of (non-null) values equal to 0
    CountDistinct(on)                   number of distinct values
    AsList(on)                          every value of the group, as one list

Ray needs the `datasketches` package for the two approximate ones; raylite's sketches are
written here in Python and need nothing. The quantile sketch keeps at most about
`quantile_precision` values per level: when a level fills up, it is sorted and every other
value moves up a level with twice the weight (the idea of KLL, without its randomness), so
its size grows with the log of the data while rank errors stay near 1/quantile_precision.
The top-k sketch is exact while the number of distinct values fits `2**log_capacity`, and
keeps the most frequent ones beyond that.
"""

from __future__ import annotations

import collections
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from raylite.data.aggregate.custom import AggregateFnV2, is_null


def _values(block: pa.Table, column: str, drop_nulls: bool) -> list[Any]:
    col = block.column(column)
    if drop_nulls:
        col = pc.drop_null(col)
    return col.to_pylist()


class Quantile(AggregateFnV2):
    """The `q`-quantile of a column, interpolated linearly between the closest values."""

    def __init__(self, on: str | None = None, q: float = 0.5, ignore_nulls: bool = True,
                 alias_name: str | None = None) -> None:
        if not 0.0 <= q <= 1.0:
            raise ValueError(f"Quantile(q={q}) must be between 0 and 1.")
        self._q = q
        super().__init__(alias_name or f"quantile({on})", list, on=on, ignore_nulls=ignore_nulls)

    def aggregate_block(self, block: pa.Table) -> list | None:
        values = _values(block, self.on, self._ignore_nulls)
        if self._ignore_nulls:
            return values or None
        return None if any(v is None for v in values) else values

    def combine(self, current_accumulator: list, new: list) -> list:
        return current_accumulator + new

    def finalize(self, accumulator: list) -> float | None:
        if not accumulator:
            return None
        return float(np.quantile(np.asarray(accumulator, dtype=float), self._q))


class _QuantileSketch:
    """Weighted levels of sorted values; level i holds values that each stand for 2**i."""

    def __init__(self, k: int) -> None:
        self.k = max(8, int(k))
        self.levels: list[list[float]] = [[]]
        self._flip = 0

    def add(self, values: list[float]) -> None:
        self.levels[0].extend(values)
        self._compact()

    def merge(self, other: _QuantileSketch) -> None:
        for i, level in enumerate(other.levels):
            while len(self.levels) <= i:
                self.levels.append([])
            self.levels[i].extend(level)
        self._compact()

    def _compact(self) -> None:
        i = 0
        while i < len(self.levels):
            level = self.levels[i]
            if len(level) > self.k:
                level.sort()
                leftover = level[-1:] if len(level) % 2 else []  # an odd one out stays here
                pairs = level[:len(level) - len(leftover)]
                self._flip ^= 1  # alternate which of each pair survives, so no side is favoured
                if len(self.levels) == i + 1:
                    self.levels.append([])
                self.levels[i + 1].extend(pairs[self._flip::2])
                self.levels[i] = leftover
            i += 1

    def quantiles(self, qs: list[float]) -> list[float | None]:
        pairs = sorted((v, 1 << i) for i, level in enumerate(self.levels) for v in level)
        if not pairs:
            return [None for _ in qs]
        values = np.array([p[0] for p in pairs])
        cum = np.cumsum([p[1] for p in pairs], dtype=float)
        total = cum[-1]
        out = []
        for q in qs:
            idx = int(np.searchsorted(cum, q * total, side="left"))
            out.append(float(values[min(idx, len(values) - 1)]))
        return out


class ApproximateQuantile(AggregateFnV2):
    """Quantiles of a numeric column from a mergeable sketch (nulls are ignored)."""

    def __init__(self, on: str, quantiles: list[float], quantile_precision: int = 800,
                 alias_name: str | None = None) -> None:
        bad = [q for q in quantiles if not 0.0 <= q <= 1.0]
        if bad:
            raise ValueError(f"ApproximateQuantile quantiles must be between 0 and 1, got {bad}.")
        self._quantiles = list(quantiles)
        self._precision = quantile_precision
        super().__init__(alias_name or f"approx_quantile({on})", lambda: _QuantileSketch(quantile_precision),
                         on=on, ignore_nulls=True)

    def aggregate_block(self, block: pa.Table) -> _QuantileSketch | None:
        values = [float(v) for v in _values(block, self.on, True)]
        if not values:
            return None
        sketch = _QuantileSketch(self._precision)
        sketch.add(values)
        return sketch

    def combine(self, current_accumulator: _QuantileSketch, new: _QuantileSketch) -> _QuantileSketch:
        current_accumulator.merge(new)
        return current_accumulator

    def finalize(self, accumulator: _QuantileSketch) -> list[float | None]:
        return accumulator.quantiles(self._quantiles)


def _hashable(value: Any) -> Any:
    if isinstance(value, list):
        return ("__list__", tuple(_hashable(v) for v in value))
    if isinstance(value, dict):
        return ("__dict__", tuple(sorted((k, _hashable(v)) for k, v in value.items())))
    return value


def _unhashable(value: Any) -> Any:
    if isinstance(value, tuple) and len(value) == 2 and value[0] == "__list__":
        return [_unhashable(v) for v in value[1]]
    if isinstance(value, tuple) and len(value) == 2 and value[0] == "__dict__":
        return {k: _unhashable(v) for k, v in value[1]}
    return value


class ApproximateTopK(AggregateFnV2):
    """The `k` most frequent values, most frequent first (nulls are ignored)."""

    def __init__(self, on: str, k: int, log_capacity: int = 15, alias_name: str | None = None,
                 encode_lists: bool = False) -> None:
        if k <= 0:
            raise ValueError(f"ApproximateTopK(k={k}) must be positive.")
        self.k = k
        self._capacity = 1 << log_capacity
        self._encode_lists = encode_lists
        super().__init__(alias_name or f"approx_topk({on})", collections.Counter, on=on, ignore_nulls=True)

    def aggregate_block(self, block: pa.Table) -> collections.Counter | None:
        counts: collections.Counter = collections.Counter()
        for value in _values(block, self.on, True):
            if isinstance(value, list) and self._encode_lists:
                counts.update(_hashable(v) for v in value)
            else:
                counts[_hashable(value)] += 1
        return counts or None

    def combine(self, current_accumulator: collections.Counter, new: collections.Counter) -> collections.Counter:
        current_accumulator.update(new)
        if len(current_accumulator) > self._capacity:  # keep the heaviest values
            current_accumulator = collections.Counter(dict(current_accumulator.most_common(self._capacity)))
        return current_accumulator

    def finalize(self, accumulator: collections.Counter) -> list[dict[str, Any]]:
        return [{self.on: _unhashable(v), "count": int(c)} for v, c in accumulator.most_common(self.k)]


class ValueCounter(AggregateFnV2):
    """How often each value occurs: {"values": [...], "counts": [...]}, first-seen order."""

    def __init__(self, on: str, alias_name: str | None = None) -> None:
        super().__init__(alias_name or f"value_counter({on})", dict, on=on, ignore_nulls=True)

    def aggregate_block(self, block: pa.Table) -> dict:
        counts: dict[Any, int] = {}
        for value in _values(block, self.on, False):
            key = _hashable(value)
            counts[key] = counts.get(key, 0) + 1
        return counts

    def combine(self, current_accumulator: dict, new: dict) -> dict:
        for value, count in new.items():
            current_accumulator[value] = current_accumulator.get(value, 0) + count
        return current_accumulator

    def finalize(self, accumulator: dict) -> dict[str, list]:
        return {"values": [_unhashable(v) for v in accumulator], "counts": list(accumulator.values())}


class MissingValuePercentage(AggregateFnV2):
    """Percent (0-100) of the rows whose value in `on` is null."""

    def __init__(self, on: str, alias_name: str | None = None) -> None:
        super().__init__(alias_name or f"missing_pct({on})", lambda: [0, 0], on=on, ignore_nulls=False)

    def aggregate_block(self, block: pa.Table) -> list[int]:
        col = block.column(self.on)
        return [col.null_count, len(col)]

    def combine(self, current_accumulator: list[int], new: list[int]) -> list[int]:
        return [current_accumulator[0] + new[0], current_accumulator[1] + new[1]]

    def finalize(self, accumulator: list[int]) -> float | None:
        return None if accumulator[1] == 0 else accumulator[0] / accumulator[1] * 100.0


class ZeroPercentage(AggregateFnV2):
    """Percent (0-100) of the values equal to zero; nulls are not counted unless
    `ignore_nulls=False`, when they count as values that are not zero."""

    def __init__(self, on: str, ignore_nulls: bool = True, alias_name: str | None = None) -> None:
        super().__init__(alias_name or f"zero_pct({on})", lambda: [0, 0], on=on, ignore_nulls=ignore_nulls)

    def aggregate_block(self, block: pa.Table) -> list[int]:
        col = block.column(self.on)
        count = len(col) - (col.null_count if self._ignore_nulls else 0)
        zeros = pc.sum(pc.equal(col, 0)).as_py() or 0
        return [int(zeros), int(count)]

    def combine(self, current_accumulator: list[int], new: list[int]) -> list[int]:
        return [current_accumulator[0] + new[0], current_accumulator[1] + new[1]]

    def finalize(self, accumulator: list[int]) -> float | None:
        return None if accumulator[1] == 0 else accumulator[0] / accumulator[1] * 100.0


class CountDistinct(AggregateFnV2):
    """The number of distinct values (null is one more value when `ignore_nulls=False`)."""

    def __init__(self, on: str, ignore_nulls: bool = True, alias_name: str | None = None) -> None:
        super().__init__(alias_name or f"count_distinct({on})", set, on=on, ignore_nulls=ignore_nulls)

    def aggregate_block(self, block: pa.Table) -> set:
        return {_hashable(v) for v in _values(block, self.on, self._ignore_nulls)}

    def combine(self, current_accumulator: set, new: set) -> set:
        return current_accumulator | new

    def finalize(self, accumulator: set) -> int:
        return len(accumulator)


class AsList(AggregateFnV2):
    """All the values of the group as one list (nulls kept unless `ignore_nulls=True`)."""

    def __init__(self, on: str, alias_name: str | None = None, ignore_nulls: bool = False) -> None:
        super().__init__(alias_name or f"list({on or ''})", list, on=on, ignore_nulls=ignore_nulls)
        self._drop_nulls = ignore_nulls
        self._ignore_nulls = False  # a null value is an element here, not a null accumulator

    def aggregate_block(self, block: pa.Table) -> list:
        return _values(block, self.on, self._drop_nulls)

    def combine(self, current_accumulator: list, new: list) -> list:
        return current_accumulator + new


__all__ = ["ApproximateQuantile", "ApproximateTopK", "AsList", "CountDistinct", "MissingValuePercentage",
           "Quantile", "ValueCounter", "ZeroPercentage", "is_null"]
