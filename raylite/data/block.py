"""Blocks: the unit of data that flows through a Dataset.

A block is a ``pyarrow.Table``. Arrow gives zero-copy slicing and concatenation,
columnar memory that the object store shares between processes without copies,
and one format for every reader and writer. Everything a user sees (rows as
dicts, batches as numpy dicts / pandas / arrow) is a *view* produced from a
block by ``BlockAccessor``; everything a user returns is turned back into a
block by ``batch_to_block`` / ``rows_to_block``.

Columns that Arrow has no native type for are stored with extension types:

- an n-d numpy array per row (images, token matrices) -> Arrow's canonical
  ``fixed_shape_tensor`` extension (zero-copy back to one numpy array);
- any other Python object -> ``raylite.pyobject`` (pickled bytes).
"""

from __future__ import annotations

import operator
import sys
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from enum import Enum
from typing import Any, TypeVar, Union

import cloudpickle
import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from raylite.data._internal.arrow_columns import PythonObjectType, column_to_numpy, is_tensor_type
from raylite.data._internal.column_accessor import BlockColumnAccessor  # noqa: F401  Ray's name, here
from raylite.data._internal.rows import LazyRow

# Ray's public names of ray.data.block, for type hints in user code (AggregateFnV2[AggType, U])
T = TypeVar("T", contravariant=True)
U = TypeVar("U", covariant=True)
KeyType = TypeVar("KeyType")
AggType = TypeVar("AggType")

Block = pa.Table
Schema = pa.Schema
BlockColumn = Union[pa.ChunkedArray, pa.Array, "pd.Series"]  # noqa: F821
BatchColumn = Union["pd.Series", np.ndarray, pa.Array, pa.ChunkedArray]  # noqa: F821
DataBatch = Union[dict[str, np.ndarray], "pd.DataFrame", pa.Table]  # noqa: F821
DataBatchColumn = Union[BlockColumn, np.ndarray]
CallableClass = type  # a class whose instances are called (map_batches(SomeClass, ...))
UserDefinedFunction = Union[Callable[[Any], Any], type]
BlockPartition = list  # [(ObjectRef[Block], BlockMetadata)]: the blocks one task made
BlockPartitionMetadata = list  # [BlockMetadata]


class BlockType(Enum):
    ARROW = "arrow"
    PANDAS = "pandas"


class BatchFormat(str, Enum):
    ARROW = "pyarrow"
    PANDAS = "pandas"
    NUMPY = "numpy"


BATCH_FORMATS = ("default", "numpy", "pandas", "pyarrow")
VALID_BATCH_FORMATS = ["pandas", "pyarrow", "numpy", None]
DEFAULT_BATCH_FORMAT = "numpy"


@dataclass
class BlockMetadata:
    """What the driver knows about a block without fetching it."""

    num_rows: int | None  # None: unknown until the block exists (a filtered read)
    size_bytes: int
    schema: pa.Schema | None = None
    input_files: list[str] = field(default_factory=list)

    @staticmethod
    def of(block: Block, input_files: list[str] | None = None) -> BlockMetadata:
        return BlockMetadata(block.num_rows, block.nbytes, block.schema, list(input_files or []))


