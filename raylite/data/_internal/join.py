"""``Dataset.join``: a hash-partitioned join of two datasets.

Each input block, from either side, is cut as soon as it arrives (streaming) into
``num_partitions`` parts by a hash of its key columns; once both sides are done,
task ``j`` joins part ``j`` of every left block with part ``j`` of every right
block. Equal keys hash alike on both sides (keys are normalised to one type per
kind before hashing), so every match meets in one task, and the output is
``num_partitions`` blocks, as in Ray.

The join itself runs Arrow's hash join on the key columns plus a row index per
side; the other columns are then gathered with ``take``. Why: Arrow's join
refuses some payload types (lists, structs, tensors) that ``take`` handles.
Key columns appear once (coalesced, under the left names); other columns whose
names collide get ``left_suffix`` / ``right_suffix`` (``"_right"`` by default on
the right, as Ray does).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from raylite.data._internal.operators import PhysicalOperator, RefBundle, _TaskRunner
from raylite.data._internal.submitter import TaskOptions
from raylite.data.block import Block, BlockMetadata, compact_block, concat_blocks

JOIN_TYPES = {
    "inner": "inner", "left_outer": "left outer", "right_outer": "right outer", "full_outer": "full outer",
    "left_semi": "left semi", "right_semi": "right semi", "left_anti": "left anti", "right_anti": "right anti",
}
_L_IDX, _R_IDX = "__raylite_left_row", "__raylite_right_row"
_OPTS = TaskOptions(num_cpus=1.0)


@dataclass(frozen=True)
class JoinSpec:
    join_type: str
    num_partitions: int
    on: tuple[str, ...]
    right_on: tuple[str, ...]
    left_suffix: str | None
    right_suffix: str | None

    @staticmethod
    def of(join_type: str, num_partitions: int, on: Any, right_on: Any, left_suffix: str | None,
           right_suffix: str | None) -> JoinSpec:
        if join_type not in JOIN_TYPES:
            raise ValueError(f"join_type must be one of {sorted(JOIN_TYPES)}, got {join_type!r}")
        if not isinstance(num_partitions, int) or num_partitions <= 0:
            raise ValueError(f"num_partitions must be a positive int, got {num_partitions!r}")
        on_t = (on,) if isinstance(on, str) else tuple(on)
        right_t = on_t if right_on is None else ((right_on,) if isinstance(right_on, str) else tuple(right_on))
        if not on_t:
            raise ValueError("join needs at least one key column in `on`")
        if len(on_t) != len(right_t):
            raise ValueError(f"join: `on` has {len(on_t)} columns but `right_on` has {len(right_t)}")
        return JoinSpec(join_type, num_partitions, on_t, right_t, left_suffix, right_suffix)


# ---------------------------------------------------------------- tasks


def _key_hash(col: pa.ChunkedArray | pa.Array) -> np.ndarray:
    """A uint64 hash per value, equal for equal keys whatever the integer/float width or string kind."""
    import pandas as pd

    t = col.type
    if pa.types.is_dictionary(t):
        col, t = col.cast(t.value_type), t.value_type
    if pa.types.is_integer(t) or pa.types.is_boolean(t):
        values = pc.fill_null(col.cast(pa.int64()), 0).to_numpy()
    elif pa.types.is_floating(t):
        values = pc.fill_null(col.cast(pa.float64()), 0.0).to_numpy()
        whole = np.isfinite(values) & (values == np.round(values))
        if whole.all():  # 2.0 and 2 are equal keys
            values = values.astype(np.int64)
    elif pa.types.is_temporal(t):
        values = pc.fill_null(col.cast(pa.int64()), 0).to_numpy()
    elif pa.types.is_string(t) or pa.types.is_large_string(t) or pa.types.is_binary(t) \
            or pa.types.is_large_binary(t):
        values = col.to_numpy(zero_copy_only=False)
    else:
        values = np.array([repr(v) for v in col.to_pylist()], dtype=object)
    return pd.util.hash_array(np.asarray(values), categorize=False)


def hash_partition_task(keys: tuple[str, ...], num_parts: int, block: Block) -> tuple:
    """Cut ``block`` into ``num_parts`` parts by key hash; returns the parts, then their metadata."""
    missing = [k for k in keys if k not in block.column_names]
    if missing:
        raise KeyError(f"join key(s) {missing} not found; the dataset has columns {block.column_names}")
    if block.num_rows == 0:
        parts = [block] * num_parts
    else:
        h = np.zeros(block.num_rows, dtype=np.uint64)
        for k in keys:
            h = h * np.uint64(1_000_003) ^ _key_hash(block.column(k))
        assign = (h % np.uint64(num_parts)).astype(np.int64)
        order = np.argsort(assign, kind="stable")
        counts = np.bincount(assign, minlength=num_parts)
        taken = block.take(pa.array(order))
        parts, start = [], 0
        for c in counts:
            parts.append(compact_block(taken.slice(start, int(c))))
            start += int(c)
    return (*parts, [BlockMetadata.of(p) for p in parts])


def _schema_only(parts: list[Block], schema: pa.Schema | None) -> Block:
    table = concat_blocks([p for p in parts if p.num_columns])
    if table.num_columns == 0 and schema is not None:
        return schema.empty_table()
    return table


def join_tables(spec: JoinSpec, left: Block, right: Block) -> Block:
    """Join two tables by ``spec`` (the per-partition work; also usable on whole tables)."""
    how = JOIN_TYPES[spec.join_type]
    on, right_on = list(spec.on), list(spec.right_on)
    for side, keys, table in (("left", on, left), ("right", right_on, right)):
        missing = [k for k in keys if k not in table.column_names]
        if missing:
            raise KeyError(f"join key(s) {missing} not found in the {side} dataset's columns {table.column_names}")
    left_keys = left.select(on).append_column(_L_IDX, pa.array(np.arange(left.num_rows, dtype=np.int64)))
    right_keys = right.select(right_on)
    for lk, rk in zip(on, right_on):  # Arrow's join wants equal key types
        lt, rt = left_keys.schema.field(lk).type, right_keys.schema.field(rk).type
        if lt != rt:
            right_keys = right_keys.set_column(right_keys.column_names.index(rk), rk,
                                               right_keys.column(rk).cast(lt))
    right_keys = right_keys.append_column(_R_IDX, pa.array(np.arange(right.num_rows, dtype=np.int64)))
    joined = left_keys.join(right_keys, keys=on, right_keys=right_on, join_type=how, coalesce_keys=True,
                            use_threads=False)
    if spec.join_type in ("right_semi", "right_anti"):
        return right.take(joined.column(_R_IDX))
    if spec.join_type in ("left_semi", "left_anti"):
        return left.take(joined.column(_L_IDX))
    left_rows, right_rows = joined.column(_L_IDX), joined.column(_R_IDX)
    left_payload = [c for c in left.column_names if c not in on]
    right_payload = [c for c in right.column_names if c not in right_on]
    clash = set(left.column_names) & set(right_payload)
    right_suffix = spec.right_suffix if spec.right_suffix is not None else ("" if spec.left_suffix else "_right")
    left_suffix = spec.left_suffix or ""
    names, columns = [], []
    left_taken = left.select(left_payload).take(left_rows) if left_payload else None
    for name in left.column_names:
        if name in on:  # the coalesced key: Arrow names it after the right key in a right outer join
            key = name if name in joined.column_names else right_on[on.index(name)]
            names.append(key)
            columns.append(joined.column(key))
        else:
            assert left_taken is not None
            names.append(name + left_suffix if name in clash else name)
            columns.append(left_taken.column(name))
    right_taken = right.select(right_payload).take(right_rows) if right_payload else None
    for name in right_payload:
        assert right_taken is not None
        names.append(name + right_suffix if name in clash else name)
        columns.append(right_taken.column(name))
    if len(set(names)) != len(names):
        raise ValueError(f"join: the output would have duplicate column names {names}; pass left_suffix "
                         "and/or right_suffix to tell the clashing columns apart")
    return pa.table(columns, names=names)


def join_reduce_task(spec: JoinSpec, n_left: int, schemas: tuple[Any, Any], *parts: Block
                     ) -> tuple[Block, BlockMetadata]:
    left = _schema_only(list(parts[:n_left]), schemas[0])
    right = _schema_only(list(parts[n_left:]), schemas[1])
    out = join_tables(spec, left, right)
    return out, BlockMetadata.of(out)


# ---------------------------------------------------------------- the operator


class JoinOperator(_TaskRunner):
    """Partitions each input block on arrival; joins partition j of both sides once both are done."""

    def __init__(self, name: str, deps: list[PhysicalOperator], spec: JoinSpec) -> None:
        super().__init__(name, deps)
        self._spec = spec
        self._parts: list[list[list[Any]]] = [[], []]  # side -> per input block: refs of its parts
        self._schemas: list[pa.Schema | None] = [None, None]

    def add_input(self, bundle: RefBundle, input_index: int) -> None:
        assert self.ctx is not None
        keys = self._spec.on if input_index == 0 else self._spec.right_on
        n = self._spec.num_partitions
        for ref, meta in bundle.blocks:
            if meta.schema is not None and len(meta.schema) and self._schemas[input_index] is None:
                self._schemas[input_index] = meta.schema
            if not meta.num_rows:
                continue
            outs = self.ctx.submitter.submit(hash_partition_task, [keys, n, ref], num_returns=n + 1,
                                             options=_OPTS, name=f"{self.name}[partition]")
            self._parts[input_index].append(list(outs[:n]))

    def all_inputs_done(self) -> None:
        assert self.ctx is not None
        super().all_inputs_done()
        left, right = self._parts
        schemas = (self._schemas[0], self._schemas[1])
        for j in range(self._spec.num_partitions):
            args = [p[j] for p in left] + [p[j] for p in right]
            out = self.ctx.submitter.submit(join_reduce_task, [self._spec, len(left), schemas, *args],
                                            num_returns=2, options=_OPTS, name=f"{self.name}[join]")
            self._track(out[0], out[1], 0, 0.0)
        self._parts = [[], []]
