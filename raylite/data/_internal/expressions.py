"""``filter(expr="x > 5 and label == 'cat'")``: Python-syntax strings -> Arrow expressions.

Arrow evaluates the expression on whole blocks (vectorized, no Python per
row). Supported: column names, constants, comparisons (chained too),
``and``/``or``/``not``, ``+ - * / % **``, ``in`` / ``not in`` a literal list,
``is None`` / ``is not None``, unary minus. Anything else is a ValueError that
names the unsupported part.
"""

from __future__ import annotations

import ast
import operator
from typing import Any

import pyarrow.compute as pc

_CMP = {
    ast.Lt: operator.lt, ast.LtE: operator.le, ast.Gt: operator.gt, ast.GtE: operator.ge,
    ast.Eq: operator.eq, ast.NotEq: operator.ne,
}
_BIN = {
    ast.Add: "add", ast.Sub: "subtract", ast.Mult: "multiply", ast.Div: "divide", ast.Mod: None,
    ast.Pow: "power",
}


def parse_expression(text: str) -> pc.Expression:
    try:
        tree = ast.parse(text, mode="eval")
    except SyntaxError as e:
        raise ValueError(f"Cannot parse filter expression {text!r}: {e.msg}") from e
    return _convert(tree.body, text)


def _lit(node: ast.AST, text: str) -> Any:
    try:
        return ast.literal_eval(node)
    except ValueError as e:
        raise ValueError(f"Filter expression {text!r}: expected a literal, got {ast.unparse(node)!r}") from e


def _convert(node: ast.AST, text: str) -> Any:
    if isinstance(node, ast.Name):
        return pc.field(node.id)
    if isinstance(node, ast.Constant):
        return pc.scalar(node.value)
    if isinstance(node, ast.BoolOp):
        parts = [_convert(v, text) for v in node.values]
        out = parts[0]
        for p in parts[1:]:
            out = (out & p) if isinstance(node.op, ast.And) else (out | p)
        return out
    if isinstance(node, ast.UnaryOp):
        inner = _convert(node.operand, text)
        if isinstance(node.op, ast.Not):
            return ~inner
        if isinstance(node.op, ast.USub):
            return pc.negate(inner)
        if isinstance(node.op, ast.UAdd):
            return inner
    if isinstance(node, ast.BinOp) and type(node.op) in _BIN and _BIN[type(node.op)]:
        return getattr(pc, _BIN[type(node.op)])(_convert(node.left, text), _convert(node.right, text))
    if isinstance(node, ast.Compare):
        return _compare(node, text)
    raise ValueError(f"Filter expression {text!r}: unsupported syntax {ast.unparse(node)!r}")


def _compare(node: ast.Compare, text: str) -> Any:
    result = None
    left = node.left
    for op, right in zip(node.ops, node.comparators):
        if isinstance(op, (ast.In, ast.NotIn)):
            values = _lit(right, text)
            term = pc.field(left.id).isin(list(values)) if isinstance(left, ast.Name) else None
            if term is None:
                raise ValueError(f"Filter expression {text!r}: 'in' needs a column on the left")
            if isinstance(op, ast.NotIn):
                term = ~term
        elif isinstance(op, (ast.Is, ast.IsNot)):
            if not (isinstance(right, ast.Constant) and right.value is None):
                raise ValueError(f"Filter expression {text!r}: 'is' only works with None")
            term = _convert(left, text).is_null()
            if isinstance(op, ast.IsNot):
                term = ~term
        else:
            term = _CMP[type(op)](_convert(left, text), _convert(right, text))
        result = term if result is None else (result & term)
        left = right
    return result
