"""``filter(expr="x > 5 and label == 'cat'")``: Python-syntax strings evaluated with Arrow compute.

The string is parsed once (``ast``) into a tree of ``pyarrow.compute`` calls
that runs on a whole block at a time: vectorized, no Python per row, and no
query-engine setup per call (``Table.filter(Expression)`` costs milliseconds
per call, which dominates on small batches). Supported: column names,
constants, comparisons (chained too), ``and``/``or``/``not``,
``+ - * / **``, ``in`` / ``not in`` a literal list, ``is None`` /
``is not None``, unary minus. Anything else is a ValueError that names the
unsupported part, raised when ``filter()`` is called.
"""

from __future__ import annotations

import ast
from collections.abc import Callable
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc

Evaluator = Callable[[pa.Table], Any]

_CMP = {
    ast.Lt: pc.less, ast.LtE: pc.less_equal, ast.Gt: pc.greater, ast.GtE: pc.greater_equal,
    ast.Eq: pc.equal, ast.NotEq: pc.not_equal,
}
_BIN = {ast.Add: pc.add, ast.Sub: pc.subtract, ast.Mult: pc.multiply, ast.Div: pc.divide, ast.Pow: pc.power}


class Expression:
    """A parsed filter string; ``mask(table)`` gives the boolean column of kept rows."""

    def __init__(self, text: str) -> None:
        self.text = text
        try:
            tree = ast.parse(text, mode="eval")
        except SyntaxError as e:
            raise ValueError(f"Cannot parse filter expression {text!r}: {e.msg}") from e
        self._eval = _convert(tree.body, text)

    def columns(self) -> set[str]:
        return {n.id for n in ast.walk(ast.parse(self.text, mode="eval")) if isinstance(n, ast.Name)}

    def mask(self, table: pa.Table) -> Any:
        missing = self.columns() - set(table.column_names)
        if missing:
            raise KeyError(f"filter expression {self.text!r} uses column(s) {sorted(missing)} not in "
                           f"{table.column_names}")
        return self._eval(table)

    def __getstate__(self) -> dict[str, Any]:
        return {"text": self.text}  # closures are rebuilt from the text on the other side

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__init__(state["text"])  # type: ignore[misc]

    def __str__(self) -> str:
        return self.text


def parse_expression(text: str) -> Expression:
    return Expression(text)


def _lit(node: ast.AST, text: str) -> Any:
    try:
        return ast.literal_eval(node)
    except ValueError as e:
        raise ValueError(f"Filter expression {text!r}: expected a literal, got {ast.unparse(node)!r}") from e


def _convert(node: ast.AST, text: str) -> Evaluator:
    if isinstance(node, ast.Name):
        name = node.id
        return lambda t: t.column(name)
    if isinstance(node, ast.Constant):
        value = node.value
        return lambda t: value
    if isinstance(node, ast.BoolOp):
        parts = [_convert(v, text) for v in node.values]
        combine = pc.and_kleene if isinstance(node.op, ast.And) else pc.or_kleene

        def boolop(t: pa.Table) -> Any:
            out = parts[0](t)
            for p in parts[1:]:
                out = combine(out, p(t))
            return out

        return boolop
    if isinstance(node, ast.UnaryOp):
        inner = _convert(node.operand, text)
        if isinstance(node.op, ast.Not):
            return lambda t: pc.invert(inner(t))
        if isinstance(node.op, ast.USub):
            return lambda t: pc.negate(inner(t))
        if isinstance(node.op, ast.UAdd):
            return inner
    if isinstance(node, ast.BinOp) and type(node.op) in _BIN:
        fn, left, right = _BIN[type(node.op)], _convert(node.left, text), _convert(node.right, text)
        return lambda t: fn(left(t), right(t))
    if isinstance(node, ast.Compare):
        return _compare(node, text)
    raise ValueError(f"Filter expression {text!r}: unsupported syntax {ast.unparse(node)!r}")


def _compare(node: ast.Compare, text: str) -> Evaluator:
    terms: list[Evaluator] = []
    left = node.left
    for op, right in zip(node.ops, node.comparators):
        terms.append(_one_comparison(left, op, right, text))
        left = right

    def all_true(t: pa.Table) -> Any:
        out = terms[0](t)
        for term in terms[1:]:
            out = pc.and_kleene(out, term(t))
        return out

    return all_true


def _one_comparison(left: ast.AST, op: ast.cmpop, right: ast.AST, text: str) -> Evaluator:
    lhs = _convert(left, text)
    if isinstance(op, (ast.In, ast.NotIn)):
        values = list(_lit(right, text))
        negate = isinstance(op, ast.NotIn)

        def isin(t: pa.Table) -> Any:
            col = lhs(t)
            out = pc.is_in(col, value_set=pa.array(values, type=col.type))
            return pc.invert(out) if negate else out

        return isin
    if isinstance(op, (ast.Is, ast.IsNot)):
        if not (isinstance(right, ast.Constant) and right.value is None):
            raise ValueError(f"Filter expression {text!r}: 'is' only works with None")
        if isinstance(op, ast.IsNot):
            return lambda t: pc.is_valid(lhs(t))
        return lambda t: pc.is_null(lhs(t))
    fn, rhs = _CMP[type(op)], _convert(right, text)
    return lambda t: fn(lhs(t), rhs(t))
