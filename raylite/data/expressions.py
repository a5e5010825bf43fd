"""Column expressions (Ray's ``ray.data.expressions``): ``col("a") * 2 > lit(3)``.

An ``Expr`` is a small immutable tree built with Python operators; nothing is computed when it
is built. ``Dataset.filter(expr=...)``, ``with_column`` and ``with_columns`` evaluate it on each
block with ``pyarrow.compute``, a whole block at a time (vectorised, no Python per row).

    col, lit, operators, .abs() .cast() ...      _internal/expr_tree.py
    .str .list .struct .dt .arr .map             _internal/expr_namespaces.py
    udf, random, uuid, monotonically_increasing_id, download, unnest, star
                                                 _internal/expr_sources.py

Semantics follow Arrow compute as Ray's do: ``/`` on two integer columns is Arrow's integer
division, ``&`` / ``|`` are Kleene logic (null-aware), ``+`` on strings concatenates.
"""

from raylite.data._internal.expr_sources import (
    DownloadExpr,
    MonotonicallyIncreasingIdExpr,
    RandomExpr,
    StarExpr,
    UDFExpr,
    UnnestExpr,
    UUIDExpr,
    download,
    expand_named,
    monotonically_increasing_id,
    pyarrow_udf,
    random,
    star,
    udf,
    unnest,
    uuid,
)
from raylite.data._internal.expr_tree import (
    AliasExpr,
    BinaryExpr,
    CallExpr,
    ColumnExpr,
    Expr,
    ExprPredicate,
    LiteralExpr,
    Operation,
    UnaryExpr,
    col,
    eval_column,
    lit,
    named_exprs,
)

__all__ = [
    "AliasExpr", "BinaryExpr", "CallExpr", "ColumnExpr", "DownloadExpr", "Expr", "LiteralExpr",
    "MonotonicallyIncreasingIdExpr", "Operation", "RandomExpr", "StarExpr", "UDFExpr", "UUIDExpr",
    "UnaryExpr", "UnnestExpr", "col", "download", "lit", "monotonically_increasing_id", "pyarrow_udf",
    "random", "star", "udf", "unnest", "uuid",
]
# evaluation helpers used by Dataset and its stages (not part of Ray's names)
_HELPERS = (ExprPredicate, eval_column, expand_named, named_exprs)