class BlockAccessor:
    """Read-side helpers over one block (rows, batches, slices)."""

    def __init__(self, block: Block) -> None:
        self.block = block

    @staticmethod
    def for_block(block: Block) -> BlockAccessor:
        return BlockAccessor(block)

    def num_rows(self) -> int:
        return self.block.num_rows

    def size_bytes(self) -> int:
        return self.block.nbytes

    def schema(self) -> pa.Schema:
        return self.block.schema

    def slice(self, start: int, end: int) -> Block:
        return self.block.slice(start, max(0, end - start))

    def to_arrow(self) -> pa.Table:
        return self.block

    def to_pandas(self) -> Any:
        return table_to_pandas(self.block)

    def to_numpy(self, zero_copy: bool = True) -> dict[str, np.ndarray]:
        return table_to_numpy(self.block, writable=not zero_copy)

    def to_batch_format(self, batch_format: str | None, writable: bool = False) -> DataBatch:
        return table_to_batch(self.block, batch_format, writable=writable)

    def iter_rows(self) -> Iterator[dict[str, Any]]:
        yield from iter_table_rows(self.block)

    # column statistics, as Ray's BlockAccessor gives them to AggregateFnV2.aggregate_block:
    # None when the column has no value to aggregate, or holds a null and nulls are not ignored
    def count(self, on: str, ignore_nulls: bool = False) -> int:
        col = self.block.column(on)
        return len(col) - col.null_count if ignore_nulls else len(col)

    def _stat(self, on: str, ignore_nulls: bool, fn: str) -> Any:
        col = self.block.column(on)
        if (col.null_count and not ignore_nulls) or len(col) == col.null_count:
            return None
        return getattr(pc, fn)(col).as_py()

    def sum(self, on: str, ignore_nulls: bool) -> Any:
        return self._stat(on, ignore_nulls, "sum")

    def min(self, on: str, ignore_nulls: bool) -> Any:
        return self._stat(on, ignore_nulls, "min")

    def max(self, on: str, ignore_nulls: bool) -> Any:
        return self._stat(on, ignore_nulls, "max")

    def mean(self, on: str, ignore_nulls: bool) -> Any:
        return self._stat(on, ignore_nulls, "mean")


# ---------------------------------------------------------------- arrow -> user views


def table_to_numpy(table: pa.Table, writable: bool = False) -> dict[str, np.ndarray]:
    return {name: column_to_numpy(table.column(i), writable) for i, name in enumerate(table.column_names)}


def table_to_pandas(table: pa.Table) -> Any:
    """Arrow -> pandas; tensor and object columns become object columns of values."""
    special = [
        i for i, f in enumerate(table.schema) if is_tensor_type(f.type) or isinstance(f.type, PythonObjectType)
    ]
    plain = table.drop_columns([table.column_names[i] for i in special]) if special else table
    df = plain.to_pandas()
    if special:
        for i in special:
            name = table.column_names[i]
            values = column_to_numpy(table.column(i))
            obj = np.empty(len(values), dtype=object)
            obj[:] = list(values)
            df.insert(i, name, obj)
    return _as_pandas_batch(df)


def table_to_batch(table: pa.Table, batch_format: str | None, writable: bool = False) -> DataBatch:
    fmt = "numpy" if batch_format in (None, "default") else batch_format
    if fmt == "numpy":
        return table_to_numpy(table, writable)
    if fmt == "pandas":
        return table_to_pandas(table)
    if fmt in ("pyarrow", "arrow"):
        return table
    raise ValueError(f"batch_format must be one of {BATCH_FORMATS}, got {batch_format!r}")


def iter_table_rows(table: pa.Table) -> Iterator[dict[str, Any]]:
    names = table.column_names
    if not names:
        for _ in range(table.num_rows):
            yield {}
        return
    cols: list[list[Any]] = []
    for i, f in enumerate(table.schema):
        col = table.column(i)
        if is_tensor_type(f.type) or isinstance(f.type, PythonObjectType):
            cols.append(list(column_to_numpy(col)))
        else:
            cols.append(col.to_pylist())
    for values in zip(*cols):
        yield dict(zip(names, values))


# ---------------------------------------------------------------- user values -> arrow


def _as_pandas_batch(df: Any) -> Any:
    """Wrap a DataFrame so ``batch["col"] = 2-d array`` works (stores one row per array).

    Plain pandas refuses to put an n-d array into one column; UDFs written for
    Ray commonly do exactly that with tokenizer outputs, so raylite's pandas
    batches accept it and keep each row's sub-array as an object.
    """
    cls = _pandas_batch_class()
    return cls(df) if type(df) is not cls else df


_PANDAS_BATCH_CLS: Any = None


def _pandas_batch_class() -> Any:
    global _PANDAS_BATCH_CLS
    if _PANDAS_BATCH_CLS is None:
        import pandas as pd

        class PandasBatch(pd.DataFrame):
            """A pandas DataFrame whose columns may be set to n-d arrays (one sub-array per row)."""

            @property
            def _constructor(self) -> type:
                return PandasBatch

            def __setitem__(self, key: Any, value: Any) -> None:
                if isinstance(value, np.ndarray) and value.ndim > 1 and isinstance(key, str):
                    obj = np.empty(len(value), dtype=object)
                    obj[:] = list(value)
                    value = obj
                super().__setitem__(key, value)

        _PANDAS_BATCH_CLS = PandasBatch
    return _PANDAS_BATCH_CLS


