"""Rows for ``map`` / ``filter`` / ``flat_map``: dicts whose values are converted when first read.

Why: a row function usually reads one or two columns of a wide block, yet building a
full Python dict per row (every column converted, every key inserted) was where
row-wise pipelines spent their time. A ``LazyRow`` is a real ``dict`` (so
``isinstance(row, dict)``, ``json.dumps``, ``{**row}``, ``dict(row)`` keep working)
that starts empty and fills a key from its block the first time it is read. The
block's columns are converted to Python lists once per block, and only the columns
some row actually reads (``BlockColumns``), so a value a user sees is exactly the
value a plain ``to_pylist()`` dict held before: Python ints, floats, strs,
``datetime``s, lists, dicts, ``None`` for nulls, numpy arrays for tensor columns.

Any operation that needs the whole row (iteration, ``keys()``, ``len``, ``==``,
``repr``, deletion, pickling, ``copy``) first fills every remaining column, after
which the row is an ordinary dict. Setting a key never reads the block, so
``row["new"] = f(row["x"]); return row`` stays cheap until the output is assembled.
"""

from __future__ import annotations

import copy as _copy
import itertools
import sys
from collections.abc import Callable, Iterator
from typing import Any

import pyarrow as pa

from raylite.data._internal.arrow_columns import PythonObjectType, column_to_numpy, is_tensor_type

_FAST_TYPES = (pa.types.is_integer, pa.types.is_floating, pa.types.is_boolean)


def _convert_column(col: pa.ChunkedArray) -> list[Any]:
    """One column as the list of Python values ``to_pylist()`` gives, quickly where numpy can."""
    t = col.type
    if is_tensor_type(t) or isinstance(t, PythonObjectType):
        return list(column_to_numpy(col))
    if col.null_count == 0 and not pa.types.is_float16(t) and any(check(t) for check in _FAST_TYPES):
        return col.to_numpy().tolist()  # same Python ints/floats/bools, without per-value scalars
    return col.to_pylist()


class BlockColumns:
    """One block's columns, each converted to a Python list on first use."""

    __slots__ = ("table", "names", "_converted", "_all")

    def __init__(self, table: pa.Table) -> None:
        self.table = table
        self.names = table.column_names
        self._converted: dict[str, list[Any]] = {}
        self._all: list[list[Any]] | None = None

    def all_columns(self) -> list[list[Any]]:
        """Every column converted, in ``names`` order (cached: whole-row reads use it per row)."""
        cols = self._all
        if cols is None:
            cols = self._all = [self[name] for name in self.names]
        return cols

    def __getitem__(self, name: str) -> list[Any]:
        try:
            return self._converted[name]
        except KeyError:
            pass
        if name not in self.names:  # a real KeyError for the user's row["missing"]
            raise KeyError(name)
        values = self._converted[name] = _convert_column(self.table.column(name))
        return values


_dict_setitem = dict.__setitem__
_dict_contains = dict.__contains__
_dict_get = dict.get


