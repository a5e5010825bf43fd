"""Block transforms: the pure functions a map task runs.

A map task receives its input (blocks, or one read task) and runs a
``TransformChain``: a list of stages, each turning an iterator of tables into
an iterator of tables. Fusing operators (read + map + filter) is just
concatenating their stages, so one task does all of them without putting the
intermediate blocks in the object store. Iterators keep memory flat inside a
task and let a ``LimitStage`` stop a reader early.

Errors raised by user functions keep their type (``except ValueError`` still
works on the driver) and get a note naming the operator and the row or batch.
"""

from __future__ import annotations

import contextvars
import inspect
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pyarrow as pa

from raylite.data._internal import expr_context
from raylite.data._internal.rows import (
    LazyRow,
    apply_per_row,
    as_plain_row,
    unfilled_rows_to_columns,
)
from raylite.data.block import (
    BatchTypeError,
    Block,
    batch_to_block,
    compact_block,
    concat_blocks,
    iter_table_rows,
    rebatch_blocks,
    rows_to_block,
    table_to_batch,
)

ROWS_PER_OUTPUT_TABLE = 4096

_TASK_INDEX: contextvars.ContextVar[int] = contextvars.ContextVar("raylite_data_task_index", default=0)


def current_task_index() -> int:
    """Index of the running map task within its operator (names written files in order)."""
    return _TASK_INDEX.get()


def _note(exc: BaseException, text: str) -> None:
    if hasattr(exc, "add_note") and text not in getattr(exc, "__notes__", ()):
        exc.add_note(text)


def _short(value: Any, limit: int = 300) -> str:
    text = repr(value)
    return text if len(text) <= limit else text[:limit] + "...)"


class Stage:
    """One fused step of a map task; ``name`` is the operator's, for errors and stats."""

    name: str = "Stage"

    def setup(self) -> None:
        """Called once per process before the first apply (actors build UDF instances here)."""

    def apply(self, tables: Iterator[Block]) -> Iterator[Block]:
        raise NotImplementedError


def _call_udf(fn: Callable[..., Any], arg: Any, args: tuple, kwargs: dict, stage: str, what: str) -> Any:
    try:
        return fn(arg, *args, **kwargs)
    except Exception as e:
        _note(e, f"raylite.data: raised by the UDF of operator {stage} on {what}")
        raise


@dataclass
class UDF:
    """A user function or callable class plus its arguments; classes are built in setup()."""

    fn: Any
    fn_args: tuple = ()
    fn_kwargs: dict = field(default_factory=dict)
    fn_constructor_args: tuple = ()
    fn_constructor_kwargs: dict = field(default_factory=dict)
    _instance: Any = None

    @property
    def is_class(self) -> bool:
        return isinstance(self.fn, type)

    def setup(self) -> None:
        if self.is_class and self._instance is None:
            self._instance = self.fn(*self.fn_constructor_args, **self.fn_constructor_kwargs)

    @property
    def callable(self) -> Callable[..., Any]:
        if self.is_class:
            self.setup()
            return self._instance
        return self.fn

    def __getstate__(self) -> dict[str, Any]:
        state = dict(self.__dict__)
        state["_instance"] = None  # instances live in one process only
        return state

    def display_name(self) -> str:
        return getattr(self.fn, "__name__", type(self.fn).__name__)


@dataclass
class MapBatchesStage(Stage):
    udf: UDF
    batch_size: int | None
    batch_format: str | None = "default"
    zero_copy_batch: bool = False
    name: str = "MapBatches"

    def setup(self) -> None:
        self.udf.setup()

    def apply(self, tables: Iterator[Block]) -> Iterator[Block]:
        fn = self.udf.callable
        for table in rebatch_blocks(tables, self.batch_size):
            batch = table_to_batch(table, self.batch_format, writable=not self.zero_copy_batch)
            out = _call_udf(
                fn, batch, self.udf.fn_args, self.udf.fn_kwargs, self.name,
                f"a batch of {table.num_rows} rows with columns {table.column_names}",
            )
            if inspect.isgenerator(out):
                for item in out:
                    yield self._to_block(item)
            else:
                yield self._to_block(out)

    def _to_block(self, out: Any) -> Block:
        try:
            return batch_to_block(out, where=f"operator {self.name}")
        except BatchTypeError:
            raise
        except (ValueError, TypeError) as e:
            _note(e, f"raylite.data: the batch returned by operator {self.name} could not become a block")
            raise


