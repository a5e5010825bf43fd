"""Where an expression is being evaluated: which task, and how many rows that task has already
produced. `with_column(monotonically_increasing_id())` and `random(seed=...)` need it to give
each task its own, stable range; the WithColumns stage sets it around each block."""

from __future__ import annotations

import contextvars
from dataclasses import dataclass


@dataclass(frozen=True)
class EvalContext:
    task_index: int = 0
    row_offset: int = 0  # rows of earlier blocks of the same task
    block_index: int = 0


_OUTSIDE = EvalContext()  # frozen: sharing one instance is safe
_CURRENT: contextvars.ContextVar[EvalContext | None] = contextvars.ContextVar("raylite_expr_eval", default=None)


def current() -> EvalContext:
    return _CURRENT.get() or _OUTSIDE


def set_current(ctx: EvalContext) -> contextvars.Token:
    return _CURRENT.set(ctx)


def reset(token: contextvars.Token) -> None:
    _CURRENT.reset(token)
