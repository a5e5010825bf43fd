"""The aggregation engine and the vectorized built-ins: Count, Sum, Min, Max, Mean, Std, AbsMax,
Unique, and Ray's original user-defined AggregateFn.

Each aggregation runs in two vectorized phases over Arrow:

- map (per block): ``block.group_by(keys).aggregate(...)`` gives partial
  states (sum and count for a mean; count, sum and sum of squares for a std);
- reduce (per key range): the partial tables are concatenated, aggregated again
  to combine partial states, then finalized into the result column.

``AggregateFn(init, merge, accumulate_row=..., finalize=...)`` runs user
Python per group instead; it is correct but slower than the built-ins. An aggregation tells
the engine what it needs through ``map_specs`` / ``partial`` (map phase) and
``combine_specs`` / ``finalize_states`` (reduce phase); see `custom.py` for Ray's
AggregateFnV2 on the same protocol.
"""

from __future__ import annotations

import math
import pickle
from collections.abc import Callable
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

Spec = tuple[str | None, str, Any]  # (source column or None for rows, pyarrow function, options)


class AggregateFn:
    """A user-defined aggregation (Ray's signature)."""

    def __init__(
        self,
        init: Callable[[Any], Any],
        merge: Callable[[Any, Any], Any],
        accumulate_row: Callable[[Any, dict[str, Any]], Any] | None = None,
        accumulate_block: Callable[[Any, pa.Table], Any] | None = None,
        finalize: Callable[[Any], Any] | None = None,
        name: str | None = None,
    ) -> None:
        if accumulate_row is None and accumulate_block is None:
            raise ValueError("AggregateFn needs accumulate_row or accumulate_block")
        self.init = init
        self.merge = merge
        self.accumulate_row = accumulate_row
        self.accumulate_block = accumulate_block
        self.finalize_fn = finalize or (lambda a: a)
        self.name = name or "aggregate"

    # partial states for the user path are pickled Python objects (one per group)
    def map_specs(self) -> list[Spec]:
        return []

    def partial(self, grouped: pa.Table, cols: dict[tuple, str], block: pa.Table, keys: list[str],
                groups: list[tuple[tuple, np.ndarray]]) -> dict[str, pa.Array]:
        from raylite.data.block import iter_table_rows

        states = []
        for key, rows in groups:
            acc = self.init(key[0] if len(key) == 1 else key)
            part = block.take(pa.array(rows))
            if self.accumulate_block is not None:
                acc = self.accumulate_block(acc, part)
            else:
                assert self.accumulate_row is not None
                for row in iter_table_rows(part):
                    acc = self.accumulate_row(acc, row)
            states.append(pickle.dumps(acc))
        return {"state": pa.array(states, type=pa.large_binary())}

    def combine_specs(self) -> dict[str, str]:
        return {"state": "list"}

    def finalize_states(self, reduced: dict[str, pa.Array]) -> pa.Array:
        out = []
        for states in reduced["state"].to_pylist():
            accs = [pickle.loads(s) for s in states]
            acc = accs[0]
            for other in accs[1:]:
                acc = self.merge(acc, other)
            out.append(self.finalize_fn(acc))
        from raylite.data.block import to_arrow_array

        return to_arrow_array(out, self.name)

    def needs_groups(self) -> bool:
        return True


class _Builtin(AggregateFn):
    """Vectorized aggregation over one column (or rows, for Count)."""

    label = "agg"

    def __init__(self, on: str | None = None, ignore_nulls: bool = True, alias_name: str | None = None) -> None:
        self.on = on
        self.ignore_nulls = ignore_nulls
        self.name = alias_name or f"{self.label}({on or ''})"

    def _opts(self) -> Any:
        return pc.ScalarAggregateOptions(skip_nulls=self.ignore_nulls, min_count=1)

    def needs_groups(self) -> bool:
        return False

    def map_specs(self) -> list[Spec]:
        raise NotImplementedError

    def partial(self, grouped, cols, block, keys, groups):
        raise NotImplementedError

    def combine_specs(self) -> dict[str, str]:
        raise NotImplementedError

    def finalize_states(self, reduced: dict[str, pa.Array]) -> pa.Array:
        raise NotImplementedError


class Count(_Builtin):
    """Rows (``on=None``) or values of a column; nulls count unless ``ignore_nulls=True`` (Ray)."""

    label = "count"

    def __init__(self, on: str | None = None, ignore_nulls: bool = False, alias_name: str | None = None) -> None:
        super().__init__(on, ignore_nulls, alias_name)

    def map_specs(self) -> list[Spec]:
        if self.on is None:
            return [(None, "count_all", None)]
        mode = "only_valid" if self.ignore_nulls else "all"
        return [(self.on, "count", pc.CountOptions(mode=mode))]

    def partial(self, grouped, cols, block, keys, groups):
        return {"n": grouped.column(cols[self.map_specs()[0][:2]])}

    def combine_specs(self):
        return {"n": "sum"}

    def finalize_states(self, reduced):
        return pc.cast(reduced["n"], pa.int64())


