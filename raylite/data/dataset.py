"""Dataset: a lazy logical plan plus the ways to consume it.

Transformations (``map``, ``map_batches``, ``filter``, ``sort`` ...) return a new
Dataset with one more logical node and run nothing. Consumers (``iter_batches``,
``take``, ``count``, ``write_parquet``, ``materialize`` ...) plan the DAG into
physical operators (fusing map chains into single tasks) and run them on the
streaming executor, which keeps the bytes in flight under the memory budget.

Each consumption runs the plan again, as in Ray; ``materialize()`` runs it once
and keeps the blocks in the object store.
"""

from __future__ import annotations

import builtins
import math
from collections.abc import Callable, Iterator, Sequence
from typing import Any

import pyarrow as pa

from raylite.data._connectors.methods import ConnectorMethods
from raylite.data._internal import logical as L
from raylite.data._internal.datasink import FileDatasink, WriteStage
from raylite.data._internal.executor import StreamingExecutor
from raylite.data._internal.operators import RefBundle
from raylite.data._internal.planner import plan as make_plan
from raylite.data._internal.shuffle import (
    SortKey,
    aggregate_logical,
    random_shuffle_bulk,
    randomize_blocks_bulk,
    repartition_bulk,
    slice_ranges,
    sort_bulk,
)
from raylite.data._internal.submitter import TaskOptions, get_submitter
from raylite.data._internal.tasks import block_to_numpy, block_to_pandas
from raylite.data._internal.transforms import (
    UDF,
    AddColumnStage,
    FilterStage,
    FlatMapStage,
    MapBatchesStage,
    MapRowsStage,
    ProjectStage,
    WithColumnsStage,
)
from raylite.data._internal.udf_options import udf_compute, udf_name, udf_remote_args
from raylite.data.aggregate import AggregateFn, Max, Mean, Min, Std, Sum, Unique
from raylite.data.block import (
    BATCH_FORMATS,
    Block,
    table_to_batch,
    table_to_pandas,
)
from raylite.data.context import DEFAULT_BATCH_SIZE, DataContext
from raylite.data.grouped_data import GroupedData
from raylite.data.iterator import (
    DataIterator,
    EpochIterable,
    StreamSplitDataIterator,
    _DatasetIterator,
)

_CONVERT = TaskOptions(num_cpus=1.0)  # a per-block conversion task (to_pandas_refs ...)


class Schema:
    """A dataset's schema (Ray's ``Schema``): ``names``, ``types``, ``base_schema``."""

    def __init__(self, base_schema: pa.Schema) -> None:
        self.base_schema = base_schema

    @property
    def names(self) -> list[str]:
        return list(self.base_schema.names)

    @property
    def types(self) -> list[pa.DataType]:
        return list(self.base_schema.types)

    def __eq__(self, other: object) -> bool:
        if isinstance(other, Schema):
            return self.base_schema.equals(other.base_schema)
        if isinstance(other, pa.Schema):
            return self.base_schema.equals(other)
        return NotImplemented

    def __repr__(self) -> str:
        width = max([len("Column")] + [len(n) for n in self.names])
        lines = [f"{'Column':<{width}}  Type", f"{'------':<{width}}  ----"]
        lines += [f"{n:<{width}}  {t}" for n, t in zip(self.names, self.types)]
        return "\n".join(lines)


