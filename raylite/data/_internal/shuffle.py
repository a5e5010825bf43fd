"""All-to-all operations: repartition, random_shuffle, sort, groupby-aggregate.

Each is a ``bulk_fn(bundles, ctx) -> bundles`` run by an AllToAll barrier
operator, built from two rounds of tasks:

- map: one task per input block splits it into R parts (by random
  assignment, or by key range against sampled boundaries), returned as R
  objects plus one metadata list (``num_returns=R+1``);
- reduce: task j receives part j of every map output and merges them.

Sort and groupby use range partitioning on sampled keys, so partition j holds
only keys between boundaries j-1 and j: concatenating the reduce outputs in
order gives a globally sorted dataset, and every group lies in one block
(which ``map_groups`` relies on). Nulls sort last.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import pyarrow as pa

from raylite.data._internal.operators import ExecCtx, RefBundle, _offsets, _slice_spec
from raylite.data._internal.submitter import TaskOptions
from raylite.data._internal.tasks import slice_task
from raylite.data.aggregate import AggregateFn, combine_and_finalize, partial_aggregate
from raylite.data.block import Block, BlockMetadata, compact_block, concat_blocks

SAMPLES_PER_BLOCK = 64
_OPTS = TaskOptions(num_cpus=1.0)


@dataclass(frozen=True)
class SortKey:
    columns: tuple[str, ...]
    descending: tuple[bool, ...]

    @staticmethod
    def of(key: str | Sequence[str], descending: bool | Sequence[bool] = False) -> SortKey:
        cols = (key,) if isinstance(key, str) else tuple(key)
        if not cols:
            raise ValueError("sort() needs at least one key column")
        desc = (bool(descending),) * len(cols) if isinstance(descending, (bool, np.bool_)) else tuple(descending)
        if len(desc) != len(cols):
            raise ValueError(f"descending has {len(desc)} entries for {len(cols)} sort keys")
        return SortKey(cols, desc)

    def arrow(self) -> list[tuple[str, str]]:
        return [(c, "descending" if d else "ascending") for c, d in zip(self.columns, self.descending)]

    def compare(self, a: tuple, b: tuple) -> int:
        """Python order matching Arrow's ``sort_by`` (nulls last in either direction)."""
        for x, y, desc in zip(a, b, self.descending):
            if x == y:
                continue
            if x is None:
                return 1
            if y is None:
                return -1
            r = (x > y) - (x < y)
            if r:
                return -r if desc else r
        return 0

    def check(self, block: Block) -> None:
        if block.num_rows == 0 and not block.column_names:  # an empty block carries no schema
            return
        missing = [c for c in self.columns if c not in block.column_names]
        if missing:
            raise KeyError(f"sort key(s) {missing} not found; the dataset has columns {block.column_names}")


# ---------------------------------------------------------------- tasks


def sample_task(key: SortKey, n: int, block: Block) -> list[tuple]:
    key.check(block)
    if block.num_rows == 0:
        return []
    rng = np.random.default_rng(block.num_rows)
    idx = np.sort(rng.choice(block.num_rows, size=min(n, block.num_rows), replace=False))
    cols = [block.column(c).take(pa.array(idx)).to_pylist() for c in key.columns]
    return list(zip(*cols))


def _key_at(block: Block, cols: tuple[str, ...], i: int) -> tuple:
    return tuple(block.column(c)[i].as_py() for c in cols)


def _range_partition(block: Block, key: SortKey, boundaries: list[tuple]) -> list[Block]:
    """Split a block sorted by ``key`` into len(boundaries)+1 contiguous key ranges."""
    cuts = [0]
    for b in boundaries:
        lo, hi = cuts[-1], block.num_rows
        while lo < hi:  # first row not before b
            mid = (lo + hi) // 2
            if key.compare(_key_at(block, key.columns, mid), b) < 0:
                lo = mid + 1
            else:
                hi = mid
        cuts.append(lo)
    cuts.append(block.num_rows)
    return [block.slice(a, b - a) for a, b in zip(cuts[:-1], cuts[1:])]


def _with_metas(parts: list[Block]) -> tuple:
    parts = [compact_block(p) for p in parts]  # each part is a slice of one sorted/shuffled block
    return (*parts, [BlockMetadata.of(p) for p in parts])