def to_arrow_array(values: Any, column: str = "?") -> pa.Array | pa.ChunkedArray:
    """Convert one column's values (numpy array, list, pandas Series, arrow) to Arrow."""
    if isinstance(values, (pa.Array, pa.ChunkedArray)):
        return values
    if hasattr(values, "to_numpy") and not isinstance(values, np.ndarray):  # pandas Series, torch
        if type(values).__module__.startswith("torch"):
            values = values.detach().cpu().numpy()
        else:
            values = values.to_numpy()
    if not isinstance(values, np.ndarray):
        values = _list_to_numpy(list(values))
    if values.ndim > 1:
        return _tensor_array(values)
    if values.dtype == object:
        return _object_array_to_arrow(values, column)
    try:
        return pa.array(values)
    except (pa.ArrowInvalid, pa.ArrowTypeError, pa.ArrowNotImplementedError):
        return _pickle_array(values)


def _tensor_array(values: np.ndarray) -> pa.Array:
    """n-d array -> fixed_shape_tensor column (one row per first-axis element)."""
    if len(values) == 0:  # pyarrow cannot infer from an empty array; build the type by hand
        value_type = pa.from_numpy_dtype(values.dtype)
        ext = pa.fixed_shape_tensor(value_type, list(values.shape[1:]))
        width = int(np.prod(values.shape[1:]))
        return pa.ExtensionArray.from_storage(ext, pa.array([], pa.list_(value_type, width)))
    arr = np.ascontiguousarray(values)
    row_bytes = arr.itemsize * int(np.prod(arr.shape[1:]))
    if arr.strides[0] != row_bytes:  # size-1 axes may carry odd strides; Arrow wants plain C order
        arr = np.frombuffer(arr.tobytes(), dtype=arr.dtype).reshape(arr.shape)
    return pa.FixedShapeTensorArray.from_numpy_ndarray(arr)


_SCALAR_TYPES = (bool, int, float, str, bytes, np.generic)


def _list_to_numpy(values: list[Any]) -> np.ndarray:
    types = set(map(type, values))  # one C pass; the checks below look at the few distinct types
    if values and types and all(issubclass(t, np.ndarray) for t in types):
        shapes = {v.shape for v in values}
        if len(shapes) == 1 and values[0].ndim >= 1:
            return np.stack(values)
    if values and all(issubclass(t, _SCALAR_TYPES) for t in types):
        try:
            return np.asarray(values)
        except (ValueError, TypeError):
            pass
    arr = np.empty(len(values), dtype=object)
    arr[:] = values
    return arr


def _object_array_to_arrow(values: np.ndarray, column: str) -> pa.Array:
    items = list(values)
    for v in items:  # a row view stored as a value (``{"orig": row}``): Arrow reads dicts directly
        if type(v) is LazyRow:
            v._fill()
    non_null = [v for v in items if v is not None]
    if non_null and all(isinstance(v, np.ndarray) for v in non_null):
        shapes = {v.shape for v in non_null}
        if len(shapes) == 1 and len(non_null) == len(items) and non_null[0].ndim >= 1:
            return _tensor_array(np.stack(items))
        if all(v.ndim == 1 for v in non_null):
            try:
                return pa.array([None if v is None else v for v in items])
            except (pa.ArrowInvalid, pa.ArrowTypeError, pa.ArrowNotImplementedError):
                return _pickle_array(values)
        return _pickle_array(values)
    try:
        return pa.array(items)
    except (pa.ArrowInvalid, pa.ArrowTypeError, pa.ArrowNotImplementedError, TypeError):
        return _pickle_array(values)


def _pickle_array(values: Iterable[Any]) -> pa.Array:
    storage = pa.array(
        [None if v is None else cloudpickle.dumps(v, protocol=5) for v in values], type=pa.large_binary()
    )
    return pa.ExtensionArray.from_storage(PythonObjectType(), storage)