class Sum(_Builtin):
    label = "sum"

    def map_specs(self):
        return [(self.on, "sum", self._opts())]

    def partial(self, grouped, cols, block, keys, groups):
        return {"s": grouped.column(cols[(self.on, "sum")])}

    def combine_specs(self):
        return {"s": "sum"}

    def finalize_states(self, reduced):
        return reduced["s"]


class Min(_Builtin):
    label = "min"

    def map_specs(self):
        return [(self.on, "min", self._opts())]

    def partial(self, grouped, cols, block, keys, groups):
        return {"m": grouped.column(cols[(self.on, "min")])}

    def combine_specs(self):
        return {"m": "min"}

    def finalize_states(self, reduced):
        return reduced["m"]


class Max(Min):
    label = "max"

    def map_specs(self):
        return [(self.on, "max", self._opts())]

    def partial(self, grouped, cols, block, keys, groups):
        return {"m": grouped.column(cols[(self.on, "max")])}

    def combine_specs(self):
        return {"m": "max"}


class AbsMax(_Builtin):
    label = "abs_max"

    def map_specs(self):
        return [(self.on, "min", self._opts()), (self.on, "max", self._opts())]

    def partial(self, grouped, cols, block, keys, groups):
        lo = pc.abs(grouped.column(cols[(self.on, "min")]))
        hi = pc.abs(grouped.column(cols[(self.on, "max")]))
        return {"m": pc.max_element_wise(lo, hi)}

    def combine_specs(self):
        return {"m": "max"}

    def finalize_states(self, reduced):
        return reduced["m"]


class Mean(_Builtin):
    label = "mean"

    def map_specs(self):
        return [(self.on, "sum", self._opts()), (self.on, "count", pc.CountOptions(mode="only_valid"))]

    def partial(self, grouped, cols, block, keys, groups):
        return {"s": pc.cast(grouped.column(cols[(self.on, "sum")]), pa.float64()),
                "n": grouped.column(cols[(self.on, "count")])}

    def combine_specs(self):
        return {"s": "sum", "n": "sum"}

    def finalize_states(self, reduced):
        n = pc.cast(reduced["n"], pa.float64())
        return pc.if_else(pc.equal(n, 0.0), pa.scalar(None, pa.float64()), pc.divide(reduced["s"], n))


class Std(_Builtin):
    """Sample standard deviation (``ddof=1``), combined from per-block count, sum and M2."""

    label = "std"

    def __init__(self, on: str | None = None, ddof: int = 1, ignore_nulls: bool = True,
                 alias_name: str | None = None) -> None:
        super().__init__(on, ignore_nulls, alias_name)
        self.ddof = ddof

    def map_specs(self):
        return [
            (self.on, "count", pc.CountOptions(mode="only_valid")),
            (self.on, "sum", self._opts()),
            (self.on, "variance", pc.VarianceOptions(ddof=0)),
        ]

    def partial(self, grouped, cols, block, keys, groups):
        n = pc.cast(grouped.column(cols[(self.on, "count")]), pa.float64())
        s = pc.cast(grouped.column(cols[(self.on, "sum")]), pa.float64())
        var = pc.cast(grouped.column(cols[(self.on, "variance")]), pa.float64())
        # q = sum of squares = n * var + s^2 / n
        q = pc.add(pc.multiply(var, n), pc.divide(pc.multiply(s, s), pc.max_element_wise(n, 1.0)))
        return {"n": n, "s": s, "q": pc.fill_null(q, 0.0)}

    def combine_specs(self):
        return {"n": "sum", "s": "sum", "q": "sum"}

    def finalize_states(self, reduced):
        n = reduced["n"].to_numpy(zero_copy_only=False).astype(float)
        s = reduced["s"].to_numpy(zero_copy_only=False).astype(float)
        q = reduced["q"].to_numpy(zero_copy_only=False).astype(float)
        out = []
        for ni, si, qi in zip(n, s, q):
            if ni - self.ddof <= 0:
                out.append(None if ni == 0 else 0.0)
                continue
            m2 = max(0.0, qi - si * si / ni)
            out.append(math.sqrt(m2 / (ni - self.ddof)))
        return pa.array(out, type=pa.float64())


