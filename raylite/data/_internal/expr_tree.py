"""The expression tree behind ``raylite.data.expressions``: ``col("a") * 2 > lit(3)``.

An ``Expr`` is a small immutable tree built with Python operators; nothing is
computed when it is built. ``Dataset.filter(expr=...)``, ``with_column`` and
``with_columns`` evaluate it on each block with ``pyarrow.compute``, a whole block
at a time (vectorised, no Python per row). ``to_pyarrow()`` gives the equivalent
``pyarrow.compute.Expression`` for code that wants one.

Semantics follow Arrow compute as Ray's do: ``/`` on two integer columns is
Arrow's integer division, ``&`` / ``|`` are Kleene logic (null-aware), ``+`` on
strings concatenates.
"""

from __future__ import annotations

import enum
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc

from raylite.data._internal.expr_namespaces import (
    _ArrayNamespace,
    _DatetimeNamespace,
    _ListNamespace,
    _MapNamespace,
    _StringNamespace,
    _StructNamespace,
)

__all__ = [
    "AliasExpr",
    "BinaryExpr",
    "CallExpr",
    "ColumnExpr",
    "Expr",
    "LiteralExpr",
    "Operation",
    "UnaryExpr",
    "col",
    "lit",
]


class Operation(str, enum.Enum):
    """The operators an expression tree may hold (Ray's names and values)."""

    ADD = "add"
    SUB = "sub"
    MUL = "mul"
    DIV = "div"
    MOD = "mod"
    FLOORDIV = "floordiv"
    GT = "gt"
    LT = "lt"
    GE = "ge"
    LE = "le"
    EQ = "eq"
    NE = "ne"
    AND = "and"
    OR = "or"
    NOT = "not"
    IS_NULL = "is_null"
    IS_NOT_NULL = "is_not_null"
    IN = "in"
    NOT_IN = "not_in"


_SYMBOLS = {
    Operation.ADD: "+", Operation.SUB: "-", Operation.MUL: "*", Operation.DIV: "/", Operation.MOD: "%",
    Operation.FLOORDIV: "//", Operation.GT: ">", Operation.LT: "<", Operation.GE: ">=", Operation.LE: "<=",
    Operation.EQ: "==", Operation.NE: "!=", Operation.AND: "&", Operation.OR: "|",
}


def _wrap(value: Any) -> Expr:
    return value if isinstance(value, Expr) else LiteralExpr(value)