class LazyRow(dict):
    """A row of a block: a dict that reads each column's value when the key is first used."""

    __slots__ = ("_src", "_i")

    def __missing__(self, key: Any) -> Any:
        src = self._src
        if src is None:
            raise KeyError(key)
        value = src[key][self._i]
        _dict_setitem(self, key, value)
        return value

    def _fill(self) -> None:
        """Read every column not yet in the dict; afterwards this is a plain dict."""
        src = self._src
        if src is None:
            return
        self._src = None
        i = self._i
        values = [col[i] for col in src.all_columns()]
        if not dict.__len__(self):
            dict.update(self, zip(src.names, values))
            return
        # Rebuild in a plain dict's order: the block's columns first (a value the user
        # set keeps its column's place), then keys the user added, in insertion order.
        # (dict.items, not dict.copy: copying a dict subclass goes through our keys().)
        held = list(dict.items(self))
        dict.clear(self)
        dict.update(self, zip(src.names, values))
        dict.update(self, held)

    # ---- single-key operations that need not fill the whole row
    def __contains__(self, key: object) -> bool:
        if _dict_contains(self, key):
            return True
        src = self._src
        return src is not None and key in src.names

    def get(self, key: Any, default: Any = None) -> Any:
        if _dict_contains(self, key):
            return _dict_get(self, key)
        src = self._src
        if src is not None and key in src.names:
            return self.__missing__(key)
        return default

    # ---- whole-row operations: fill first, then behave as a dict
    def __iter__(self) -> Iterator[Any]:
        self._fill()
        return dict.__iter__(self)

    def __reversed__(self) -> Iterator[Any]:
        self._fill()
        return dict.__reversed__(self)

    def __len__(self) -> int:
        self._fill()
        return dict.__len__(self)

    def keys(self) -> Any:
        self._fill()
        return dict.keys(self)

    def values(self) -> Any:
        self._fill()
        return dict.values(self)

    def items(self) -> Any:
        self._fill()
        return dict.items(self)

    def __eq__(self, other: object) -> bool:
        self._fill()
        if isinstance(other, LazyRow):
            other._fill()
        return dict.__eq__(self, other)

    def __ne__(self, other: object) -> bool:
        result = self.__eq__(other)
        return result if result is NotImplemented else not result

    __hash__ = None  # type: ignore[assignment]

    def __repr__(self) -> str:
        self._fill()
        return dict.__repr__(self)

    def __delitem__(self, key: Any) -> None:
        self._fill()
        dict.__delitem__(self, key)

    def pop(self, key: Any, *default: Any) -> Any:
        self._fill()
        return dict.pop(self, key, *default)

    def popitem(self) -> tuple[Any, Any]:
        self._fill()
        return dict.popitem(self)

    def setdefault(self, key: Any, default: Any = None) -> Any:
        self._fill()
        return dict.setdefault(self, key, default)

    def clear(self) -> None:
        self._src = None
        dict.clear(self)

    def copy(self) -> dict[Any, Any]:  # type: ignore[override]
        self._fill()
        return dict(dict.items(self))

    def __or__(self, other: Any) -> Any:
        return dict.__or__(self.copy(), other)

    def __ror__(self, other: Any) -> Any:
        return dict.__ror__(self.copy(), other)

    def __copy__(self) -> dict[Any, Any]:
        return self.copy()

    def __deepcopy__(self, memo: dict[int, Any]) -> dict[Any, Any]:
        return _copy.deepcopy(self.copy(), memo)

    def __reduce__(self) -> tuple[Any, ...]:
        return (dict, (self.copy(),))

    def __reduce_ex__(self, protocol: Any) -> tuple[Any, ...]:
        return self.__reduce__()


_new_row = dict.__new__


def iter_lazy_rows(table: pa.Table) -> Iterator[LazyRow]:
    """The rows of ``table`` as ``LazyRow``s sharing one ``BlockColumns``."""
    src = BlockColumns(table)
    for i in range(table.num_rows):
        row = _new_row(LazyRow)
        row._src = src
        row._i = i
        yield row


def as_plain_row(row: Any) -> Any:
    """A ``LazyRow`` returned by a UDF -> a plain dict (whole), anything else unchanged."""
    if type(row) is LazyRow:
        row._fill()
        return dict(dict.items(row))
    return row


# ---------------------------------------------------------------- the row loop

_LOOPS: dict[tuple[int, bool], Callable[..., int]] = {}


