"""Expressions that are not built from columns with operators (Ray 2.60's names):

    udf / pyarrow_udf     a Python function (or callable class) of whole columns, as an Expr
    random(seed=None)     uniform floats in [0, 1)
    uuid()                a random UUID string per row
    monotonically_increasing_id()
                          unique int64 ids, increasing within each task: the task's index in
                          the upper 31 bits, the row's number within the task in the lower 33
    download(column)      the bytes of the file each row's URI (any fsspec URL, or a pyarrow
                          filesystem path) names
    unnest(struct_expr)   one column per field of a struct-valued expression (with_columns)
    star()                every column of the input (select-like projections)

Each evaluates on a whole block like the tree's nodes; the task-dependent ones read the
evaluation context the WithColumns stage sets (`expr_context`).
"""

from __future__ import annotations

import inspect
import uuid as _uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pyarrow as pa

from raylite.data._internal import expr_context
from raylite.data._internal.expr_tree import Expr, _wrap, eval_column


def _as_array(values: Any, n: int) -> Any:
    if isinstance(values, pa.Scalar):
        return pa.repeat(values, n)
    return values


@dataclass(frozen=True, eq=False, repr=False)
class UDFExpr(Expr):
    """``fn(*columns, **kwargs)`` on whole columns (pyarrow arrays in, an array out)."""

    fn: Callable[..., Any]
    args: tuple = ()
    kwargs: dict = field(default_factory=dict)
    return_dtype: Any = None
    fn_name: str = "udf"

    def columns(self) -> set[str]:
        out: set[str] = set()
        for e in (*self.args, *self.kwargs.values()):
            out |= e.columns()
        return out

    def _eval(self, table: pa.Table) -> Any:
        args = [_as_array(a._eval(table), table.num_rows) for a in self.args]
        kwargs = {k: _as_array(v._eval(table), table.num_rows) for k, v in self.kwargs.items()}
        out = self.fn(*args, **kwargs)
        if not isinstance(out, (pa.Array, pa.ChunkedArray)):
            target = self.return_dtype.to_arrow_dtype() if getattr(self.return_dtype, "is_arrow_type",
                                                                   lambda: False)() else None
            out = pa.array(out, type=target)
        return out

    def __repr__(self) -> str:
        parts = [repr(a) for a in self.args] + [f"{k}={v!r}" for k, v in self.kwargs.items()]
        return f"{self.fn_name}({', '.join(parts)})"


class _CallableClassUDF:
    """A callable class decorated with @udf: construct it, then call the instance on columns."""

    def __init__(self, cls: type, return_dtype: Any) -> None:
        self._cls = cls
        self._return_dtype = return_dtype

    def __call__(self, *args: Any, **kwargs: Any) -> Callable[..., UDFExpr]:
        instance = self._cls(*args, **kwargs)
        return _function_udf(instance, self._return_dtype, self._cls.__name__)


def _function_udf(fn: Callable[..., Any], return_dtype: Any, name: str) -> Callable[..., UDFExpr]:
    def build(*args: Any, **kwargs: Any) -> UDFExpr:
        return UDFExpr(fn, tuple(_wrap(a) for a in args), {k: _wrap(v) for k, v in kwargs.items()},
                       return_dtype, name)

    build.__name__ = name
    build.__doc__ = getattr(fn, "__doc__", None)
    return build


def udf(return_dtype: Any) -> Callable[[Any], Any]:
    """Decorate a function (or a callable class) of pyarrow arrays; calling it on expressions
    gives an Expr: ``@udf(return_dtype=DataType.int32()) def add_one(x): return pc.add(x, 1)``."""
    def decorate(fn: Any) -> Any:
        if inspect.isclass(fn):
            return _CallableClassUDF(fn, return_dtype)
        return _function_udf(fn, return_dtype, getattr(fn, "__name__", "udf"))

    return decorate


pyarrow_udf = udf


@dataclass(frozen=True, eq=False, repr=False)
class RandomExpr(Expr):
    """Uniform floats in [0, 1); with a seed, the same per task and block on every run."""

    seed: int | None = None
    reseed_after_execution: bool = True

    def _eval(self, table: pa.Table) -> Any:
        ctx = expr_context.current()
        if self.seed is None:
            rng = np.random.default_rng()
        else:
            rng = np.random.default_rng([self.seed & ((1 << 63) - 1), ctx.task_index, ctx.block_index])
        return pa.array(rng.random(table.num_rows))

    def __repr__(self) -> str:
        return f"random(seed={self.seed!r})"


