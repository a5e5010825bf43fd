"""The functions and actor class that run on workers.

Each returns its block(s) and their metadata as separate objects, so the driver
reads only the small metadata and passes the block refs on to the next task
without ever fetching them: ``(block, metadata)`` (``num_returns=2``), or for
map tasks, whose output is cut into blocks near ``target_max_block_size``, a
``num_returns="dynamic"`` generator of the blocks followed by their metadata list.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Iterator
from typing import Any

import pyarrow as pa

from raylite.data._internal.transforms import TransformChain, run_chain_blocks
from raylite.data.block import Block, BlockMetadata, compact_block, concat_blocks


def _use_cpus(num_cpus: float) -> None:
    """Let the actor's UDF use the CPUs the actor reserved (Ray sets OMP_NUM_THREADS the
    same way): torch's intra-op pool otherwise sizes itself to the machine, and the
    pools of several actors then fight over the same cores."""
    threads = max(1, int(num_cpus))
    os.environ["OMP_NUM_THREADS"] = str(threads)  # libraries imported later read it
    torch = sys.modules.get("torch")
    if torch is not None:
        torch.set_num_threads(threads)


def _source(source: Any, blocks: tuple[Block, ...]) -> Iterator[Block]:
    if source is not None:
        return iter(source())
    return iter(blocks)


def _files_of(source: Any) -> list[str]:
    meta = getattr(source, "metadata", None)
    return list(getattr(meta, "input_files", None) or [])


def map_task(chain: TransformChain, source: Any, task_index: int, target_bytes: int | None,
             *blocks: Block) -> Iterator[Any]:
    """Run a fused chain over a read task (``source``) or over input blocks.

    A ``num_returns="dynamic"`` generator: yields each output block (about
    ``target_bytes``; see ``run_chain_blocks``), then the list of their metadata.
    """
    files = _files_of(source)
    metas = []
    for block in run_chain_blocks(chain, _source(source, blocks), task_index, target_bytes):
        metas.append(BlockMetadata.of(block, files))
        yield block
    yield metas


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

    def __init__(self, chain: TransformChain, num_cpus: float = 1.0) -> None:
        self.chain = chain
        _use_cpus(num_cpus)
        self.chain.setup()

    def ready(self) -> bool:
        return True

    def run(self, source: Any, task_index: int, target_bytes: int | None, *blocks: Block) -> Iterator[Any]:
        """Like ``map_task`` (a dynamic generator: blocks, then their metadata list)."""
        return map_task(self.chain, source, task_index, target_bytes, *blocks)


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
