"""The functions and actor class that run on workers.

Each returns ``(block, metadata)`` as two objects (``num_returns=2``), so the
driver reads only the small metadata and passes the block's ref on to the next
task without ever fetching it.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pyarrow as pa

from raylite.data._internal.transforms import TransformChain, run_chain
from raylite.data.block import Block, BlockMetadata, compact_block, concat_blocks


def _source(source: Any, blocks: tuple[Block, ...]) -> Iterator[Block]:
    if source is not None:
        return iter(source())
    return iter(blocks)


def _files_of(source: Any) -> list[str]:
    meta = getattr(source, "metadata", None)
    return list(getattr(meta, "input_files", None) or [])


def map_task(chain: TransformChain, source: Any, task_index: int, *blocks: Block) -> tuple[Block, BlockMetadata]:
    """Run a fused chain over a read task (``source``) or over input blocks."""
    out = compact_block(run_chain(chain, _source(source, blocks), task_index))
    return out, BlockMetadata.of(out, _files_of(source))


def slice_task(spec: list[tuple[int, int, int]], *blocks: Block) -> tuple[Block, BlockMetadata]:
    """Concatenate ``blocks[i][start:end]`` for each ``(i, start, end)`` in ``spec``."""
    parts = [blocks[i].slice(start, end - start) for i, start, end in spec]
    out = concat_blocks(parts) if parts else pa.table({})
    if not parts and blocks:
        out = blocks[0].schema.empty_table()
    out = compact_block(out)
    return out, BlockMetadata.of(out)


class MapWorker:
    """Actor of an actor-pool map: builds the UDF once, then runs the chain per call."""

    def __init__(self, chain: TransformChain) -> None:
        self.chain = chain
        self.chain.setup()

    def ready(self) -> bool:
        return True

    def run(self, source: Any, task_index: int, *blocks: Block) -> tuple[Block, BlockMetadata]:
        out = compact_block(run_chain(self.chain, _source(source, blocks), task_index))
        return out, BlockMetadata.of(out, _files_of(source))


def zip_task(spec: list[tuple[int, int, int]], left: Block, *right_blocks: Block) -> tuple[Block, BlockMetadata]:
    """Columns of ``left`` next to the matching rows of the right side (duplicates get ``_1``)."""
    right, _ = slice_task(spec, *right_blocks)
    out = left
    names = set(left.column_names)
    for name, col in zip(right.column_names, right.columns):
        new, k = name, 1
        while new in names:
            new = f"{name}_{k}"
            k += 1
        names.add(new)
        out = out.append_column(new, col.combine_chunks() if col.num_chunks > 1 else col)
    out = compact_block(out)
    return out, BlockMetadata.of(out)