def _apply_per_row(fn: Callable[..., Any], table: Block, udf: UDF, stage: Stage) -> list[Any]:
    """``fn(row)`` for every row of ``table`` (``LazyRow`` views; see ``rows.py``)."""
    def on_error(e: BaseException, i: int) -> None:
        _note(e, f"raylite.data: raised by the UDF of operator {stage.name} on row {_short(_row_at(table, i))}")

    hot = stage.__dict__.setdefault("_hot_columns", [])
    return apply_per_row(fn, table, udf.fn_args, udf.fn_kwargs, hot, on_error)


def _row_at(table: Block, i: int) -> dict[str, Any]:
    return next(iter_table_rows(table.slice(i, 1)), {})


def _columns_out(columns: dict[str, list[Any]], n: int) -> Iterator[Block]:
    """Python-value columns -> blocks of ROWS_PER_OUTPUT_TABLE rows, converted as ``rows_to_block`` does."""
    from raylite.data.block import _list_to_numpy, to_arrow_array

    for start in range(0, n, ROWS_PER_OUTPUT_TABLE):
        stop = start + ROWS_PER_OUTPUT_TABLE
        yield pa.table({name: to_arrow_array(_list_to_numpy(values[start:stop]), name)
                        for name, values in columns.items()})


def _rows_out(rows: list[Any], where: str) -> Iterator[Block]:
    for start in range(0, len(rows), ROWS_PER_OUTPUT_TABLE):
        yield rows_to_block(rows[start:start + ROWS_PER_OUTPUT_TABLE], where)


@dataclass
class MapRowsStage(Stage):
    udf: UDF
    name: str = "Map"

    def setup(self) -> None:
        self.udf.setup()

    def apply(self, tables: Iterator[Block]) -> Iterator[Block]:
        fn = self.udf.callable
        where = f"operator {self.name}"
        for table in tables:
            outs = _apply_per_row(fn, table, self.udf, self)
            types = set(map(type, outs))
            if types - _DICT_TYPES and not all(isinstance(o, dict) for o in outs):
                i, out = next((i, o) for i, o in enumerate(outs) if not isinstance(o, dict))
                raise BatchTypeError(
                    f"The UDF of operator {self.name} returned a {type(out).__name__} for row "
                    f"{_short(_row_at(table, i))}; map() functions must return a dict (use flat_map() to "
                    "return a list of rows)."
                )
            columns = unfilled_rows_to_columns(outs) if LazyRow in types else None
            if columns is not None:  # the rows were returned as views (``row[k] = v; return row``)
                yield from _columns_out(columns, len(outs))
                continue
            if LazyRow in types:
                outs = [as_plain_row(o) for o in outs]
            yield from _rows_out(outs, where)


_DICT_TYPES = {dict, LazyRow}


@dataclass
class FlatMapStage(Stage):
    udf: UDF
    name: str = "FlatMap"

    def setup(self) -> None:
        self.udf.setup()

    def apply(self, tables: Iterator[Block]) -> Iterator[Block]:
        fn = self.udf.callable
        where = f"operator {self.name}"
        for table in tables:
            outs = _apply_per_row(fn, table, self.udf, self)
            rows: list[Any] = []
            for i, out in enumerate(outs):
                if isinstance(out, dict) or not isinstance(out, Iterable):
                    raise BatchTypeError(
                        f"The UDF of operator {self.name} returned a {type(out).__name__} for row "
                        f"{_short(_row_at(table, i))}; flat_map() functions must return a list of dicts."
                    )
                rows.extend(out)
            if any(type(r) is LazyRow for r in rows):
                rows = [as_plain_row(r) for r in rows]
            yield from _rows_out(rows, where)


_BOOL_TYPES = {bool, np.bool_}


