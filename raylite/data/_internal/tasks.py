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

import numpy as np
import pyarrow as pa

from raylite.data._internal.transforms import TransformChain, run_chain_blocks
from raylite.data.block import (
    Block,
    BlockMetadata,
    batch_to_block,
    compact_block,
    concat_blocks,
    table_to_batch,
    table_to_pandas,
    to_arrow_array,
)


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


# ---------------------------------------------------------------- objects <-> blocks (*_refs)
def _not_a(what: str, value: Any, fn: str) -> TypeError:
    return TypeError(f"{fn}: an object ref given holds a {type(value).__module__}.{type(value).__name__}, "
                     f"not a {what}. Pass refs to {what}s (raylite.put(value)).")


def pandas_to_block(df: Any) -> tuple[Block, BlockMetadata]:
    """``from_pandas_refs``: a DataFrame in the store -> a block beside it, and its metadata."""
    import pandas as pd

    if not isinstance(df, pd.DataFrame):
        raise _not_a("pandas DataFrame", df, "from_pandas_refs")
    block = batch_to_block(df, where="from_pandas_refs")
    return block, BlockMetadata.of(block)


def numpy_to_block(arr: Any) -> tuple[Block, BlockMetadata]:
    """``from_numpy_refs``: an ndarray -> a block with one row per element of its first axis
    in column ``data`` (as ``from_numpy``), and its metadata."""
    if not isinstance(arr, np.ndarray):
        raise _not_a("numpy ndarray", arr, "from_numpy_refs")
    block = pa.table({"data": to_arrow_array(arr, "data")})
    return block, BlockMetadata.of(block)


def arrow_to_block(table: Any) -> tuple[Block | None, BlockMetadata, bool]:
    """``from_arrow_refs``: (None, metadata, False) for a Table, which is used as a block as it
    is (zero copy); for Arrow's IPC stream format in bytes, (the table read from it, its
    metadata, True): a new block."""
    if isinstance(table, (bytes, bytearray, memoryview)):
        import pyarrow.ipc

        block = pyarrow.ipc.open_stream(pa.py_buffer(table)).read_all()
        return block, BlockMetadata.of(block), True
    if not isinstance(table, pa.Table):
        raise _not_a("pyarrow Table", table, "from_arrow_refs")
    return None, BlockMetadata.of(table), False


def block_to_pandas(block: Block) -> Any:
    """``to_pandas_refs``: one DataFrame per block (a plain DataFrame, as ``to_pandas`` gives)."""
    import pandas as pd

    return pd.DataFrame(table_to_pandas(block))


def block_to_numpy(block: Block, column: str | None) -> Any:
    """``to_numpy_refs``: one dict of ndarrays per block, or one ndarray of ``column``."""
    batch = table_to_batch(block, "numpy")
    return batch if column is None else batch[column]