class Unique(_Builtin):
    label = "unique"

    def __init__(self, on: str | None = None, ignore_nulls: bool = False, alias_name: str | None = None) -> None:
        super().__init__(on, ignore_nulls, alias_name)

    def map_specs(self):
        return [(self.on, "distinct", pc.CountOptions(mode="only_valid" if self.ignore_nulls else "all"))]

    def partial(self, grouped, cols, block, keys, groups):
        # Arrow cannot list-aggregate lists, so each group's distinct values travel pickled
        lists = grouped.column(cols[(self.on, "distinct")]).to_pylist()
        return {"u": pa.array([pickle.dumps(v) for v in lists], type=pa.large_binary())}

    def combine_specs(self):
        return {"u": "list"}

    def finalize_states(self, reduced):
        out = []
        for parts in reduced["u"].to_pylist():
            seen: dict[Any, None] = {}
            for part in parts:
                for v in pickle.loads(part):
                    seen.setdefault(v, None)
            out.append(list(seen))
        return pa.array(out)


# ---------------------------------------------------------------- the two phases


def _group_rows(block: pa.Table, keys: list[str]) -> list[tuple[tuple, np.ndarray]]:
    idx = block.append_column("__row", pa.array(np.arange(block.num_rows, dtype=np.int64)))
    g = idx.group_by(keys, use_threads=False).aggregate([("__row", "list")])
    key_lists = [g.column(k).to_pylist() for k in keys]
    rows = g.column("__row_list").to_pylist()
    return [(tuple(kl[i] for kl in key_lists), np.asarray(rows[i])) for i in range(g.num_rows)]


_GLOBAL_KEY = "__raylite_all_rows"


def _with_global_key(block: pa.Table) -> pa.Table:
    # a whole-dataset aggregation is a groupby on a constant key: Arrow's hash
    # aggregations (distinct, list) have no scalar form
    return block.append_column(_GLOBAL_KEY, pa.array(np.zeros(block.num_rows, dtype=np.int8)))


def partial_aggregate(block: pa.Table, keys: list[str], aggs: list[AggregateFn]) -> pa.Table:
    """Map phase: per-group partial states of every aggregation for one block."""
    if not keys:
        return partial_aggregate(_with_global_key(block), [_GLOBAL_KEY], aggs)
    for k in keys:
        if k not in block.column_names:
            raise KeyError(f"groupby key {k!r} not found; the dataset has columns {block.column_names}")
    specs: dict[tuple, tuple[str, str, Any]] = {}
    work = block.select(keys)
    for agg in aggs:
        for col, func, opts in agg.map_specs():
            if col is not None and col not in block.column_names:
                raise KeyError(f"{agg.name}: column {col!r} not found; the dataset has columns {block.column_names}")
            if (col, func) in specs:
                continue
            if col is None:
                specs[(col, func)] = ("", func, opts)
                continue
            alias = f"__c{len(specs)}"
            work = work.append_column(alias, block.column(col))
            specs[(col, func)] = (alias, func, opts)
    aggregations = [([] if a == "" else a, f, o) if o is not None else ([] if a == "" else a, f)
                    for a, f, o in specs.values()]
    grouped = work.group_by(keys, use_threads=False).aggregate(aggregations)
    cols = {key: (f"{a}_{f}" if a else f) for key, (a, f, _) in specs.items()}
    groups = _group_rows(block, keys) if any(a.needs_groups() for a in aggs) else []
    if groups:  # align the user path's group order with pyarrow's
        order = {g[0]: i for i, g in enumerate(groups)}
        key_cols = [grouped.column(k).to_pylist() for k in keys]
        groups = [groups[order[tuple(kc[i] for kc in key_cols)]] for i in range(grouped.num_rows)]
    out = {k: grouped.column(k) for k in keys}
    for i, agg in enumerate(aggs):
        for name, arr in agg.partial(grouped, cols, block, keys, groups).items():
            out[f"__a{i}_{name}"] = arr
    return pa.table(out)


def combine_and_finalize(partials: pa.Table, keys: list[str], aggs: list[AggregateFn]) -> pa.Table:
    """Reduce phase: combine partial states per group, finalize, sort by the keys."""
    if not keys:
        if _GLOBAL_KEY not in partials.column_names:
            return pa.table({})
        return combine_and_finalize(partials, [_GLOBAL_KEY], aggs).drop_columns([_GLOBAL_KEY])
    aggregations = []
    for i, agg in enumerate(aggs):
        for name, func in agg.combine_specs().items():
            aggregations.append((f"__a{i}_{name}", func))
    reduced = partials.group_by(keys, use_threads=False).aggregate(aggregations)
    out: dict[str, Any] = {k: reduced.column(k) for k in keys}
    for i, agg in enumerate(aggs):
        states = {name: reduced.column(f"__a{i}_{name}_{func}") for name, func in agg.combine_specs().items()}
        out[agg.name] = agg.finalize_states({k: v.combine_chunks() for k, v in states.items()})
    table = pa.table(out)
    if keys and table.num_rows:
        table = table.sort_by([(k, "ascending") for k in keys])
    return table


__all__ = ["AbsMax", "AggregateFn", "Count", "Max", "Mean", "Min", "Std", "Sum", "Unique",
           "combine_and_finalize", "partial_aggregate"]