class Expr:
    """Base of every expression node; combine nodes with Python operators."""

    @property
    def name(self) -> str | None:
        """The output column name this expression carries (a column's name or an alias), if any."""
        return None

    # ---- building
    def _bin(self, other: Any, op: Operation) -> Expr:
        return BinaryExpr(op, self, _wrap(other))

    def _rbin(self, other: Any, op: Operation) -> Expr:
        return BinaryExpr(op, _wrap(other), self)

    def __add__(self, o: Any) -> Expr: return self._bin(o, Operation.ADD)
    def __radd__(self, o: Any) -> Expr: return self._rbin(o, Operation.ADD)
    def __sub__(self, o: Any) -> Expr: return self._bin(o, Operation.SUB)
    def __rsub__(self, o: Any) -> Expr: return self._rbin(o, Operation.SUB)
    def __mul__(self, o: Any) -> Expr: return self._bin(o, Operation.MUL)
    def __rmul__(self, o: Any) -> Expr: return self._rbin(o, Operation.MUL)
    def __truediv__(self, o: Any) -> Expr: return self._bin(o, Operation.DIV)
    def __rtruediv__(self, o: Any) -> Expr: return self._rbin(o, Operation.DIV)
    def __floordiv__(self, o: Any) -> Expr: return self._bin(o, Operation.FLOORDIV)
    def __rfloordiv__(self, o: Any) -> Expr: return self._rbin(o, Operation.FLOORDIV)
    def __mod__(self, o: Any) -> Expr: return self._bin(o, Operation.MOD)
    def __rmod__(self, o: Any) -> Expr: return self._rbin(o, Operation.MOD)
    def __gt__(self, o: Any) -> Expr: return self._bin(o, Operation.GT)
    def __lt__(self, o: Any) -> Expr: return self._bin(o, Operation.LT)
    def __ge__(self, o: Any) -> Expr: return self._bin(o, Operation.GE)
    def __le__(self, o: Any) -> Expr: return self._bin(o, Operation.LE)
    def __eq__(self, o: Any) -> Expr: return self._bin(o, Operation.EQ)  # type: ignore[override]
    def __ne__(self, o: Any) -> Expr: return self._bin(o, Operation.NE)  # type: ignore[override]
    def __and__(self, o: Any) -> Expr: return self._bin(o, Operation.AND)
    def __rand__(self, o: Any) -> Expr: return self._rbin(o, Operation.AND)
    def __or__(self, o: Any) -> Expr: return self._bin(o, Operation.OR)
    def __ror__(self, o: Any) -> Expr: return self._rbin(o, Operation.OR)
    def __invert__(self) -> Expr: return UnaryExpr(Operation.NOT, self)
    def __neg__(self) -> Expr: return BinaryExpr(Operation.SUB, LiteralExpr(0), self)

    __hash__ = object.__hash__

    def __bool__(self) -> bool:
        raise TypeError(
            "An Expr has no truth value: use & | ~ instead of and/or/not, and compare expressions "
            "inside filter(expr=...) or with_column(...) rather than in an if."
        )

    def is_null(self) -> Expr:
        return UnaryExpr(Operation.IS_NULL, self)

    def is_not_null(self) -> Expr:
        return UnaryExpr(Operation.IS_NOT_NULL, self)

    def is_in(self, values: list[Any] | Expr) -> Expr:
        return BinaryExpr(Operation.IN, self, _wrap(list(values) if not isinstance(values, Expr) else values))

    def not_in(self, values: list[Any] | Expr) -> Expr:
        return BinaryExpr(Operation.NOT_IN, self, _wrap(list(values) if not isinstance(values, Expr) else values))

    # ---- element-wise math and casts (Ray 2.60's Expr methods)
    def _fn(self, label: str, fn: Callable[..., Any], *args: Any) -> CallExpr:
        return CallExpr(fn, self, tuple(args), {}, label)

    def abs(self) -> Expr:
        return self._fn("abs", pc.abs)

    def negate(self) -> Expr:
        return self._fn("negate", pc.negate)

    def sign(self) -> Expr:
        return self._fn("sign", pc.sign)

    def power(self, exponent: Any) -> Expr:
        if isinstance(exponent, Expr):
            raise TypeError("power() takes a number as the exponent, not an expression.")
        return self._fn("power", pc.power, exponent)

    def ceil(self) -> Expr:
        return self._fn("ceil", pc.ceil)

    def floor(self) -> Expr:
        return self._fn("floor", pc.floor)

    def round(self) -> Expr:
        return self._fn("round", pc.round)

    def trunc(self) -> Expr:
        return self._fn("trunc", pc.trunc)

    def exp(self) -> Expr:
        return self._fn("exp", pc.exp)

    def ln(self) -> Expr:
        return self._fn("ln", pc.ln)

    def log10(self) -> Expr:
        return self._fn("log10", pc.log10)

    def log2(self) -> Expr:
        return self._fn("log2", pc.log2)

    def sin(self) -> Expr:
        return self._fn("sin", pc.sin)

    def cos(self) -> Expr:
        return self._fn("cos", pc.cos)

    def tan(self) -> Expr:
        return self._fn("tan", pc.tan)

    def asin(self) -> Expr:
        return self._fn("asin", pc.asin)

    def acos(self) -> Expr:
        return self._fn("acos", pc.acos)

    def atan(self) -> Expr:
        return self._fn("atan", pc.atan)

    def cast(self, target_type: Any, *, safe: bool = True) -> Expr:
        """The values as `target_type` (a ``raylite.data.datatype.DataType`` or a pyarrow type)."""
        arrow = target_type.to_arrow_dtype() if hasattr(target_type, "to_arrow_dtype") else target_type
        if not isinstance(arrow, pa.DataType):
            raise TypeError(f"cast() takes a DataType (raylite.data.datatype) or a pyarrow type, "
                            f"got {type(target_type).__name__}")
        return CallExpr(_cast, self, (arrow, safe), {}, "cast")

    # ---- namespaces
    @property
    def arr(self) -> _ArrayNamespace:
        """Fixed-size list (array) columns: ``col("features").arr.to_list()``."""
        return _ArrayNamespace(self, _make_call)

    @property
    def map(self) -> _MapNamespace:
        """Map columns: ``col("headers").map.keys()``, ``.map.values()``."""
        return _MapNamespace(self, _make_call)

    @property
    def str(self) -> _StringNamespace:
        """String functions: ``col("name").str.upper()``, ``.str.contains("x")``, ..."""
        return _StringNamespace(self, _make_call)

    @property
    def list(self) -> _ListNamespace:
        """List functions: ``col("tags").list.len()``, ``.list.get(0)``, ``.list.sort()``, ..."""
        return _ListNamespace(self, _make_call)

    @property
    def struct(self) -> _StructNamespace:
        """Struct fields: ``col("point").struct.field("x")``."""
        return _StructNamespace(self, _make_call)

    @property
    def dt(self) -> _DatetimeNamespace:
        """Timestamp parts: ``col("ts").dt.year()``, ``.dt.floor("day")``, ..."""
        return _DatetimeNamespace(self, _make_call)

    def alias(self, name: str) -> Expr:
        """The same values under the output column name ``name``."""
        if not isinstance(name, str) or not name:
            raise ValueError(f"alias() needs a non-empty column name, got {name!r}")
        return AliasExpr(self, name)

    def structurally_equals(self, other: Any) -> bool:
        return isinstance(other, Expr) and repr(self) == repr(other)

    # ---- evaluating
    def columns(self) -> set[str]:
        """Names of the columns this expression reads."""
        return set()

    def _eval(self, table: pa.Table) -> Any:
        raise NotImplementedError

    def to_pyarrow(self) -> pc.Expression:
        """The equivalent ``pyarrow.compute.Expression``."""
        raise NotImplementedError