def random(*, seed: int | None = None, reseed_after_execution: bool = True) -> RandomExpr:
    return RandomExpr(seed, reseed_after_execution)


@dataclass(frozen=True, eq=False, repr=False)
class UUIDExpr(Expr):
    """A new random UUID (as a string) for every row."""

    def _eval(self, table: pa.Table) -> Any:
        return pa.array([str(_uuid.uuid4()) for _ in range(table.num_rows)], type=pa.string())

    def __repr__(self) -> str:
        return "uuid()"


def uuid() -> UUIDExpr:
    return UUIDExpr()


@dataclass(frozen=True, eq=False, repr=False)
class MonotonicallyIncreasingIdExpr(Expr):
    """(task index << 33) + the row's number within its task: unique, increasing per task."""

    def _eval(self, table: pa.Table) -> Any:
        ctx = expr_context.current()
        start = (ctx.task_index << 33) + ctx.row_offset
        return pa.array(np.arange(start, start + table.num_rows, dtype=np.int64))

    def __repr__(self) -> str:
        return "monotonically_increasing_id()"


def monotonically_increasing_id() -> MonotonicallyIncreasingIdExpr:
    return MonotonicallyIncreasingIdExpr()


@dataclass(frozen=True, eq=False, repr=False)
class DownloadExpr(Expr):
    """The bytes behind each row's URI (null URI -> null)."""

    uri_column_name: str
    filesystem: Any = None

    def columns(self) -> set[str]:
        return {self.uri_column_name}

    def _eval(self, table: pa.Table) -> Any:
        return pa.array([None if uri is None else self._read(uri)
                         for uri in table.column(self.uri_column_name).to_pylist()], type=pa.binary())

    def _read(self, uri: str) -> bytes:
        if self.filesystem is not None:
            with self.filesystem.open_input_stream(uri) as f:
                return f.read()
        import fsspec

        with fsspec.open(uri, "rb") as f:
            return f.read()

    def __repr__(self) -> str:
        return f"download({self.uri_column_name!r})"


def download(uri_column_name: str, *, filesystem: Any = None) -> DownloadExpr:
    return DownloadExpr(uri_column_name, filesystem)


@dataclass(frozen=True, eq=False, repr=False)
class UnnestExpr(Expr):
    """Expands a struct-valued expression into one column per field (in ``with_columns``)."""

    expr: Expr

    def columns(self) -> set[str]:
        return self.expr.columns()

    def _eval(self, table: pa.Table) -> Any:
        return self.expr._eval(table)

    def fields(self, table: pa.Table) -> list[tuple[str, Any]]:
        values = self.expr._eval(table)
        arr = values.combine_chunks() if isinstance(values, pa.ChunkedArray) else values
        if not pa.types.is_struct(arr.type):
            raise TypeError(f"unnest({self.expr!r}) needs a struct-valued expression, got {arr.type}")
        return [(arr.type.field(i).name, arr.field(i)) for i in range(arr.type.num_fields)]

    def __repr__(self) -> str:
        return f"unnest({self.expr!r})"


def unnest(expr: Expr) -> UnnestExpr:
    if not isinstance(expr, Expr):
        raise TypeError(f"unnest() takes an expression, got {type(expr).__name__}")
    return UnnestExpr(expr)


@dataclass(frozen=True, eq=False, repr=False)
class StarExpr(Expr):
    """Every column of the input."""

    def __repr__(self) -> str:
        return "star()"


def star() -> StarExpr:
    return StarExpr()


def expand_named(name: str, expr: Expr, table: pa.Table, what: str) -> list[tuple[str, Any]]:
    """The output columns of one ``with_columns`` entry: ``[(name, values)]``, or one pair per
    struct field for ``unnest(...)``."""
    if isinstance(expr, UnnestExpr):
        return expr.fields(table)
    return [(name, eval_column(expr, table, what))]


__all__ = ["DownloadExpr", "MonotonicallyIncreasingIdExpr", "RandomExpr", "StarExpr", "UDFExpr", "UUIDExpr",
           "UnnestExpr", "download", "expand_named", "monotonically_increasing_id", "pyarrow_udf", "random", "star", "udf",
           "unnest", "uuid"]