class BatchTypeError(TypeError):
    """A UDF returned something that is not a batch (dict of arrays, DataFrame or Table)."""


def batch_to_block(batch: Any, where: str = "") -> Block:
    """A user batch (dict of columns, pandas DataFrame, or Arrow table) -> block."""
    if isinstance(batch, pa.Table):
        return batch
    if isinstance(batch, pa.RecordBatch):
        return pa.Table.from_batches([batch])
    if _is_pandas(batch):
        return _pandas_to_block(batch, where)
    if isinstance(batch, Mapping):
        return _dict_to_block(batch, where)
    suffix = f" in {where}" if where else ""
    raise BatchTypeError(
        f"The batch UDF{suffix} returned a {type(batch).__name__}; it must return a dict of "
        "column name -> numpy array (or list), a pandas DataFrame, or a pyarrow Table."
    )


def _is_pandas(obj: Any) -> bool:
    pd = sys.modules.get("pandas")  # no pandas imported -> cannot be a DataFrame
    return pd is not None and isinstance(obj, pd.DataFrame)


def _dict_to_block(batch: Mapping[str, Any], where: str) -> Block:
    arrays: dict[str, Any] = {}
    lengths: dict[str, int] = {}
    for name, values in batch.items():
        if not isinstance(name, str):
            raise BatchTypeError(f"Batch column names must be strings, got {name!r}{_in(where)}.")
        if np.isscalar(values) or values is None:
            raise BatchTypeError(
                f"Column {name!r} of the batch returned{_in(where)} is a scalar "
                f"({type(values).__name__}); each column must be an array or list with one value per row."
            )
        arr = to_arrow_array(values, name)
        arrays[name] = arr
        lengths[name] = len(arr)
    if len(set(lengths.values())) > 1:
        raise ValueError(
            f"The batch returned{_in(where)} has columns of different lengths: {lengths}. "
            "Every column must have one value per row."
        )
    return pa.table(arrays) if arrays else pa.table({})


def _in(where: str) -> str:
    return f" by {where}" if where else ""


def _pandas_to_block(df: Any, where: str) -> Block:
    special: dict[str, pa.Array] = {}
    plain_cols = []
    for name in df.columns:
        col = df[name]
        if col.dtype == object and len(col) and _needs_special(col):
            special[str(name)] = to_arrow_array(col.to_numpy(), str(name))
        else:
            plain_cols.append(name)
    try:
        table = pa.Table.from_pandas(df[plain_cols] if special else df, preserve_index=False)
    except (pa.ArrowInvalid, pa.ArrowTypeError) as e:
        raise ValueError(f"Could not convert the pandas batch returned{_in(where)} to Arrow: {e}") from e
    if special:
        order = [str(c) for c in df.columns]
        cols = {name: table.column(name) for name in table.column_names}
        cols.update(special)
        table = pa.table({name: cols[name] for name in order})
    return table


def _needs_special(col: Any) -> bool:
    first = next((v for v in col if v is not None), None)
    return isinstance(first, np.ndarray) or not isinstance(first, (str, bytes, int, float, bool, list, dict))


def rows_to_block(rows: list[Any], where: str = "") -> Block:
    """Rows (dicts) -> block; keys missing from some rows become nulls."""
    if not rows:
        return pa.table({})
    if set(map(type, rows)) == {dict}:
        names = list(rows[0])
        first = rows[0].keys()
        if names and all(r.keys() == first for r in rows):  # the usual case: every row has the same keys
            if len(names) == 1:
                key = names[0]
                columns_values = [[r[key] for r in rows]]
            else:
                columns_values = [list(c) for c in zip(*map(operator.itemgetter(*names), rows))]
            return pa.table({n: to_arrow_array(_list_to_numpy(v), n) for n, v in zip(names, columns_values)})
    seen: dict[str, None] = {}
    for row in rows:
        if not isinstance(row, Mapping):
            raise BatchTypeError(
                f"The row UDF{_in(where)} returned a {type(row).__name__}; rows must be dicts "
                "of column name -> value."
            )
        for k in row:
            seen.setdefault(k, None)
    columns = {}
    for name in seen:
        values = [row.get(name) for row in rows]
        columns[name] = to_arrow_array(_list_to_numpy(values), name)
    return pa.table(columns)