@dataclass(frozen=True, eq=False, repr=False)
class ColumnExpr(Expr):
    """A reference to the column ``_name``."""

    _name: str

    @property
    def name(self) -> str:
        return self._name

    def columns(self) -> set[str]:
        return {self._name}

    def _eval(self, table: pa.Table) -> Any:
        return table.column(self._name)

    def to_pyarrow(self) -> pc.Expression:
        return pc.field(self._name)

    def __repr__(self) -> str:
        return f"col({self._name!r})"


@dataclass(frozen=True, eq=False, repr=False)
class LiteralExpr(Expr):
    """A constant, broadcast against the columns it meets."""

    value: Any

    def _eval(self, table: pa.Table) -> Any:
        return self.value if isinstance(self.value, list) else pa.scalar(self.value)

    def to_pyarrow(self) -> pc.Expression:
        return pc.scalar(self.value)

    def __repr__(self) -> str:
        return f"lit({self.value!r})"


def _is_string(value: Any) -> bool:
    t = getattr(value, "type", None)
    return t is not None and (pa.types.is_string(t) or pa.types.is_large_string(t))


def _add(left: Any, right: Any) -> Any:
    if _is_string(left) and _is_string(right):
        return pc.binary_join_element_wise(left, right, "")
    return pc.add(left, right)


def _mod(left: Any, right: Any) -> Any:
    # Python's sign convention (the result has the divisor's sign), as Ray's r = n - floor(n / m) * m
    quotient = pc.floor(pc.divide(pc.cast(left, pa.float64()), pc.cast(right, pa.float64())))
    result = pc.subtract(left, pc.multiply(quotient, right))
    return pc.cast(result, left.type, safe=False) if pa.types.is_integer(getattr(left, "type", pa.null())) \
        and pa.types.is_integer(getattr(right, "type", pa.null())) else result


