"""GroupedData: ``ds.groupby(key)`` -> aggregations or ``map_groups``.

Results are Datasets sorted by the key (range-partitioned shuffle, see
``_internal/shuffle.py``), with one column per key and one per aggregation
named like Ray's: ``count()``, ``sum(x)``, ``mean(x)`` ...
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from raylite.data._internal import logical as L
from raylite.data._internal.shuffle import SortKey, aggregate_logical, sort_bulk
from raylite.data._internal.transforms import UDF, MapBatchesStage, Stage, _call_udf
from raylite.data._internal.udf_options import udf_compute, udf_name, udf_remote_args
from raylite.data.aggregate import AggregateFn, Count, Max, Mean, Min, Std, Sum
from raylite.data.block import Block, batch_to_block, table_to_batch


class GroupedData:
    """``ds.groupby(key)``. Each result is a Dataset made by ``ds`` itself (``ds._with(op)``):
    this module sits under dataset.py, which imports it for ``groupby``."""

    def __init__(self, dataset: Any, key: str | list[str] | None) -> None:
        self._dataset = dataset
        self._keys = [] if key is None else ([key] if isinstance(key, str) else list(key))

    def __repr__(self) -> str:
        return f"GroupedData(dataset={self._dataset!r}, key={self._keys!r})"

    def aggregate(self, *aggs: AggregateFn) -> Any:
        """One row per group: the keys and each aggregation's result."""
        return self._dataset._with(aggregate_logical(f"Aggregate({self._keys})", self._dataset._logical,
                                                     self._keys, list(aggs)))

    def _on(self, on: str | list[str] | None) -> list[str]:
        if on is None:
            return [c for c in self._dataset.columns() if c not in self._keys]
        return [on] if isinstance(on, str) else list(on)

    def count(self) -> Any:
        return self.aggregate(Count())

    def sum(self, on: str | list[str] | None = None, ignore_nulls: bool = True) -> Any:
        return self.aggregate(*[Sum(c, ignore_nulls=ignore_nulls) for c in self._on(on)])

    def min(self, on: str | list[str] | None = None, ignore_nulls: bool = True) -> Any:
        return self.aggregate(*[Min(c, ignore_nulls=ignore_nulls) for c in self._on(on)])

    def max(self, on: str | list[str] | None = None, ignore_nulls: bool = True) -> Any:
        return self.aggregate(*[Max(c, ignore_nulls=ignore_nulls) for c in self._on(on)])

    def mean(self, on: str | list[str] | None = None, ignore_nulls: bool = True) -> Any:
        return self.aggregate(*[Mean(c, ignore_nulls=ignore_nulls) for c in self._on(on)])

    def std(self, on: str | list[str] | None = None, ddof: int = 1, ignore_nulls: bool = True) -> Any:
        return self.aggregate(*[Std(c, ddof=ddof, ignore_nulls=ignore_nulls) for c in self._on(on)])

    def map_groups(self, fn: Any, *, compute: Any = None, batch_format: str | None = "default",
                   fn_args: Sequence[Any] | None = None, fn_kwargs: dict[str, Any] | None = None,
                   fn_constructor_args: Sequence[Any] | None = None,
                   fn_constructor_kwargs: dict[str, Any] | None = None, num_cpus: float | None = None,
                   num_gpus: float | None = None, concurrency: Any = None, **ray_remote_args: Any) -> Any:
        """Apply ``fn(group_batch) -> batch`` to each group (each group is whole in one block)."""
        if not self._keys:
            raise ValueError("map_groups needs a groupby key")
        key = SortKey.of(self._keys)
        sorted_op = L.AllToAll(f"Sort({self._keys})", [self._dataset._logical], bulk_fn=sort_bulk(key))
        name = f"MapGroups({udf_name(fn)})"
        udf = UDF(fn, tuple(fn_args or ()), dict(fn_kwargs or {}), tuple(fn_constructor_args or ()),
                  dict(fn_constructor_kwargs or {}))
        stage = _GroupsStage(self._keys, MapBatchesStage(udf, None, batch_format, False, name=name), name=name)
        op = L.MapLike(name, [sorted_op], stage=stage, compute=udf_compute(fn, compute, concurrency, name),
                       ray_remote_args=udf_remote_args(num_cpus, num_gpus, None, ray_remote_args))
        return self._dataset._with(op)

    def with_column(self, column_name: str, expr: Any, **ray_remote_args: Any) -> Any:
        """Each group's rows with ``column_name`` added, computed by the expression ``expr``
        on that group (all original rows and columns kept)."""
        from raylite.data.expressions import eval_column, named_exprs

        (name, checked), = named_exprs([(column_name, expr)])

        def add(group: Any) -> Any:
            values = eval_column(checked, group, f"GroupedData.with_column({name!r})")
            if name in group.column_names:
                return group.set_column(group.column_names.index(name), name, values)
            return group.append_column(name, values)

        return self.map_groups(add, batch_format="pyarrow", **ray_remote_args)


@dataclass
class _GroupsStage(Stage):
    keys: list[str]
    inner: MapBatchesStage
    name: str = "MapGroups"

    def setup(self) -> None:
        self.inner.setup()

    def apply(self, tables: Iterator[Block]) -> Iterator[Block]:
        fn = self.inner.udf.callable
        for table in tables:
            for group in _split_groups(table, self.keys):
                batch = table_to_batch(group, self.inner.batch_format, writable=True)
                out = _call_udf(fn, batch, self.inner.udf.fn_args, self.inner.udf.fn_kwargs, self.name,
                                f"the group {_group_key(group, self.keys)}")
                yield batch_to_block(out, where=f"operator {self.name}")


def _group_key(group: Block, keys: list[str]) -> tuple:
    return tuple(group.column(k)[0].as_py() for k in keys)


def _split_groups(table: Block, keys: list[str]) -> Iterator[Block]:
    """Contiguous runs of equal keys in a key-sorted table."""
    if table.num_rows == 0:
        return
    change = np.zeros(table.num_rows, dtype=bool)
    change[0] = True
    for k in keys:
        col = table.column(k).combine_chunks() if table.column(k).num_chunks != 1 else table.column(k).chunk(0)
        values = col.to_numpy(zero_copy_only=False)
        nulls = col.is_null().to_numpy(zero_copy_only=False)
        if values.dtype == object:
            differs = np.array([values[i] != values[i - 1] for i in range(1, len(values))], dtype=bool)
        else:
            differs = values[1:] != values[:-1]
        differs = differs | (nulls[1:] != nulls[:-1])
        change[1:] |= differs & ~(nulls[1:] & nulls[:-1])
    starts = list(np.flatnonzero(change)) + [table.num_rows]
    for a, b in zip(starts[:-1], starts[1:]):
        yield table.slice(int(a), int(b - a))


__all__ = ["GroupedData"]