def sort_map_task(key: SortKey, boundaries: list[tuple], block: Block) -> tuple:
    key.check(block)
    block = block.sort_by(key.arrow()) if block.num_rows else block
    return _with_metas(_range_partition(block, key, boundaries))


def sort_reduce_task(key: SortKey, *parts: Block) -> tuple[Block, BlockMetadata]:
    out = concat_blocks(list(parts))
    if out.num_rows:
        out = out.sort_by(key.arrow())
    return out, BlockMetadata.of(out)


def partition_task(key: SortKey, boundaries: list[tuple], block: Block) -> tuple:
    """Sort one (partial-aggregate) block by key and cut it at the boundaries."""
    block = block.sort_by(key.arrow()) if block.num_rows else block
    return _with_metas(_range_partition(block, key, boundaries))


def agg_reduce_task(keys: list[str], aggs: list[AggregateFn], *parts: Block) -> tuple[Block, BlockMetadata]:
    partials = concat_blocks([p for p in parts if p.num_rows])
    out = combine_and_finalize(partials, keys, aggs) if partials.num_rows else pa.table({})
    return out, BlockMetadata.of(out)


def shuffle_map_task(seed: int, num_parts: int, block: Block) -> tuple:
    rng = np.random.default_rng(seed)
    assign = rng.integers(0, num_parts, size=block.num_rows)
    order = np.argsort(assign, kind="stable")
    counts = np.bincount(assign, minlength=num_parts)
    taken = block.take(pa.array(order)) if block.num_rows else block
    parts, start = [], 0
    for c in counts:
        parts.append(taken.slice(start, int(c)))
        start += int(c)
    return _with_metas(parts)


def shuffle_reduce_task(seed: int, *parts: Block) -> tuple[Block, BlockMetadata]:
    out = concat_blocks(list(parts))
    if out.num_rows:
        out = out.take(pa.array(np.random.default_rng(seed).permutation(out.num_rows)))
    return out, BlockMetadata.of(out)


# ---------------------------------------------------------------- driver side


def _blocks(bundles: list[RefBundle]) -> list[tuple[Any, BlockMetadata]]:
    return [b for bundle in bundles for b in bundle.blocks]


def _map_reduce(ctx: ExecCtx, blocks: list[tuple[Any, BlockMetadata]], num_parts: int, map_fn: Any,
                map_args: Any, reduce_fn: Any, reduce_args: Any) -> list[RefBundle]:
    """Run the two task rounds; ``map_args(i)``/``reduce_args(j)`` give leading arguments."""
    sub = ctx.submitter
    map_outs = []
    for i, (ref, _) in enumerate(blocks):
        outs = sub.submit(map_fn, [*map_args(i), ref], num_returns=num_parts + 1, options=_OPTS,
                          name=map_fn.__name__)
        map_outs.append(outs)
    sub.get([outs[-1] for outs in map_outs])  # surface map errors before reducing
    results = []
    for j in range(num_parts):
        parts = [outs[j] for outs in map_outs]
        results.append(sub.submit(reduce_fn, [*reduce_args(j), *parts], num_returns=2, options=_OPTS,
                                  name=reduce_fn.__name__))
    metas = sub.get([r[1] for r in results])
    return [RefBundle([(r[0], m)]) for r, m in zip(results, metas)]