def _row_loop(k: int, with_args: bool) -> Callable[..., int]:
    """A loop over rows ``start..stop`` that pre-fills ``k`` hot columns, generated once per (k, args).

    Why generated: filling the columns a UDF is known to read with plain ``row[key] =
    value`` stores (C speed) instead of a ``__missing__`` call per value halves the
    per-row cost, and the number of hot columns varies. The loop returns early when
    the UDF reads a new column, so the caller can switch to a loop that pre-fills it.

    A row object nothing else refers to after the call (reference count: only this
    loop's variable) is emptied and reused for the next row instead of allocating a
    new dict; no code can tell, since nothing can reach the old row any more.
    """
    key = (k, with_args)
    loop = _LOOPS.get(key)
    if loop is not None:
        return loop
    cols = "".join(f"c{j}, " for j in range(k))
    keys = "".join(f"h{j}, " for j in range(k))
    fill = "".join(f"        row[h{j}] = c{j}[i]\n" for j in range(k))
    call = "fn(row, *args, **kwargs)" if with_args else "fn(row)"
    src = (
        "def loop(fn, src, converted, cols, keys, start, stop, append, args, kwargs, new, cls):\n"
        f"    ({cols}) = cols\n"
        f"    ({keys}) = keys\n"
        "    refcount, clear = _getrefcount, _clear\n"
        "    row = new(cls)\n"
        "    for i in range(start, stop):\n"
        "        if refcount(row) > 2:\n"
        "            row = new(cls)\n"
        "        else:\n"
        "            clear(row)\n"
        "        row._src = src\n"
        "        row._i = i\n"
        f"{fill}"
        f"        append({call})\n"
        f"        if len(converted) != {k}:\n"
        "            return i + 1\n"
        "    return stop\n"
    )
    namespace: dict[str, Any] = {"_getrefcount": sys.getrefcount, "_clear": dict.clear}
    exec(compile(src, f"<raylite row loop {k}>", "exec"), namespace)  # noqa: S102 - generated from ints only
    loop = _LOOPS[key] = namespace["loop"]
    return loop


def apply_per_row(fn: Callable[..., Any], table: pa.Table, args: tuple, kwargs: dict,
                  hot: list[str], on_error: Callable[[BaseException, int], None]) -> list[Any]:
    """``fn(row)`` for every row of ``table``, rows as ``LazyRow`` views over its columns.

    ``hot`` (updated in place) names the columns earlier rows read; they are converted
    up front and pre-filled, so the next block starts at full speed. If ``fn`` raises,
    ``on_error(exc, row_index)`` is called (to annotate it) and the exception propagates.
    """
    src = BlockColumns(table)
    for name in hot:
        if name in src.names:
            src[name]
    out: list[Any] = []
    converted = src._converted
    start, stop = 0, table.num_rows
    with_args = bool(args or kwargs)
    try:
        while start < stop:
            names = list(converted)
            loop = _row_loop(len(names), with_args)
            start = loop(fn, src, converted, [converted[n] for n in names], names, start, stop, out.append,
                         args, kwargs, _new_row, LazyRow)
    except Exception as e:
        on_error(e, len(out))
        raise
    finally:
        hot[:] = list(converted)
    return out


def unfilled_rows_to_columns(rows: list[Any]) -> dict[str, list[Any]] | None:
    """Columns for rows that are all unfilled ``LazyRow``s of one block, else None.

    Why: ``row["new"] = f(row["x"]); return row`` is the common ``map``; filling each
    row into a whole dict only to take it apart into columns again costs a dict per
    row. Here a column no row touched is the block's converted column itself, and a
    touched one is gathered with ``dict.get`` (C speed, the block's value as default).
    The column order and values are what the rows' dict views would give: block
    columns first, then added keys in first-seen order, None where a row lacks one.
    """
    if not rows or type(rows[0]) is not LazyRow:
        return None
    src = rows[0]._src
    if src is None or not all(type(r) is LazyRow and r._src is src for r in rows):
        return None
    keys = dict.fromkeys(itertools.chain.from_iterable(map(dict.keys, rows)))
    idx = [r._i for r in rows]
    in_order = idx == list(range(len(src.table)))  # one output row per block row, in order
    columns: dict[str, list[Any]] = {}
    for name, col in zip(src.names, src.all_columns()):
        values = col if in_order else [col[i] for i in idx]
        columns[name] = list(map(dict.get, rows, itertools.repeat(name), values)) if name in keys else values
    for name in keys:
        if name not in columns:
            columns[name] = list(map(dict.get, rows, itertools.repeat(name)))
    return columns