class Dataset(ConnectorMethods):
    """A distributed collection of rows, computed lazily from a logical plan."""

    def __init__(self, logical: L.LogicalOperator) -> None:
        self._logical = logical
        self._last_stats = ""

    def _with(self, op: L.LogicalOperator) -> Dataset:
        return Dataset(op)

    # ================================================================ transforms

    def map(self, fn: Any, *, compute: Any = None, fn_args: Sequence[Any] | None = None,
            fn_kwargs: dict[str, Any] | None = None, fn_constructor_args: Sequence[Any] | None = None,
            fn_constructor_kwargs: dict[str, Any] | None = None, num_cpus: float | None = None,
            num_gpus: float | None = None, memory: float | None = None, concurrency: Any = None,
            **ray_remote_args: Any) -> Dataset:
        """Apply ``fn(row) -> row`` (a dict) to every row."""
        name = f"Map({udf_name(fn)})"
        udf = UDF(fn, tuple(fn_args or ()), dict(fn_kwargs or {}), tuple(fn_constructor_args or ()),
                  dict(fn_constructor_kwargs or {}))
        return self._map_like(name, MapRowsStage(udf, name=name), udf_compute(fn, compute, concurrency, name),
                              udf_remote_args(num_cpus, num_gpus, memory, ray_remote_args))

    def map_batches(self, fn: Any, *, batch_size: int | None | str = "default", compute: Any = None,
                    batch_format: str | None = "default", zero_copy_batch: bool = False,
                    fn_args: Sequence[Any] | None = None, fn_kwargs: dict[str, Any] | None = None,
                    fn_constructor_args: Sequence[Any] | None = None,
                    fn_constructor_kwargs: dict[str, Any] | None = None, num_cpus: float | None = None,
                    num_gpus: float | None = None, memory: float | None = None, concurrency: Any = None,
                    **ray_remote_args: Any) -> Dataset:
        """Apply ``fn(batch) -> batch`` to batches of ``batch_size`` rows (default 1024).

        ``fn`` may be a callable class (needs ``concurrency``: an actor pool that
        builds the class once per actor). Batches are dicts of numpy arrays
        ("default"/"numpy"), pandas DataFrames ("pandas") or Arrow tables
        ("pyarrow"); ``fn`` may return any of these, or yield several.
        """
        name = f"MapBatches({udf_name(fn)})"
        if batch_format not in BATCH_FORMATS and batch_format is not None:
            raise ValueError(f"{name}: batch_format must be one of {BATCH_FORMATS}, got {batch_format!r}")
        if batch_size == "default":
            batch_size = DEFAULT_BATCH_SIZE
        if batch_size is not None and (not isinstance(batch_size, int) or batch_size <= 0):
            raise ValueError(f"{name}: batch_size must be a positive int, None or 'default', got {batch_size!r}")
        udf = UDF(fn, tuple(fn_args or ()), dict(fn_kwargs or {}), tuple(fn_constructor_args or ()),
                  dict(fn_constructor_kwargs or {}))
        stage = MapBatchesStage(udf, batch_size, batch_format, zero_copy_batch, name=name)
        return self._map_like(name, stage, udf_compute(fn, compute, concurrency, name),
                              udf_remote_args(num_cpus, num_gpus, memory, ray_remote_args), min_rows=batch_size)

    def flat_map(self, fn: Any, *, compute: Any = None, fn_args: Sequence[Any] | None = None,
                 fn_kwargs: dict[str, Any] | None = None, fn_constructor_args: Sequence[Any] | None = None,
                 fn_constructor_kwargs: dict[str, Any] | None = None, num_cpus: float | None = None,
                 num_gpus: float | None = None, memory: float | None = None, concurrency: Any = None,
                 **ray_remote_args: Any) -> Dataset:
        """Apply ``fn(row) -> list of rows`` and flatten the results."""
        name = f"FlatMap({udf_name(fn)})"
        udf = UDF(fn, tuple(fn_args or ()), dict(fn_kwargs or {}), tuple(fn_constructor_args or ()),
                  dict(fn_constructor_kwargs or {}))
        return self._map_like(name, FlatMapStage(udf, name=name), udf_compute(fn, compute, concurrency, name),
                              udf_remote_args(num_cpus, num_gpus, memory, ray_remote_args))

    def filter(self, fn: Any = None, expr: Any = None, *, compute: Any = None,
               fn_args: Sequence[Any] | None = None, fn_kwargs: dict[str, Any] | None = None,
               fn_constructor_args: Sequence[Any] | None = None,
               fn_constructor_kwargs: dict[str, Any] | None = None, num_cpus: float | None = None,
               num_gpus: float | None = None, memory: float | None = None, concurrency: Any = None,
               **ray_remote_args: Any) -> Dataset:
        """Keep rows where ``fn(row)`` is True, or where ``expr`` holds (vectorised on Arrow).

        ``expr`` is an expression (``col("x") > 5``, from ``raylite.data.expressions``) or
        a string in Python syntax (``"x > 5 and label == 'cat'"``).
        """
        if (fn is None) == (expr is None):
            raise ValueError("filter() takes exactly one of fn or expr")
        if expr is not None:
            from raylite.data._internal.expressions import parse_expression
            from raylite.data.expressions import Expr, ExprPredicate

            if isinstance(expr, Expr):
                predicate: Any = ExprPredicate(expr)
            elif isinstance(expr, str):
                predicate = parse_expression(expr)
            else:
                raise TypeError(f"filter(expr=...) takes an Expr (col('x') > 0) or a string, "
                                f"got {type(expr).__name__}")
            name = f"Filter({predicate})"
            stage = FilterStage(expr=predicate, name=name)
            return self._map_like(name, stage, None, udf_remote_args(num_cpus, num_gpus, memory, ray_remote_args))
        name = f"Filter({udf_name(fn)})"
        udf = UDF(fn, tuple(fn_args or ()), dict(fn_kwargs or {}), tuple(fn_constructor_args or ()),
                  dict(fn_constructor_kwargs or {}))
        return self._map_like(name, FilterStage(udf=udf, name=name), udf_compute(fn, compute, concurrency, name),
                              udf_remote_args(num_cpus, num_gpus, memory, ray_remote_args))

    def with_column(self, column_name: str, expr: Any, *, compute: Any = None, num_cpus: float | None = None,
                    num_gpus: float | None = None, memory: float | None = None,
                    **ray_remote_args: Any) -> Dataset:
        """Add (or replace) ``column_name`` with the values of expression ``expr`` (vectorised)."""
        return self.with_columns({column_name: expr}, compute=compute, num_cpus=num_cpus, num_gpus=num_gpus,
                                 memory=memory, **ray_remote_args)

    def with_columns(self, exprs: Any = None, *more_exprs: Any, compute: Any = None,
                     num_cpus: float | None = None, num_gpus: float | None = None, memory: float | None = None,
                     **ray_remote_args: Any) -> Dataset:
        """Add or replace several columns from ``{name: Expr}`` mappings, all computed from the input block."""
        from raylite.data.expressions import UnnestExpr, named_exprs

        pairs: list[tuple[str, Any]] = []
        for i, mapping in enumerate((exprs, *more_exprs)):
            if mapping is None:
                continue
            if isinstance(mapping, UnnestExpr):  # one column per struct field, named after it
                pairs.append((f"unnest_{i}", mapping))
                continue
            if not isinstance(mapping, dict):
                raise TypeError(f"with_columns takes mappings of column name -> Expr (or unnest(...) "
                                f"expressions), got {type(mapping).__name__}")
            pairs.extend(mapping.items())
        if not pairs:
            raise ValueError("with_columns needs at least one {name: expression}")
        named = named_exprs(pairs)
        name = f"WithColumns({', '.join(n for n, _ in named)})"
        stage = WithColumnsStage(named, name=name)
        return self._map_like(name, stage, None, udf_remote_args(num_cpus, num_gpus, memory, ray_remote_args),
                              preserves_rows=True)

    def add_column(self, col: str, fn: Callable[[Any], Any], *, batch_format: str = "pandas",
                   compute: Any = None, concurrency: Any = None, **ray_remote_args: Any) -> Dataset:
        """Add (or replace) column ``col`` with ``fn(batch)``'s values."""
        name = f"AddColumn({col})"
        stage = AddColumnStage(col, UDF(fn), batch_format, name=name)
        return self._map_like(name, stage, udf_compute(fn, compute, concurrency, name), dict(ray_remote_args),
                              preserves_rows=True)

    def drop_columns(self, cols: list[str] | str, **ray_remote_args: Any) -> Dataset:
        cols = [cols] if isinstance(cols, str) else list(cols)
        return self._map_like(f"DropColumns({cols})", ProjectStage(drop=cols, name="DropColumns"), None,
                              dict(ray_remote_args), preserves_rows=True)

    def select_columns(self, cols: list[str] | str, **ray_remote_args: Any) -> Dataset:
        cols = [cols] if isinstance(cols, str) else list(cols)
        return self._map_like(f"SelectColumns({cols})", ProjectStage(select=cols, name="SelectColumns"), None,
                              dict(ray_remote_args), preserves_rows=True)

    def rename_columns(self, names: dict[str, str] | list[str], **ray_remote_args: Any) -> Dataset:
        """Rename with a mapping ``{old: new}`` or a full list of new names."""
        if isinstance(names, dict):
            stage = ProjectStage(rename=dict(names), name="RenameColumns")
        else:
            old = self.columns()
            if len(old) != len(names):
                raise ValueError(f"rename_columns got {len(names)} names for {len(old)} columns {old}")
            stage = ProjectStage(rename=dict(zip(old, names)), name="RenameColumns")
        return self._map_like("RenameColumns", stage, None, dict(ray_remote_args), preserves_rows=True)

    def _map_like(self, name: str, stage: Any, compute: Any, remote_args: dict[str, Any],
                  min_rows: int | None = None, preserves_rows: bool = False) -> Dataset:
        op = L.MapLike(name, [self._logical], stage=stage, compute=compute, ray_remote_args=remote_args,
                       min_rows_per_bundle=min_rows, preserves_rows=preserves_rows)
        return self._with(op)

    def limit(self, limit: int) -> Dataset:
        """The first ``limit`` rows; upstream reading stops once they are produced."""
        if limit < 0:
            raise ValueError(f"limit must be non-negative, got {limit}")
        return self._with(L.Limit(f"Limit[{limit}]", [self._logical], limit=int(limit)))

    def repartition(self, num_blocks: int, *, shuffle: bool = False, **kwargs: Any) -> Dataset:
        """Exactly ``num_blocks`` blocks: balanced and order-preserving, or shuffled."""
        if num_blocks <= 0:
            raise ValueError(f"repartition needs a positive num_blocks, got {num_blocks}")
        fn = random_shuffle_bulk(None, num_blocks) if shuffle else repartition_bulk(num_blocks)
        return self._with(L.AllToAll("Repartition", [self._logical], bulk_fn=fn))

    def random_shuffle(self, *, seed: int | None = None, num_blocks: int | None = None, **kwargs: Any) -> Dataset:
        """Globally shuffle rows (deterministic for a given ``seed``)."""
        return self._with(L.AllToAll("RandomShuffle", [self._logical], bulk_fn=random_shuffle_bulk(seed, num_blocks)))

    def randomize_block_order(self, *, seed: int | None = None) -> Dataset:
        return self._with(L.AllToAll("RandomizeBlockOrder", [self._logical], bulk_fn=randomize_blocks_bulk(seed)))

    def sort(self, key: str | list[str], descending: bool | list[bool] = False) -> Dataset:
        """Globally sort by one or more columns (nulls last)."""
        sort_key = SortKey.of(key, descending)
        return self._with(L.AllToAll(f"Sort({list(sort_key.columns)})", [self._logical], bulk_fn=sort_bulk(sort_key)))

    def groupby(self, key: str | list[str] | None) -> GroupedData:
        return GroupedData(self, key)

    def union(self, *other: Dataset) -> Dataset:
        """Rows of this dataset followed by the others' (order preserved)."""
        return self._with(L.Union("Union", [self._logical, *[o._logical for o in other]]))

    def zip(self, other: Dataset) -> Dataset:
        """Columns of both datasets side by side (same row count; duplicate names get ``_1``)."""
        return self._with(L.Zip("Zip", [self._logical, other._logical]))

    def join(self, ds: Dataset, join_type: str, num_partitions: int, on: tuple[str, ...] = ("id",),
             right_on: tuple[str, ...] | None = None, left_suffix: str | None = None,
             right_suffix: str | None = None, *, partition_size_hint: int | None = None,
             aggregator_ray_remote_args: dict[str, Any] | None = None, validate_schemas: bool = False) -> Dataset:
        """Join with ``ds`` on key columns: ``inner``, ``left_outer``, ``right_outer``, ``full_outer``
        (and ``left_semi``/``right_semi``/``left_anti``/``right_anti``), hash-partitioned into
        ``num_partitions`` join tasks (and output blocks). ``partition_size_hint``,
        ``aggregator_ray_remote_args`` and ``validate_schemas`` are accepted for Ray
        compatibility and have no effect here."""
        from raylite.data._internal.join import JoinSpec

        if not isinstance(ds, Dataset):
            raise TypeError(f"join() needs another Dataset, got {type(ds).__name__}")
        spec = JoinSpec.of(join_type, num_partitions, on, right_on, left_suffix, right_suffix)
        return self._with(L.Join(f"Join({join_type})", [self._logical, ds._logical], spec=spec))

    # ================================================================ aggregations

    def aggregate(self, *aggs: AggregateFn) -> dict[str, Any] | None:
        """Whole-dataset aggregation; returns ``{agg.name: value}`` (None when empty)."""
        rows = Dataset(aggregate_logical("Aggregate", self._logical, [], list(aggs))).take_all()
        return rows[0] if rows else None

    def _agg_scalar(self, cls: type, on: str | list[str] | None, ignore_nulls: bool, **kw: Any) -> Any:
        cols = self._resolve_on(on)
        result = self.aggregate(*[cls(c, ignore_nulls=ignore_nulls, **kw) for c in cols])
        if result is None:
            return None
        if isinstance(on, str):
            return next(iter(result.values()))
        return result

    def _resolve_on(self, on: str | list[str] | None) -> list[str]:
        if on is None:
            return self.columns()
        return [on] if isinstance(on, str) else list(on)

    def sum(self, on: str | list[str] | None = None, ignore_nulls: bool = True) -> Any:
        return self._agg_scalar(Sum, on, ignore_nulls)

    def min(self, on: str | list[str] | None = None, ignore_nulls: bool = True) -> Any:
        return self._agg_scalar(Min, on, ignore_nulls)

    def max(self, on: str | list[str] | None = None, ignore_nulls: bool = True) -> Any:
        return self._agg_scalar(Max, on, ignore_nulls)

    def mean(self, on: str | list[str] | None = None, ignore_nulls: bool = True) -> Any:
        return self._agg_scalar(Mean, on, ignore_nulls)

    def std(self, on: str | list[str] | None = None, ddof: int = 1, ignore_nulls: bool = True) -> Any:
        return self._agg_scalar(Std, on, ignore_nulls, ddof=ddof)

    def unique(self, column: str) -> list[Any]:
        """Distinct values of ``column``."""
        result = self.aggregate(Unique(column))
        return list(result[f"unique({column})"]) if result else []

    # ================================================================ splitting

    def split(self, n: int, *, equal: bool = False, locality_hints: Any = None) -> list[MaterializedDataset]:
        """``n`` materialized shards of consecutive rows (exactly equal sizes with ``equal=True``)."""
        if n <= 0:
            raise ValueError(f"split needs a positive n, got {n}")
        mat = self.materialize()
        total = mat.count()
        if equal:
            share = total // n
            ranges = [(i * share, (i + 1) * share) for i in range(n)]
        else:
            bounds = [round(total * i / n) for i in range(n + 1)]
            ranges = list(zip(bounds[:-1], bounds[1:]))
        return mat._slice(ranges)

    def split_at_indices(self, indices: list[int]) -> list[MaterializedDataset]:
        """Shards ``[0, i0), [i0, i1), ..., [ik, n)``."""
        if not indices:
            raise ValueError("indices must not be empty")
        if any(i < 0 for i in indices):
            raise ValueError(f"indices must be non-negative, got {indices}")
        if sorted(indices) != list(indices):
            raise ValueError(f"indices must be sorted ascending, got {indices}")
        mat = self.materialize()
        total = mat.count()
        points = [0] + [min(i, total) for i in indices] + [total]
        return mat._slice(list(zip(points[:-1], points[1:])))

    def split_proportionately(self, proportions: list[float]) -> list[MaterializedDataset]:
        if not proportions or any(p <= 0 for p in proportions) or builtins.sum(proportions) >= 1:
            raise ValueError(f"proportions must be positive and sum to less than 1, got {proportions}")
        total = self.count()
        indices, acc = [], 0.0
        for p in proportions:
            acc += p
            indices.append(int(total * acc))
        return self.split_at_indices(indices)

    def train_test_split(self, test_size: float | int, *, shuffle: bool = False,
                         seed: int | None = None, **kwargs: Any) -> tuple[MaterializedDataset, MaterializedDataset]:
        """(train, test); ``test_size`` is a fraction in (0, 1) or a row count."""
        ds = self.random_shuffle(seed=seed) if shuffle else self
        total = ds.count()
        if isinstance(test_size, float):
            if not 0 < test_size < 1:
                raise ValueError(f"test_size as a fraction must be in (0, 1), got {test_size}")
            n_test = math.ceil(total * test_size)
        else:
            if not 0 < test_size < total:
                raise ValueError(f"test_size as a count must be in (0, {total}), got {test_size}")
            n_test = int(test_size)
        train, test = ds.split_at_indices([total - n_test])
        return train, test

    def streaming_split(self, n: int, *, equal: bool = False, locality_hints: Any = None) -> list[DataIterator]:
        """``n`` picklable iterators over disjoint parts of one streaming execution per epoch.

        Send each to a different consumer (Train workers); every consumer must
        iterate each epoch, since an epoch starts when all ``n`` ask for it.
        """
        from raylite.data._internal.split import SplitCoordinator

        if n <= 0:
            raise ValueError(f"streaming_split needs a positive n, got {n}")
        sub = get_submitter()
        options = TaskOptions(num_cpus=0.0, max_concurrency=2 * n + 4)
        coord = sub.start_actor(SplitCoordinator, [self, n, equal, DataContext.get_current().copy()], options,
                                name="SplitCoordinator")
        return [StreamSplitDataIterator(coord, i, n, _from_blocks) for i in range(n)]

    # ================================================================ execution

    def _start_execution(self) -> StreamingExecutor:
        sub = get_submitter()
        ctx = DataContext.get_current().copy()
        ops = make_plan(self._logical, sub, ctx)
        executor = StreamingExecutor(ops, sub, ctx, name=self._logical.name)
        return executor.start()

    def _iter_bundles(self) -> Iterator[RefBundle]:
        executor = self._start_execution()
        try:
            yield from executor
        finally:
            executor.shutdown()
            self._last_stats = executor.stats_summary()

    def _iter_blocks(self) -> Iterator[Block]:
        sub = get_submitter()
        for bundle in self._iter_bundles():
            yield from sub.get(bundle.refs())

    def materialize(self) -> MaterializedDataset:
        """Run the plan once and keep its blocks in the object store."""
        bundles = list(self._iter_bundles())
        out = MaterializedDataset(L.InputData("Materialized", bundles=bundles))
        out._last_stats = self._last_stats
        return out

    # ================================================================ consumers

    def iterator(self) -> DataIterator:
        return _DatasetIterator(self, _from_blocks)

    def iter_rows(self, *, prefetch_batches: int = 1) -> EpochIterable[dict[str, Any]]:
        """Every row as a dict; each ``for`` over the result runs the plan again."""
        return self.iterator().iter_rows()

    def iter_batches(self, *, prefetch_batches: int = 1, batch_size: int | None = 256,
                     batch_format: str | None = "default", drop_last: bool = False,
                     local_shuffle_buffer_size: int | None = None,
                     local_shuffle_seed: int | None = None) -> EpochIterable[Any]:
        """Batches of ``batch_size`` rows (dicts of numpy arrays by default) while the plan streams.

        The result is re-iterable: each ``for`` over it is one epoch (the plan runs again).
        """
        return self.iterator().iter_batches(
            prefetch_batches=prefetch_batches, batch_size=batch_size, batch_format=batch_format,
            drop_last=drop_last, local_shuffle_buffer_size=local_shuffle_buffer_size,
            local_shuffle_seed=local_shuffle_seed)

    def iter_torch_batches(self, *, prefetch_batches: int = 1, batch_size: int | None = 256,
                           dtypes: Any = None, device: str = "auto",
                           collate_fn: Callable[[dict[str, Any]], Any] | None = None, drop_last: bool = False,
                           local_shuffle_buffer_size: int | None = None,
                           local_shuffle_seed: int | None = None) -> EpochIterable[Any]:
        """Batches as dicts of torch tensors (re-iterable per epoch); string/object columns stay numpy."""
        return self.iterator().iter_torch_batches(
            prefetch_batches=prefetch_batches, batch_size=batch_size, dtypes=dtypes, device=device,
            collate_fn=collate_fn, drop_last=drop_last, local_shuffle_buffer_size=local_shuffle_buffer_size,
            local_shuffle_seed=local_shuffle_seed)

    def iter_tf_batches(self, *, prefetch_batches: int = 1, batch_size: int | None = 256,
                        dtypes: Any = None, drop_last: bool = False,
                        local_shuffle_buffer_size: int | None = None,
                        local_shuffle_seed: int | None = None) -> EpochIterable[Any]:
        """Batches as dicts of ``tf.Tensor`` (re-iterable per epoch); needs TensorFlow."""
        return self.iterator().iter_tf_batches(
            prefetch_batches=prefetch_batches, batch_size=batch_size, dtypes=dtypes, drop_last=drop_last,
            local_shuffle_buffer_size=local_shuffle_buffer_size, local_shuffle_seed=local_shuffle_seed)

    def to_tf(self, feature_columns: str | list[str], label_columns: str | list[str], *,
              additional_columns: str | list[str] | None = None, prefetch_batches: int = 1,
              batch_size: int = 1, drop_last: bool = False, local_shuffle_buffer_size: int | None = None,
              local_shuffle_seed: int | None = None, feature_type_spec: Any = None,
              label_type_spec: Any = None, additional_type_spec: Any = None) -> Any:
        """A ``tf.data.Dataset`` of ``(features, labels[, additional])`` batches, for Keras ``fit``;
        each pass over it runs the plan again."""
        return self.iterator().to_tf(
            feature_columns, label_columns, additional_columns=additional_columns,
            prefetch_batches=prefetch_batches, batch_size=batch_size, drop_last=drop_last,
            local_shuffle_buffer_size=local_shuffle_buffer_size, local_shuffle_seed=local_shuffle_seed,
            feature_type_spec=feature_type_spec, label_type_spec=label_type_spec,
            additional_type_spec=additional_type_spec)

    def take(self, limit: int = 20) -> list[dict[str, Any]]:
        """Up to ``limit`` rows as dicts."""
        return list(self.limit(limit).iter_rows()) if limit > 0 else []

    def take_all(self, limit: int | None = None) -> list[dict[str, Any]]:
        rows = []
        for row in self.iter_rows():
            rows.append(row)
            if limit is not None and len(rows) > limit:
                raise ValueError(f"The dataset has more than the given limit of {limit} rows.")
        return rows

    def take_batch(self, batch_size: int = 20, *, batch_format: str | None = "default") -> Any:
        """The first ``batch_size`` rows as one batch."""
        tables = list(self.limit(batch_size)._iter_blocks())
        from raylite.data.block import concat_blocks

        table = concat_blocks(tables)
        if table.num_rows == 0:
            raise ValueError("The dataset is empty.")
        return table_to_batch(table, batch_format)

    def show(self, limit: int = 20) -> None:
        for row in self.take(limit):
            print(row)

    def count(self) -> int:
        """Number of rows (from metadata when known, else by running the plan without fetching blocks)."""
        known = self._logical.known_num_rows()
        if known is not None:
            return known
        return builtins.sum(b.num_rows() for b in self._iter_bundles())

    def schema(self, fetch_if_missing: bool = True) -> Schema | None:
        """Column names and types (runs the plan up to its first block when not known)."""
        base = self._known_schema()
        if base is None and fetch_if_missing:
            base = self._fetch_schema()
        return Schema(base) if base is not None else None

    def _known_schema(self) -> pa.Schema | None:
        op = self._logical
        if isinstance(op, L.Read):
            return op.datasource.schema()
        if isinstance(op, L.InputData):
            if op.blocks is not None:
                return next((b.schema for b in op.blocks if b.num_columns), None)
            return next((m.schema for b in op.bundles or [] for _, m in b.blocks if m.schema is not None
                         and len(m.schema)), None)
        return None

    def _fetch_schema(self) -> pa.Schema | None:
        first_empty = None
        for bundle in self._iter_bundles():
            for _, meta in bundle.blocks:
                if meta.schema is not None and len(meta.schema):
                    if meta.num_rows:
                        return meta.schema
                    first_empty = first_empty or meta.schema
        return first_empty

    def columns(self, fetch_if_missing: bool = True) -> list[str]:
        schema = self.schema(fetch_if_missing)
        return schema.names if schema is not None else []

    def num_blocks(self) -> int:
        return self.materialize().num_blocks()

    def size_bytes(self) -> int:
        return self.materialize().size_bytes()

    def input_files(self) -> list[str]:
        files: list[str] = []
        for op in self._logical.post_order():
            if isinstance(op, L.Read):
                files.extend(op.datasource.input_files())
        return files

    def stats(self) -> str:
        """Per-operator execution stats of the last run of this dataset."""
        return self._last_stats or "Dataset has not been executed yet."

    def to_pandas(self, limit: int | None = None) -> Any:
        import pandas as pd

        tables = list(self._iter_blocks())
        from raylite.data.block import concat_blocks

        table = concat_blocks(tables)
        if limit is not None and table.num_rows > limit:
            raise ValueError(f"The dataset has more than the given limit of {limit} rows: {table.num_rows}.")
        return pd.DataFrame(table_to_pandas(table))

    def _block_refs(self) -> list[Any]:
        """Refs of this dataset's blocks, in order (run first if needed); blocks held in this
        process (``from_items`` ...) are put into the store."""
        mat = self.materialize()
        logical = mat._logical
        if isinstance(logical, L.InputData) and logical.blocks is not None:
            sub = get_submitter()
            return [sub.put(block) for block in logical.blocks]
        return [r for b in mat._bundles() for r in b.refs()]

    def _per_block(self, fn: Callable[..., Any], name: str, *args: Any) -> list[Any]:
        sub = get_submitter()
        return [sub.submit(fn, [ref, *args], num_returns=1, options=_CONVERT, name=name)[0]
                for ref in self._block_refs()]

    def to_arrow_refs(self) -> list[Any]:
        """One ref per block to a pyarrow Table: the blocks themselves, no copy."""
        return self._block_refs()

    def to_numpy_refs(self, *, column: str | None = None) -> list[Any]:
        """One ref per block to a dict of ndarrays (or, with ``column``, to that column's
        ndarray), converted on the cluster: the data does not pass through this process."""
        if column is not None:
            names = self.columns()
            if names and column not in names:
                raise ValueError(f"to_numpy_refs(column={column!r}): the dataset has no such column; "
                                 f"its columns are {names}.")
        return self._per_block(block_to_numpy, "ToNumpyRefs", column)

    def to_pandas_refs(self) -> list[Any]:
        """One ref per block to a pandas DataFrame, converted on the cluster."""
        return self._per_block(block_to_pandas, "ToPandasRefs")

    # ================================================================ writes

    def _write(self, path: str, fmt: str, filesystem: Any, try_create_dir: bool, *,
               _task_args: tuple[int | None, dict[str, Any] | None, int | None] = (None, None, None),
               **options: Any) -> None:
        """``_task_args``: (concurrency, ray_remote_args, min_rows_per_file) for the write tasks."""
        sink = FileDatasink.create(path, fmt, filesystem, try_create_dir, **options)
        concurrency, remote_args, min_rows = _task_args
        compute = L.TaskPoolStrategy(size=int(concurrency)) if concurrency else None
        ds = self._map_like(f"Write{fmt.capitalize()}", WriteStage(sink, name=f"Write{fmt.capitalize()}"),
                            compute, dict(remote_args or {}), min_rows=min_rows)
        for _ in ds._iter_bundles():
            pass
        self._last_stats = ds._last_stats

    def write_parquet(self, path: str, *, filesystem: Any = None, try_create_dir: bool = True,
                      arrow_parquet_args: dict[str, Any] | None = None, **kwargs: Any) -> None:
        """One Parquet file per write task in directory ``path``."""
        self._write(path, "parquet", filesystem, try_create_dir, **(arrow_parquet_args or {}))

    def write_orc(self, path: str, *, filesystem: Any = None, try_create_dir: bool = True,
                  arrow_open_stream_args: dict[str, Any] | None = None, filename_provider: Any = None,
                  arrow_orc_args_fn: Callable[[], dict[str, Any]] | None = None,
                  min_rows_per_file: int | None = None, ray_remote_args: dict[str, Any] | None = None,
                  concurrency: int | None = None, mode: Any = "append", **arrow_orc_args: Any) -> None:
        """One ORC file per write task in directory ``path`` (``pyarrow.orc.write_table``;
        ``arrow_orc_args`` such as ``compression="zstd"`` pass through to it)."""
        from raylite.data._connectors import save_mode

        if filename_provider is not None or arrow_open_stream_args:
            raise NotImplementedError("write_orc(filename_provider=..., arrow_open_stream_args=...) is not in "
                                      "raylite yet.")
        save_mode(mode, ("append",), "write_orc")
        options = {**(arrow_orc_args_fn() if arrow_orc_args_fn else {}), **arrow_orc_args}
        self._write(path, "orc", filesystem, try_create_dir,
                    _task_args=(concurrency, ray_remote_args, min_rows_per_file), **options)

    def write_csv(self, path: str, *, filesystem: Any = None, try_create_dir: bool = True,
                  arrow_csv_args: dict[str, Any] | None = None, **kwargs: Any) -> None:
        self._write(path, "csv", filesystem, try_create_dir, **(arrow_csv_args or {}))

    def write_json(self, path: str, *, filesystem: Any = None, try_create_dir: bool = True,
                   pandas_json_args: dict[str, Any] | None = None, **kwargs: Any) -> None:
        """JSON lines, one file per write task."""
        self._write(path, "json", filesystem, try_create_dir, **(pandas_json_args or {}))

    def write_numpy(self, path: str, *, column: str, filesystem: Any = None, try_create_dir: bool = True,
                    **kwargs: Any) -> None:
        self._write(path, "numpy", filesystem, try_create_dir, column=column)

    def write_datasink(self, datasink: Any, *, ray_remote_args: dict[str, Any] | None = None,
                       concurrency: int | None = None) -> None:
        """Write with a custom ``Datasink``: ``write(blocks, ctx)`` once per write task."""
        from raylite.data.datasink import Datasink, DatasinkWriteStage, collect_result

        if not isinstance(datasink, Datasink):
            raise TypeError(f"write_datasink needs a raylite.data.Datasink, got {type(datasink).__name__}")
        datasink.on_write_start()
        name = f"Write{datasink.get_name()}"
        try:
            if not datasink.supports_distributed_writes:  # one write() on the driver, as Ray does
                stage = DatasinkWriteStage(datasink, name=name)
                result = collect_result(stage.apply(self._iter_blocks()))
            else:
                compute = L.TaskPoolStrategy(size=int(concurrency)) if concurrency else None
                ds = self._map_like(name, DatasinkWriteStage(datasink, name=name), compute,
                                    dict(ray_remote_args or {}))
                result = collect_result(ds._iter_blocks())
                self._last_stats = ds._last_stats
        except Exception as e:
            datasink.on_write_failed(e)
            raise
        datasink.on_write_complete(result)

    def random_sample(self, fraction: float, *, seed: int | None = None) -> Dataset:
        """About ``fraction`` of the rows, each kept independently (order kept); seeded runs repeat."""
        from raylite.data._internal.sampling import RandomSampleStage

        if not isinstance(fraction, (int, float)) or not 0 <= fraction <= 1:
            raise ValueError(f"random_sample: fraction must be between 0 and 1, got {fraction!r}")
        return self._map_like(f"RandomSample({fraction})", RandomSampleStage(float(fraction), seed), None, {})

    def streaming_train_test_split(self, test_size: float, *, split_type: str = "random",
                                   hash_column: str | None = None, seed: int | None = None,
                                   **ray_remote_kwargs: Any) -> tuple[Dataset, Dataset]:
        """(train, test) as two lazy datasets over the same stream, without materializing.

        ``split_type="random"`` draws per row (the two halves agree because both draw
        with the same seed); ``"hash"`` puts a row in test by the hash of ``hash_column``.
        """
        from raylite.data._internal.sampling import SplitStage, fresh_seed

        if not isinstance(test_size, (int, float)) or not 0 < test_size < 1:
            raise ValueError(f"streaming_train_test_split: test_size must be in (0, 1), got {test_size!r}")
        if split_type not in ("random", "hash"):
            raise ValueError(f"split_type must be 'random' or 'hash', got {split_type!r}")
        if split_type == "hash" and not hash_column:
            raise ValueError("split_type='hash' needs hash_column, the column whose hash picks the split")
        s = seed if seed is not None else (0 if split_type == "hash" else fresh_seed())
        halves = []
        for keep_test in (False, True):
            stage = SplitStage(float(test_size), split_type, hash_column, s, keep_test,
                               name="TrainTestSplit[test]" if keep_test else "TrainTestSplit[train]")
            halves.append(self._map_like(stage.name, stage, None, dict(ray_remote_kwargs)))
        return halves[0], halves[1]

    def summary(self, columns: list[str] | None = None, override_dtype_agg_mapping: Any = None) -> Any:
        """Per-column statistics (count, mean, min, max, std, missing_pct, zero_pct, approx_topk ...)."""
        from raylite.data._internal.summary import summarize

        if override_dtype_agg_mapping is not None:
            raise NotImplementedError("summary(override_dtype_agg_mapping=...) is not supported by raylite yet")
        return summarize(self._iter_blocks(), list(columns) if columns is not None else None)

    def explain(self) -> None:
        """Print the logical plan and the physical plan (fused operators) without running anything."""
        print(self._explain_text())

    def _explain_text(self) -> str:
        def tree(names: list[str]) -> list[str]:
            lines = [names[-1]] if names else []
            for depth, n in enumerate(reversed(names[:-1])):
                lines.append("   " * depth + "+- " + n)
            return lines

        logical = [op.name for op in self._logical.post_order()]
        ops = make_plan(self._logical, get_submitter(), DataContext.get_current().copy())
        physical = [f"{type(op).__name__}[{op.name}]" for op in ops]
        return "\n".join(["", "-------- Logical Plan --------", *tree(logical), "",
                          "-------- Physical Plan --------", *tree(physical), ""])

    # ================================================================ misc

    def __repr__(self) -> str:
        rows = self._logical.known_num_rows()
        try:
            schema = self._known_schema()
        except Exception:
            schema = None
        fields = "{" + ", ".join(f"{f.name}: {f.type}" for f in schema) + "}" if schema is not None else "Unknown schema"
        base = f"{type(self).__name__}(num_rows={rows if rows is not None else '?'}, schema={fields})"
        chain = [op.name for op in self._logical.post_order() if not isinstance(op, (L.Read, L.InputData))]
        if not chain:
            return base
        lines = [chain[-1]] + [f"+- {name}" for name in reversed(chain[:-1])] + [f"+- {base}"]
        return "\n".join(lines)

    def __iter__(self) -> Any:
        raise TypeError("Dataset is not iterable; use ds.iter_rows() or ds.iter_batches().")

    def __getstate__(self) -> dict[str, Any]:
        return {"_logical": self._logical, "_last_stats": ""}

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__dict__.update(state)