def _isin(left: Any, right: Any) -> Any:
    values = right if isinstance(right, list) else right.to_pylist()
    value_type = left.type if hasattr(left, "type") else None
    return pc.is_in(left, value_set=pa.array(values, type=value_type))


_ARROW: dict[Operation, Callable[[Any, Any], Any]] = {
    Operation.ADD: _add, Operation.SUB: pc.subtract, Operation.MUL: pc.multiply, Operation.DIV: pc.divide,
    Operation.MOD: _mod, Operation.FLOORDIV: lambda a, b: pc.floor(pc.divide(a, b)),
    Operation.GT: pc.greater, Operation.LT: pc.less, Operation.GE: pc.greater_equal,
    Operation.LE: pc.less_equal, Operation.EQ: pc.equal, Operation.NE: pc.not_equal,
    Operation.AND: pc.and_kleene, Operation.OR: pc.or_kleene,
    Operation.IN: _isin, Operation.NOT_IN: lambda a, b: pc.invert(_isin(a, b)),
}


@dataclass(frozen=True, eq=False, repr=False)
class BinaryExpr(Expr):
    """``left <op> right``."""

    op: Operation
    left: Expr
    right: Expr

    def columns(self) -> set[str]:
        return self.left.columns() | self.right.columns()

    def _eval(self, table: pa.Table) -> Any:
        return _ARROW[self.op](self.left._eval(table), self.right._eval(table))

    def to_pyarrow(self) -> pc.Expression:
        left, right = self.left.to_pyarrow(), self.right.to_pyarrow()
        if self.op in (Operation.IN, Operation.NOT_IN):
            assert isinstance(self.right, LiteralExpr)
            out = left.isin(pa.array(self.right.value))
            return ~out if self.op is Operation.NOT_IN else out
        if self.op is Operation.MOD or self.op is Operation.FLOORDIV:
            raise NotImplementedError(f"{self.op.value} has no pyarrow.compute.Expression form here")
        names = {Operation.AND: "and_kleene", Operation.OR: "or_kleene", Operation.ADD: "add",
                 Operation.SUB: "subtract", Operation.MUL: "multiply", Operation.DIV: "divide",
                 Operation.GT: "greater", Operation.LT: "less", Operation.GE: "greater_equal",
                 Operation.LE: "less_equal", Operation.EQ: "equal", Operation.NE: "not_equal"}
        return pc.Expression._call(names[self.op], [left, right])

    def __repr__(self) -> str:
        if self.op in (Operation.IN, Operation.NOT_IN):
            return f"{self.left!r}.{'is_in' if self.op is Operation.IN else 'not_in'}({self.right!r})"
        return f"({self.left!r} {_SYMBOLS[self.op]} {self.right!r})"


@dataclass(frozen=True, eq=False, repr=False)
class UnaryExpr(Expr):
    """``~operand``, ``operand.is_null()``, ``operand.is_not_null()``."""

    op: Operation
    operand: Expr

    def columns(self) -> set[str]:
        return self.operand.columns()

    def _eval(self, table: pa.Table) -> Any:
        value = self.operand._eval(table)
        if self.op is Operation.NOT:
            return pc.invert(value)
        if self.op is Operation.IS_NULL:
            return pc.is_null(value)
        return pc.is_valid(value)

    def to_pyarrow(self) -> pc.Expression:
        inner = self.operand.to_pyarrow()
        if self.op is Operation.NOT:
            return ~inner
        return inner.is_null() if self.op is Operation.IS_NULL else inner.is_valid()

    def __repr__(self) -> str:
        if self.op is Operation.NOT:
            return f"~{self.operand!r}"
        return f"{self.operand!r}.{self.op.value}()"


@dataclass(frozen=True, eq=False, repr=False)
class AliasExpr(Expr):
    """``expr`` under another output name."""

    expr: Expr
    _name: str

    @property
    def name(self) -> str:
        return self._name

    def columns(self) -> set[str]:
        return self.expr.columns()

    def _eval(self, table: pa.Table) -> Any:
        return self.expr._eval(table)

    def to_pyarrow(self) -> pc.Expression:
        return self.expr.to_pyarrow()

    def __repr__(self) -> str:
        return f"{self.expr!r}.alias({self._name!r})"