def _boundaries(ctx: ExecCtx, key: SortKey, blocks: list[tuple[Any, BlockMetadata]], num_parts: int) -> list[tuple]:
    if num_parts <= 1:
        return []
    sub = ctx.submitter
    refs = [sub.submit(sample_task, [key, SAMPLES_PER_BLOCK, ref], num_returns=1, options=_OPTS,
                       name="sort_sample")[0] for ref, _ in blocks]
    samples = [s for chunk in sub.get(refs) for s in chunk]
    if not samples:
        return []
    samples.sort(key=functools.cmp_to_key(key.compare))
    return [samples[min(len(samples) - 1, (len(samples) * j) // num_parts)] for j in range(1, num_parts)]


def sort_bulk(key: SortKey, num_parts: int | None = None) -> Any:
    def run(bundles: list[RefBundle], ctx: ExecCtx) -> list[RefBundle]:
        blocks = [b for b in _blocks(bundles)]
        if not blocks:
            return []
        r = num_parts or len(blocks)
        bounds = _boundaries(ctx, key, blocks, r)
        r = len(bounds) + 1
        return _map_reduce(ctx, blocks, r, sort_map_task, lambda i: [key, bounds],
                           sort_reduce_task, lambda j: [key])

    return run


def aggregate_logical(name: str, upstream: Any, keys: list[str], aggs: list[AggregateFn]) -> Any:
    """Logical nodes for a groupby-aggregate: a partial aggregation fused into the upstream
    tasks (each task ships a few rows per group, not its whole input), then a combine barrier."""
    from raylite.data._internal import logical as L
    from raylite.data._internal.transforms import BlockFnStage

    def partial(tables: Any) -> Any:
        yield partial_aggregate(concat_blocks(list(tables)), keys, aggs)

    part = L.MapLike("PartialAggregate", [upstream], stage=BlockFnStage(partial, name="PartialAggregate"))
    return L.AllToAll(name, [part], bulk_fn=combine_bulk(keys, aggs), preserves_rows=False)


def combine_bulk(keys: list[str], aggs: list[AggregateFn]) -> Any:
    """Combine partial aggregates: one task when they are small, else a key-range shuffle."""

    def run(bundles: list[RefBundle], ctx: ExecCtx) -> list[RefBundle]:
        blocks = [b for b in _blocks(bundles) if (b[1].num_rows or 0) > 0]
        if not blocks:
            return []
        total = sum(m.size_bytes for _, m in blocks)
        r = 1 if not keys else max(1, math.ceil(total / ctx.context.target_shuffle_max_block_size))
        if r == 1:
            out = ctx.submitter.submit(agg_reduce_task, [keys, aggs, *[ref for ref, _ in blocks]],
                                       num_returns=2, options=_OPTS, name="agg_reduce_task")
            return [RefBundle([(out[0], ctx.submitter.get([out[1]])[0])])]
        key = SortKey.of(keys)
        bounds = _boundaries(ctx, key, blocks, r)
        return _map_reduce(ctx, blocks, len(bounds) + 1, partition_task, lambda i: [key, bounds],
                           agg_reduce_task, lambda j: [keys, aggs])

    return run


def random_shuffle_bulk(seed: int | None, num_blocks: int | None = None) -> Any:
    def run(bundles: list[RefBundle], ctx: ExecCtx) -> list[RefBundle]:
        blocks = _blocks(bundles)
        if not blocks:
            return []
        base = seed if seed is not None else int(np.random.SeedSequence().entropy % (1 << 62))
        r = num_blocks or len(blocks)
        m = len(blocks)
        return _map_reduce(ctx, blocks, r, shuffle_map_task, lambda i: [_mix(base, i), r],
                           shuffle_reduce_task, lambda j: [_mix(base, m + j)])

    return run


def _mix(base: int, i: int) -> int:
    return int(np.random.SeedSequence([base % (1 << 63), i]).generate_state(1)[0])


def randomize_blocks_bulk(seed: int | None) -> Any:
    def run(bundles: list[RefBundle], ctx: ExecCtx) -> list[RefBundle]:
        rng = np.random.default_rng(seed)
        order = rng.permutation(len(bundles))
        return [bundles[i] for i in order]

    return run


def repartition_bulk(num_blocks: int) -> Any:
    """Balanced, order-preserving split/merge into ``num_blocks`` blocks (no shuffle)."""

    def run(bundles: list[RefBundle], ctx: ExecCtx) -> list[RefBundle]:
        blocks = _blocks(bundles)
        total = sum(m.num_rows or 0 for _, m in blocks)
        bounds = np.linspace(0, total, num_blocks + 1).astype(np.int64)
        return slice_ranges(ctx, blocks, list(zip(bounds[:-1], bounds[1:])))

    return run


def slice_ranges(ctx: ExecCtx, blocks: list[tuple[Any, BlockMetadata]],
                 ranges: list[tuple[int, int]]) -> list[RefBundle]:
    """One output block per global row range [start, end)."""
    offsets = _offsets([m.num_rows or 0 for _, m in blocks])
    outs = []
    for start, end in ranges:
        spec, refs = _slice_spec(blocks, offsets, int(start), int(end))
        if not refs and blocks:  # an empty range keeps the schema
            spec, refs = [], [blocks[0][0]]
        outs.append(ctx.submitter.submit(slice_task, [spec, *refs], num_returns=2,
                                         options=TaskOptions(num_cpus=0.0), name="slice"))
    metas = ctx.submitter.get([o[1] for o in outs])
    return [RefBundle([(o[0], m)]) for o, m in zip(outs, metas)]