class MaterializedDataset(Dataset):
    """A Dataset whose blocks already sit in the object store."""

    def _bundles(self) -> list[RefBundle]:
        assert isinstance(self._logical, L.InputData)
        return list(self._logical.bundles or [])

    def num_blocks(self) -> int:
        if isinstance(self._logical, L.InputData) and self._logical.blocks is not None:  # from_* data
            return len(self._logical.blocks)
        return builtins.sum(len(b.blocks) for b in self._bundles())

    def size_bytes(self) -> int:
        if isinstance(self._logical, L.InputData) and self._logical.blocks is not None:
            return builtins.sum(b.nbytes for b in self._logical.blocks)
        return builtins.sum(b.size_bytes() for b in self._bundles())

    def materialize(self) -> MaterializedDataset:
        return self

    def _slice(self, ranges: list[tuple[int, int]]) -> list[MaterializedDataset]:
        from raylite.data._internal.operators import ExecCtx

        blocks = [b for bundle in self._bundles() for b in bundle.blocks]
        ctx = ExecCtx(get_submitter(), DataContext.get_current())
        bundles = slice_ranges(ctx, blocks, ranges)
        return [MaterializedDataset(L.InputData("Materialized", bundles=[b])) for b in bundles]


def _from_blocks(blocks: list[Block]) -> MaterializedDataset:
    """Blocks held in this process as a MaterializedDataset (``from_items``, ``from_arrow``,
    ``DataIterator.materialize``)."""
    return MaterializedDataset(L.InputData("FromBlocks", blocks=blocks))