@dataclass
class FilterStage(Stage):
    udf: UDF | None = None
    expr: Any = None  # an expressions.Expression (parsed filter string) or an Expr
    name: str = "Filter"

    def setup(self) -> None:
        if self.udf is not None:
            self.udf.setup()

    def apply(self, tables: Iterator[Block]) -> Iterator[Block]:
        if self.expr is not None:
            for table in tables:
                try:
                    yield table.filter(self.expr.mask(table))
                except (pa.ArrowInvalid, pa.ArrowTypeError, pa.ArrowNotImplementedError) as e:
                    raise ValueError(
                        f"Filter expression {self.expr} of operator {self.name} failed on a block with "
                        f"columns {table.column_names}: {e}"
                    ) from e
            return
        assert self.udf is not None
        fn = self.udf.callable
        for table in tables:
            if not table.num_rows:
                yield table
                continue
            keep = _apply_per_row(fn, table, self.udf, self)
            if not set(map(type, keep)) <= _BOOL_TYPES:
                i, bad = next((i, k) for i, k in enumerate(keep) if type(k) not in _BOOL_TYPES)
                raise BatchTypeError(
                    f"The UDF of operator {self.name} returned a {type(bad).__name__} for row "
                    f"{_short(_row_at(table, i))}; filter() functions must return a bool."
                )
            yield table.filter(pa.array(keep, type=pa.bool_()))


def _check_columns(table: Block, cols: Iterable[str], op: str) -> None:
    missing = [c for c in cols if c not in table.column_names]
    if missing:
        raise KeyError(
            f"Operator {op}: column(s) {missing} not found; the dataset has columns {table.column_names}"
        )


@dataclass
class ProjectStage(Stage):
    """select_columns / drop_columns / rename_columns."""

    select: list[str] | None = None
    drop: list[str] | None = None
    rename: dict[str, str] | None = None
    name: str = "Project"

    def apply(self, tables: Iterator[Block]) -> Iterator[Block]:
        for table in tables:
            if self.select is not None:
                _check_columns(table, self.select, self.name)
                table = table.select(self.select)
            if self.drop is not None:
                _check_columns(table, self.drop, self.name)
                table = table.drop_columns(self.drop)
            if self.rename is not None:
                _check_columns(table, self.rename, self.name)
                table = table.rename_columns([self.rename.get(c, c) for c in table.column_names])
            yield table


@dataclass
class AddColumnStage(Stage):
    col: str
    udf: UDF
    batch_format: str = "pandas"
    name: str = "AddColumn"

    def apply(self, tables: Iterator[Block]) -> Iterator[Block]:
        from raylite.data.block import to_arrow_array

        fn = self.udf.callable
        for table in tables:
            batch = table_to_batch(table, self.batch_format)
            values = _call_udf(fn, batch, (), {}, self.name, f"a batch of {table.num_rows} rows")
            arr = to_arrow_array(values, self.col)
            if len(arr) != table.num_rows:
                raise ValueError(
                    f"Operator {self.name}: the function returned {len(arr)} values for column "
                    f"{self.col!r} but the batch has {table.num_rows} rows."
                )
            if self.col in table.column_names:
                table = table.set_column(table.column_names.index(self.col), self.col, arr)
            else:
                table = table.append_column(self.col, arr)
            yield table


@dataclass
class WithColumnsStage(Stage):
    """``with_column`` / ``with_columns``: add or replace columns computed by expressions (Arrow compute)."""

    exprs: list[tuple[str, Any]]  # (name, raylite.data.expressions.Expr)
    name: str = "WithColumns"

    def apply(self, tables: Iterator[Block]) -> Iterator[Block]:
        from raylite.data.expressions import expand_named

        rows_before = 0
        for block_index, table in enumerate(tables):
            token = expr_context.set_current(
                expr_context.EvalContext(current_task_index(), rows_before, block_index))
            try:
                values = [pair for n, e in self.exprs
                          for pair in expand_named(n, e, table, f"Operator {self.name}: expression")]
            finally:
                expr_context.reset(token)
            rows_before += table.num_rows
            for col, arr in values:  # all evaluated on the input block, as one projection
                if col in table.column_names:
                    table = table.set_column(table.column_names.index(col), col, arr)
                else:
                    table = table.append_column(col, arr)
            yield table


@dataclass
class LimitStage(Stage):
    """Stops reading after ``limit`` rows (a per-task bound; the operator enforces the global one)."""

    limit: int
    name: str = "Limit"

    def apply(self, tables: Iterator[Block]) -> Iterator[Block]:
        remaining = self.limit
        if remaining <= 0:
            return
        for table in tables:
            if table.num_rows >= remaining:
                yield table.slice(0, remaining)
                return
            remaining -= table.num_rows
            yield table


