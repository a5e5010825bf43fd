"""AggregateFnV2: Ray's interface for user-defined aggregations, on raylite's two-phase engine.

Subclass it and implement ``aggregate_block(block) -> accumulator`` and
``combine(acc, acc) -> acc``; override ``finalize(acc) -> value`` when the accumulator is not
the answer (a mean accumulates ``[sum, count]``). The engine (``core.py``) calls
``aggregate_block`` once per group of each block in the map phase and keeps the accumulators
pickled; the reduce phase combines each group's accumulators, starting from ``zero_factory()``,
and finalizes.

Nulls follow Ray's rules. With ``ignore_nulls=True`` an accumulator of None means "nothing
seen yet" and is skipped when combining, so the result is None only when a group has no
non-null value. With ``ignore_nulls=False`` a None accumulator means "a null was seen" and
wins every combine, so any null makes the result None.
"""

from __future__ import annotations

import abc
import math
import pickle
import re
from collections.abc import Callable
from typing import Any, Generic, TypeVar

import numpy as np
import pyarrow as pa

from raylite.data.aggregate.core import AggregateFn
from raylite.data.block import to_arrow_array

AccumulatorType = TypeVar("AccumulatorType")
AggOutputType = TypeVar("AggOutputType")
_NAME = re.compile(r"^(\w+)\(")


def is_null(value: Any) -> bool:
    """None, or a float NaN (Ray treats both as null)."""
    if value is None:
        return True
    try:
        return isinstance(value, (float, np.floating)) and math.isnan(value)
    except TypeError:
        return False


class AggregateFnV2(AggregateFn, abc.ABC, Generic[AccumulatorType, AggOutputType]):
    """A user-defined aggregation: ``aggregate_block`` per block, ``combine`` pairs of
    accumulators, ``finalize`` the last one (see the module docstring)."""

    def __init__(self, name: str, zero_factory: Callable[[], AccumulatorType], *, on: str | None,
                 ignore_nulls: bool) -> None:
        if not name:
            raise ValueError(f"AggregateFnV2 needs a non-empty name (got {name!r}): it names the "
                             "output column, e.g. 'mean(price)'.")
        self.name = name
        self.on = on
        self._target_col_name = on
        self._ignore_nulls = ignore_nulls
        self._zero_factory = zero_factory
        match = _NAME.match(name)
        self._agg_name = match.group(1) if match else name

    # --- Ray's interface ----------------------------------------------------------------
    def get_target_column(self) -> str | None:
        return self._target_col_name

    def get_agg_name(self) -> str:
        """'sum' for an aggregation named 'sum(col)'."""
        return self._agg_name

    @abc.abstractmethod
    def aggregate_block(self, block: Any) -> AccumulatorType:
        """The accumulator of one block (a pyarrow Table) of one group."""

    @abc.abstractmethod
    def combine(self, current_accumulator: AccumulatorType, new: AccumulatorType) -> AccumulatorType:
        """Merge two accumulators."""

    def finalize(self, accumulator: AccumulatorType) -> AggOutputType | None:
        """The result from the fully combined accumulator (default: the accumulator)."""
        return accumulator  # type: ignore[return-value]

    # --- the engine's protocol (core.py) ---------------------------------------------------
    def needs_groups(self) -> bool:
        return True

    def map_specs(self) -> list:
        return []

    def partial(self, grouped: pa.Table, cols: dict, block: pa.Table, keys: list[str],
                groups: list[tuple[tuple, np.ndarray]]) -> dict[str, pa.Array]:
        if self.on is not None and self.on not in block.column_names:
            raise KeyError(f"{self.name}: column {self.on!r} not found; the dataset has columns "
                           f"{block.column_names}")
        states = []
        for _key, rows in groups:
            acc = self.aggregate_block(block.take(pa.array(rows)))
            if self._ignore_nulls and is_null(acc):
                acc = None
            states.append(pickle.dumps(acc))
        return {"state": pa.array(states, type=pa.large_binary())}

    def combine_specs(self) -> dict[str, str]:
        return {"state": "list"}

    def finalize_states(self, reduced: dict[str, pa.Array]) -> pa.Array:
        out = []
        for states in reduced["state"].to_pylist():
            acc = None if self._ignore_nulls else self._zero_factory()
            for state in states:
                acc = self._combine_null_safe(acc, pickle.loads(state))
            out.append(None if is_null(acc) else self.finalize(acc))
        return to_arrow_array(out, self.name)

    def _combine_null_safe(self, cur: Any, new: Any) -> Any:
        if self._ignore_nulls:
            if is_null(cur):
                return new
            return cur if is_null(new) else self.combine(cur, new)
        if is_null(new) or is_null(cur):
            return None
        return self.combine(cur, new)


__all__ = ["AccumulatorType", "AggOutputType", "AggregateFnV2", "is_null"]