def items_to_block(items: list[Any]) -> Block:
    """``from_items`` semantics: dicts are rows, anything else goes to an ``item`` column."""
    if items and all(isinstance(i, Mapping) for i in items):
        return rows_to_block(items)
    return rows_to_block([{"item": i} for i in items])


def concat_blocks(blocks: list[Block]) -> Block:
    """Concatenate blocks (zero-copy); differing schemas are unified or rejected clearly."""
    blocks = [b for b in blocks if b.num_columns or b.num_rows]
    if not blocks:
        return pa.table({})
    if len(blocks) == 1:
        return blocks[0]
    first = blocks[0].schema
    if all(b.schema.equals(first) for b in blocks[1:]):
        return pa.concat_tables(blocks)
    try:
        return pa.concat_tables(blocks, promote_options="permissive")
    except (pa.ArrowInvalid, pa.ArrowTypeError) as e:
        raise SchemaMismatchError(describe_schema_mismatch([b.schema for b in blocks]) + f" ({e})") from e


def rebatch_blocks(blocks: Iterable[Block], batch_size: int | None, drop_last: bool = False) -> Iterator[Block]:
    """Cut and merge a stream of blocks into blocks of exactly `batch_size` rows (zero-copy
    slices, concatenated); the last may be short, or dropped with `drop_last`. `batch_size=None`
    passes the non-empty blocks through as they come. Shared by map_batches and iter_batches."""
    if batch_size is None:
        for b in blocks:
            if b.num_rows:
                yield b
        return
    pending: list[Block] = []
    rows = 0
    for b in blocks:
        offset = 0
        while offset < b.num_rows:
            take = min(batch_size - rows, b.num_rows - offset)
            pending.append(b.slice(offset, take))
            rows += take
            offset += take
            if rows == batch_size:
                yield concat_blocks(pending)
                pending, rows = [], 0
    if rows and not drop_last:
        yield concat_blocks(pending)


def compact_block(table: Block) -> Block:
    """The table itself, or a compact copy when it views much more memory than it holds.

    Why: a slice of an Arrow table (a batch of a bigger block, one partition of a
    shuffle, one shard of a split) keeps pointing into its parent's buffers, and
    serializing it ships those whole buffers, once per chunk. So every block that
    leaves a task (or is put by the driver) goes through here; an IPC round trip
    copies just the referenced rows (a memcpy, about 5 ms per 100 MB).
    """
    referenced = 0
    for col in table.columns:
        for chunk in col.chunks:
            referenced += sum(buf.size for buf in chunk.buffers() if buf is not None)
    if referenced <= table.nbytes + table.nbytes // 4 + (64 << 10):
        return table
    sink = pa.BufferOutputStream()
    with pa.ipc.new_stream(sink, table.schema) as writer:
        writer.write_table(table)
    return pa.ipc.open_stream(sink.getvalue()).read_all()


class SchemaMismatchError(ValueError):
    """Blocks (or files) of one dataset have columns of incompatible types."""


def describe_schema_mismatch(schemas: list[pa.Schema], labels: list[str] | None = None) -> str:
    labels = labels or [f"block {i}" for i in range(len(schemas))]
    seen: dict[str, tuple[pa.DataType, str]] = {}
    for schema, label in zip(schemas, labels):
        for f in schema:
            if f.name in seen and not seen[f.name][0].equals(f.type):
                t0, l0 = seen[f.name]
                return f"Column {f.name!r} has type {t0} in {l0} but {f.type} in {label}"
            seen.setdefault(f.name, (f.type, label))
    return "Schemas differ: " + "; ".join(f"{lab}: {s}" for lab, s in zip(labels, schemas))


def unify_schemas(schemas: list[pa.Schema], labels: list[str] | None = None) -> pa.Schema:
    try:
        return pa.unify_schemas(schemas, promote_options="permissive")
    except (pa.ArrowInvalid, pa.ArrowTypeError) as e:
        raise SchemaMismatchError(describe_schema_mismatch(schemas, labels)) from e
