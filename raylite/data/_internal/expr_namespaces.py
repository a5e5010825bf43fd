"""Expression namespaces: ``col("name").str.upper()``, ``col("tags").list.len()``,
``col("point").struct.field("x")``, ``col("ts").dt.year()`` (Ray 2.60's methods and names).

Each method returns a call node (``expressions.CallExpr``) that runs one ``pyarrow.compute``
function on the whole column of a block. This module knows nothing of the Expr classes: each
namespace is handed the expression it belongs to and the factory that builds the call node,
so ``expressions.py`` can offer the namespaces as properties without an import cycle.

A few of Ray's methods have no single Arrow kernel: ``list.flatten`` (one level, per row),
``list.sort`` (within each list) and ``list.get`` with a negative index; they are written
below over Arrow's list offsets, still without a Python loop per row where Arrow allows.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

MakeCall = Callable[..., Any]  # (fn, operand, args, kwargs, label) -> Expr


class _Namespace:
    def __init__(self, expr: Any, make_call: MakeCall) -> None:
        self._expr = expr
        self._make = make_call

    def _call(self, label: str, fn: Callable, *args: Any, **kwargs: Any) -> Any:
        return self._make(fn, self._expr, args, kwargs, f"{self._prefix}.{label}")

    _prefix = ""


def _string_method(label: str, fn: Callable) -> Callable:
    def method(self: _StringNamespace, *args: Any, **kwargs: Any) -> Any:
        return self._call(label, fn, *args, **kwargs)

    method.__name__ = label
    method.__doc__ = f"``pyarrow.compute.{fn.__name__}`` on each string."
    return method


class _StringNamespace(_Namespace):
    """String functions of a column: ``col("s").str.upper()``."""

    _prefix = "str"

    def strip(self, characters: str | None = None) -> Any:
        if characters is None:
            return self._call("strip", pc.utf8_trim_whitespace)
        return self._call("strip", pc.utf8_trim, characters)

    def lstrip(self, characters: str | None = None) -> Any:
        if characters is None:
            return self._call("lstrip", pc.utf8_ltrim_whitespace)
        return self._call("lstrip", pc.utf8_ltrim, characters)

    def rstrip(self, characters: str | None = None) -> Any:
        if characters is None:
            return self._call("rstrip", pc.utf8_rtrim_whitespace)
        return self._call("rstrip", pc.utf8_rtrim, characters)

    def pad(self, width: int, fillchar: str = " ", side: str = "right") -> Any:
        """Pad to `width` on the right (left-aligned), the left, or both sides."""
        fns = {"right": pc.utf8_rpad, "left": pc.utf8_lpad, "both": pc.utf8_center}
        if side not in fns:
            raise ValueError(f"str.pad(side={side!r}): use 'left', 'right' or 'both'.")
        return self._call("pad", fns[side], width, fillchar)


# name -> pyarrow.compute function; arguments pass through (Ray's signatures)
_STRING_FUNCTIONS: dict[str, Callable] = {
    "len": pc.utf8_length, "byte_len": pc.binary_length, "upper": pc.utf8_upper,
    "lower": pc.utf8_lower, "capitalize": pc.utf8_capitalize, "title": pc.utf8_title,
    "swapcase": pc.utf8_swapcase, "reverse": pc.utf8_reverse,
    "is_alnum": pc.utf8_is_alnum, "is_alpha": pc.utf8_is_alpha, "is_ascii": pc.string_is_ascii,
    "is_decimal": pc.utf8_is_decimal, "is_digit": pc.utf8_is_digit, "is_lower": pc.utf8_is_lower,
    "is_numeric": pc.utf8_is_numeric, "is_printable": pc.utf8_is_printable,
    "is_space": pc.utf8_is_space, "is_title": pc.utf8_is_title, "is_upper": pc.utf8_is_upper,
    "starts_with": pc.starts_with, "ends_with": pc.ends_with, "contains": pc.match_substring,
    "match": pc.match_like, "match_regex": pc.match_substring_regex, "find": pc.find_substring,
    "find_regex": pc.find_substring_regex, "count": pc.count_substring,
    "count_regex": pc.count_substring_regex, "extract": pc.extract_regex,
    "replace": pc.replace_substring, "replace_regex": pc.replace_substring_regex,
    "replace_slice": pc.utf8_replace_slice, "repeat": pc.binary_repeat,
    "slice": pc.utf8_slice_codeunits, "split": pc.split_pattern, "split_regex": pc.split_pattern_regex,
    "split_whitespace": pc.utf8_split_whitespace, "center": pc.utf8_center, "lpad": pc.utf8_lpad,
    "rpad": pc.utf8_rpad,
}
for _name, _fn in _STRING_FUNCTIONS.items():
    setattr(_StringNamespace, _name, _string_method(_name, _fn))


# ---------------------------------------------------------------- lists


def _as_array(values: Any) -> pa.Array:
    return values.combine_chunks() if isinstance(values, pa.ChunkedArray) else values


def list_get(values: Any, index: int) -> pa.Array:
    """Element `index` of each list (negative counts from the end); null when out of range."""
    arr = _as_array(values)
    if pa.types.is_fixed_size_list(arr.type):
        arr = arr.cast(pa.list_(arr.type.value_type))
    lengths = pc.fill_null(pc.list_value_length(arr), 0).to_numpy(zero_copy_only=False)
    starts = arr.offsets.to_numpy()[:-1]
    pos = lengths + index if index < 0 else np.full(len(arr), index)
    valid = (pos >= 0) & (pos < lengths) & arr.is_valid().to_numpy(zero_copy_only=False)
    where = pa.array(np.where(valid, starts + pos, 0), mask=~valid)
    return arr.values.take(where)


def list_flatten_each(values: Any) -> pa.Array:
    """list<list<x>> -> list<x>: one level of nesting removed inside each row."""
    arr = _as_array(values)
    if not pa.types.is_list(arr.type.value_type) and not pa.types.is_large_list(arr.type.value_type):
        raise TypeError(f"list.flatten() needs a column of lists of lists, got {arr.type}")
    out = [None if row is None else [x for inner in row if inner is not None for x in inner]
           for row in arr.to_pylist()]
    return pa.array(out, type=pa.list_(arr.type.value_type.value_type))


def list_sort_each(values: Any, order: str = "ascending", null_placement: str = "at_end") -> pa.Array:
    """Each list sorted on its own."""
    if order not in ("ascending", "descending"):
        raise ValueError(f"list.sort(order={order!r}): use 'ascending' or 'descending'.")
    if null_placement not in ("at_start", "at_end"):
        raise ValueError(f"list.sort(null_placement={null_placement!r}): use 'at_start' or 'at_end'.")
    arr = _as_array(values)
    out = []
    for row in arr.to_pylist():
        if row is None:
            out.append(None)
            continue
        present = sorted((x for x in row if x is not None), reverse=order == "descending")
        nulls = [None] * (len(row) - len(present))
        out.append(nulls + present if null_placement == "at_start" else present + nulls)
    return pa.array(out, type=arr.type)


def list_slice(values: Any, start: int | None = None, stop: int | None = None,
               step: int | None = None) -> Any:
    return pc.list_slice(values, start=0 if start is None else start, stop=stop,
                         step=1 if step is None else step)


class _ListNamespace(_Namespace):
    """List functions of a column: ``col("tags").list.len()``."""

    _prefix = "list"

    def len(self) -> Any:
        return self._call("len", pc.list_value_length)

    def get(self, index: int) -> Any:
        return self._call("get", list_get, index)

    def slice(self, start: int | None = None, stop: int | None = None, step: int | None = None) -> Any:
        return self._call("slice", list_slice, start, stop, step)

    def flatten(self) -> Any:
        return self._call("flatten", list_flatten_each)

    def sort(self, order: str = "ascending", null_placement: str = "at_end") -> Any:
        return self._call("sort", list_sort_each, order, null_placement)

    def __getitem__(self, key: int | slice) -> Any:
        """``col("items").list[0]`` is ``get(0)``; ``col("items").list[1:3]`` is ``slice(1, 3)``."""
        if isinstance(key, slice):
            return self.slice(key.start, key.stop, key.step)
        if isinstance(key, int):
            return self.get(key)
        raise TypeError(f"list[...] takes an int or a slice, not {type(key).__name__}")


# ---------------------------------------------------------------- structs and datetimes


def struct_field_by_index(values: Any, index: int) -> Any:
    return pc.struct_field(values, [index])


class _StructNamespace(_Namespace):
    """Struct fields of a column: ``col("point").struct.field("x")``."""

    _prefix = "struct"

    def field(self, field_name: str) -> Any:
        return self._call("field", pc.struct_field, field_name)

    def field_by_index(self, index: int) -> Any:
        return self._call("field_by_index", struct_field_by_index, index)

    def __getitem__(self, key: str | int) -> Any:
        """``col("user").struct["age"]`` by name, ``.struct[0]`` by position."""
        if isinstance(key, str):
            return self.field(key)
        if isinstance(key, int):
            return self.field_by_index(key)
        raise TypeError(f"struct[...] takes a field name or index, not {type(key).__name__}")


def array_to_list(values: Any) -> pa.Array:
    """fixed_size_list<x>[n] -> list<x> (variable-length lists)."""
    arr = _as_array(values)
    if pa.types.is_fixed_size_list(arr.type):
        return arr.cast(pa.list_(arr.type.value_type))
    return arr


class _ArrayNamespace(_Namespace):
    """Fixed-size list columns: ``col("features").arr.to_list()``."""

    _prefix = "arr"

    def to_list(self) -> Any:
        return self._call("to_list", array_to_list)


def _map_part(values: Any, part: str) -> pa.Array:
    arr = _as_array(values)
    if not pa.types.is_map(arr.type):
        raise TypeError(f"map.{part}() needs a map column, got {arr.type}")
    child = arr.keys if part == "keys" else arr.items
    return pa.ListArray.from_arrays(arr.offsets, child, mask=arr.is_null())


def map_keys(values: Any) -> pa.Array:
    return _map_part(values, "keys")


def map_values(values: Any) -> pa.Array:
    return _map_part(values, "values")


class _MapNamespace(_Namespace):
    """Map columns: ``col("headers").map.keys()`` and ``.map.values()``, as lists."""

    _prefix = "map"

    def keys(self) -> Any:
        return self._call("keys", map_keys)

    def values(self) -> Any:
        return self._call("values", map_values)


def _floor(values: Any, unit: str) -> Any:
    return pc.floor_temporal(values, multiple=1, unit=unit)


def _ceil(values: Any, unit: str) -> Any:
    return pc.ceil_temporal(values, multiple=1, unit=unit)


def _round(values: Any, unit: str) -> Any:
    return pc.round_temporal(values, multiple=1, unit=unit)


def _strftime(values: Any, fmt: str) -> Any:
    return pc.strftime(values, format=fmt)


class _DatetimeNamespace(_Namespace):
    """Timestamp parts and rounding: ``col("ts").dt.year()``, ``.dt.floor("day")``."""

    _prefix = "dt"

    def year(self) -> Any:
        return self._call("year", pc.year)

    def month(self) -> Any:
        return self._call("month", pc.month)

    def day(self) -> Any:
        return self._call("day", pc.day)

    def hour(self) -> Any:
        return self._call("hour", pc.hour)

    def minute(self) -> Any:
        return self._call("minute", pc.minute)

    def second(self) -> Any:
        return self._call("second", pc.second)

    def strftime(self, fmt: str) -> Any:
        return self._call("strftime", _strftime, fmt)

    def floor(self, unit: str) -> Any:
        return self._call("floor", _floor, unit)

    def ceil(self, unit: str) -> Any:
        return self._call("ceil", _ceil, unit)

    def round(self, unit: str) -> Any:
        return self._call("round", _round, unit)


__all__ = ["_ArrayNamespace", "_DatetimeNamespace", "_ListNamespace", "_MapNamespace", "_StringNamespace",
           "_StructNamespace"]