@dataclass(frozen=True, eq=False, repr=False)
class CallExpr(Expr):
    """``fn(operand, *args, **kwargs)`` on a whole column: what the ``.str``, ``.list``,
    ``.struct`` and ``.dt`` namespaces build (see ``_internal/expr_namespaces.py``)."""

    fn: Callable[..., Any]
    operand: Expr
    args: tuple = ()
    kwargs: dict = field(default_factory=dict)
    label: str = ""

    def columns(self) -> set[str]:
        return self.operand.columns()

    def _eval(self, table: pa.Table) -> Any:
        return self.fn(self.operand._eval(table), *self.args, **self.kwargs)

    def to_pyarrow(self) -> pc.Expression:
        raise NotImplementedError(f"{self!r} has no pyarrow.compute.Expression form; it is evaluated "
                                  "on each block instead.")

    def __repr__(self) -> str:
        parts = [repr(a) for a in self.args] + [f"{k}={v!r}" for k, v in self.kwargs.items()]
        return f"{self.operand!r}.{self.label}({', '.join(parts)})"


def _cast(values: Any, target: pa.DataType, safe: bool) -> Any:
    return pc.cast(values, target, safe=safe)


def _make_call(fn: Callable[..., Any], operand: Expr, args: tuple, kwargs: dict, label: str) -> CallExpr:
    return CallExpr(fn, operand, tuple(args), dict(kwargs), label)


def col(name: str) -> ColumnExpr:
    """Reference the column ``name``."""
    if not isinstance(name, str):
        raise TypeError(f"col() takes a column name (str), got {type(name).__name__}")
    return ColumnExpr(name)


def lit(value: Any) -> LiteralExpr:
    """A constant value."""
    return LiteralExpr(value)


# ---------------------------------------------------------------- evaluation on blocks


def _check_columns(expr: Expr, table: pa.Table, what: str) -> None:
    missing = expr.columns() - set(table.column_names)
    if missing:
        raise KeyError(f"{what} {expr!r} uses column(s) {sorted(missing)} not in the dataset's columns "
                       f"{table.column_names}")


def eval_column(expr: Expr, table: pa.Table, what: str = "Expression") -> pa.ChunkedArray | pa.Array:
    """``expr`` on ``table`` as one column of ``table.num_rows`` values (constants are repeated)."""
    _check_columns(expr, table, what)
    value = expr._eval(table)
    if isinstance(value, pa.Scalar):
        return pa.repeat(value, table.num_rows)
    if isinstance(value, list):
        raise ValueError(f"{what} {expr!r} is a list, not a column")
    return value


class ExprPredicate:
    """``filter(expr=Expr)``: the boolean mask an ``Expr`` gives on a block (FilterStage's protocol)."""

    def __init__(self, expr: Expr) -> None:
        self.expr = expr

    def mask(self, table: pa.Table) -> Any:
        values = eval_column(self.expr, table, "filter expression")
        if not pa.types.is_boolean(values.type):
            raise TypeError(f"filter expression {self.expr!r} gives {values.type} values, not booleans; "
                            "compare it (e.g. col('x') > 0)")
        return values

    def __str__(self) -> str:
        return repr(self.expr)


def named_exprs(items: Iterable[tuple[str, Expr]]) -> list[tuple[str, Expr]]:
    """Validate ``(name, expr)`` pairs for ``with_columns``."""
    out = []
    for name, expr in items:
        if not isinstance(name, str) or not name:
            raise ValueError(f"with_column(s) needs non-empty column names, got {name!r}")
        if not isinstance(expr, Expr):
            raise TypeError(f"with_column(s) column {name!r}: expected an Expr (raylite.data.expressions.col/lit), "
                            f"got {type(expr).__name__}; use map_batches or add_column for a Python function")
        out.append((name, expr))
    return out