@dataclass
class BlockFnStage(Stage):
    """An internal whole-block function (writes, group application)."""

    fn: Callable[[Iterator[Block]], Iterator[Block]]
    name: str = "BlockFn"

    def apply(self, tables: Iterator[Block]) -> Iterator[Block]:
        return self.fn(tables)


@dataclass
class TransformChain:
    """Stages fused into one task; ``name`` is e.g. ``ReadParquet->Map(f)->Filter(g)``."""

    stages: list[Stage]

    @property
    def name(self) -> str:
        return "->".join(s.name for s in self.stages) or "Input"

    def setup(self) -> None:
        for s in self.stages:
            s.setup()

    def apply(self, tables: Iterator[Block]) -> Iterator[Block]:
        for s in self.stages:
            tables = s.apply(tables)
        return tables

    def then(self, other: TransformChain) -> TransformChain:
        return TransformChain(self.stages + other.stages)


def run_chain_blocks(chain: TransformChain, source: Iterator[Block], task_index: int = 0,
                     target_bytes: int | None = None) -> Iterator[Block]:
    """Run the chain over ``source``, yielding output blocks of about ``target_bytes``.

    Why: one task that reads a big file (or flat_maps rows into many) would otherwise
    return one huge block, which defeats the memory budget downstream and makes
    consumers wait for all of it. Small outputs are gathered up to the target; a
    table over 1.5x the target is cut by rows. Always yields at least one block
    (maybe empty), so the schema travels.
    """
    def step(it: Iterator[Block]) -> Block | None:
        token = _TASK_INDEX.set(task_index)  # set per step: a generator may resume in another context
        try:
            return next(it, None)
        finally:
            _TASK_INDEX.reset(token)

    token = _TASK_INDEX.set(task_index)
    try:
        chain.setup()
        tables = chain.apply(source)
    finally:
        _TASK_INDEX.reset(token)
    pending: list[Block] = []
    size = 0
    emitted = False
    while (table := step(tables)) is not None:
        for piece, piece_bytes in _cut_to_target(table, target_bytes):
            pending.append(piece)
            size += piece_bytes
            if target_bytes is not None and size >= target_bytes:
                yield _gathered(pending)
                emitted = True
                pending, size = [], 0
    if pending or not emitted:
        yield _gathered(pending) if pending else pa.table({})


def _gathered(pending: list[Block]) -> Block:
    """Small tables gathered into one output block, with one chunk per column.

    Why one chunk: consumers cut blocks into batches and hand numpy arrays to users; a
    batch that spans many small chunks must be copied together on the consumer (one
    process, the pipeline's serial end) for every batch, while combining here is one
    copy, done in the parallel map tasks, before the block is written out anyway.
    """
    if len(pending) == 1:
        return compact_block(pending[0])
    return concat_blocks(pending).combine_chunks()


def _cut_to_target(table: Block, target_bytes: int | None) -> list[tuple[Block, int]]:
    """(piece, its bytes) pairs.

    Why not `Table.nbytes` per table: it walks every buffer's referenced range (about 0.1 ms
    for 20 columns), which with small map batches was several percent of a map task's CPU.
    The total size of the buffers (~1 us) equals it for the fresh tables a transform makes
    and only over-counts a slice that views a bigger parent (such a piece then closes its
    output block early: smaller blocks, never bigger ones); the exact size is taken only
    for a table big enough to be cut."""
    size = table.get_total_buffer_size()
    if target_bytes is None or size <= target_bytes * 3 // 2 or table.num_rows < 2:
        return [(table, size)]
    nbytes = table.nbytes
    if nbytes <= target_bytes * 3 // 2:
        return [(table, nbytes)]
    n = min(table.num_rows, -(-nbytes // target_bytes))
    cuts = [table.num_rows * i // n for i in range(n + 1)]
    return [(table.slice(a, b - a), nbytes * (b - a) // table.num_rows)
            for a, b in zip(cuts[:-1], cuts[1:]) if b > a]


def run_chain(chain: TransformChain, source: Iterator[Block], task_index: int = 0) -> Block:
    """Run the chain over ``source`` and return the output as one block."""
    token = _TASK_INDEX.set(task_index)
    try:
        chain.setup()
        out = list(chain.apply(source))
    finally:
        _TASK_INDEX.reset(token)
    return concat_blocks(out) if out else pa.table({})
