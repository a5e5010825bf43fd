"""Creating datasets: from memory (``range``, ``from_items`` ...) and from files (``read_*``).

File readers list their files immediately (a wrong path fails here, naming
it) and read lazily in tasks. ``override_num_blocks`` (Ray's name; the older
``parallelism`` also works) sets the number of read tasks; by default it is
chosen from the data size and the cluster's CPUs.
"""

from __future__ import annotations

import builtins
import math
from collections.abc import Sequence
from typing import Any

import numpy as np
import pyarrow as pa

from raylite.data._internal import logical as L
from raylite.data._internal import tasks as T
from raylite.data._internal.operators import RefBundle
from raylite.data._internal.submitter import TaskOptions, get_submitter
from raylite.data.block import Block, batch_to_block, compact_block, items_to_block, to_arrow_array
from raylite.data.dataset import Dataset, MaterializedDataset, _from_blocks
from raylite.data.datasource import (
    AvroDatasource,
    BinaryDatasource,
    CSVDatasource,
    Datasource,
    ImageDatasource,
    JSONDatasource,
    NumpyDatasource,
    ORCDatasource,
    ParquetDatasource,
    RangeDatasource,
    TextDatasource,
)

DEFAULT_FROM_ITEMS_BLOCKS = 8


def _blocks_param(override_num_blocks: int | None, parallelism: int | None) -> int:
    value = override_num_blocks if override_num_blocks is not None else parallelism
    return -1 if value is None else int(value)


def read_datasource(datasource: Datasource, *, override_num_blocks: int | None = None,
                    parallelism: int | None = None, ray_remote_args: dict[str, Any] | None = None,
                    **kwargs: Any) -> Dataset:
    """A dataset read from any ``Datasource`` (including user subclasses)."""
    op = L.Read(datasource.get_name(), [], datasource=datasource,
                parallelism=_blocks_param(override_num_blocks, parallelism),
                ray_remote_args=dict(ray_remote_args or {}))
    return Dataset(op)


def range(n: int, *, override_num_blocks: int | None = None, parallelism: int | None = None,  # noqa: A001
          **kwargs: Any) -> Dataset:
    """Rows ``{"id": 0} ... {"id": n-1}``."""
    return read_datasource(RangeDatasource(n), override_num_blocks=override_num_blocks, parallelism=parallelism)


def range_tensor(n: int, *, shape: tuple[int, ...] = (1,), override_num_blocks: int | None = None,
                 parallelism: int | None = None, **kwargs: Any) -> Dataset:
    """Rows ``{"data": full(shape, i)}`` for i in 0..n-1."""
    return read_datasource(RangeDatasource(n, tuple(shape)), override_num_blocks=override_num_blocks,
                           parallelism=parallelism)


def _split_table(table: pa.Table, num_blocks: int) -> list[Block]:
    num_blocks = max(1, min(num_blocks, table.num_rows))
    bounds = np.linspace(0, table.num_rows, num_blocks + 1).astype(np.int64)
    return [compact_block(table.slice(int(a), int(b - a))) for a, b in zip(bounds[:-1], bounds[1:])]


def from_items(items: list[Any], *, override_num_blocks: int | None = None, parallelism: int | None = None,
               **kwargs: Any) -> MaterializedDataset:
    """Dicts become rows; any other item becomes ``{"item": value}``."""
    if not isinstance(items, (list, tuple)):
        raise TypeError(f"from_items expects a list, got {type(items).__name__}")
    n = _blocks_param(override_num_blocks, parallelism)
    n = n if n > 0 else min(DEFAULT_FROM_ITEMS_BLOCKS, max(1, len(items)))
    items = list(items)
    per = max(1, math.ceil(len(items) / n))
    blocks = [items_to_block(items[i:i + per]) for i in builtins.range(0, len(items), per)]
    return _from_blocks(blocks or [pa.table({})])


def from_pandas(dfs: Any, *, override_num_blocks: int | None = None) -> MaterializedDataset:
    """One block per DataFrame (a single DataFrame may be split with ``override_num_blocks``)."""
    dfs = dfs if isinstance(dfs, list) else [dfs]
    blocks = [batch_to_block(df, where="from_pandas") for df in dfs]
    if override_num_blocks and len(blocks) == 1:
        blocks = _split_table(blocks[0], override_num_blocks)
    return _from_blocks(blocks)


def from_numpy(ndarrays: np.ndarray | list[np.ndarray]) -> MaterializedDataset:
    """Column ``data``: one row per element of the first axis."""
    arrays = ndarrays if isinstance(ndarrays, list) else [ndarrays]
    return _from_blocks([pa.table({"data": to_arrow_array(np.asarray(a), "data")}) for a in arrays])


def from_arrow(tables: Any) -> MaterializedDataset:
    tables = tables if isinstance(tables, list) else [tables]
    out = []
    for t in tables:
        if isinstance(t, pa.RecordBatch):
            t = pa.Table.from_batches([t])
        if not isinstance(t, pa.Table):
            raise TypeError(f"from_arrow expects pyarrow Tables, got {type(t).__name__}")
        out.append(t)
    return _from_blocks(out)


def from_torch(dataset: Any) -> MaterializedDataset:
    """Items of a map-style torch Dataset as rows ``{"item": ...}``."""
    return from_items([dataset[i] for i in builtins.range(len(dataset))])


def _ref_list(refs: Any, fn: str, what: str) -> list[Any]:
    """One object ref or a list of them (Ray's contract for ``from_*_refs``); anything else is
    an error naming the fix."""
    sub = get_submitter()
    if sub.is_ref(refs):
        return [refs]
    if isinstance(refs, (list, tuple)):
        for r in refs:
            if not sub.is_ref(r):
                raise ValueError(f"{fn} expects object refs to {what}s, got a list containing a "
                                 f"{type(r).__name__}. Put the values first (raylite.put(value)), or pass "
                                 f"the values themselves to {fn.removesuffix('_refs')}().")
        return list(refs)
    raise ValueError(f"{fn} expects an object ref to a {what} or a list of them, got a "
                     f"{type(refs).__name__}. Put the value first (raylite.put(value)), or pass it to "
                     f"{fn.removesuffix('_refs')}().")


_CONVERT = TaskOptions(num_cpus=1.0)


def _from_objects(refs: list[Any], convert: Any, name: str) -> MaterializedDataset:
    """A dataset whose blocks are made from objects in the store by one task each, on the
    cluster: the values never pass through this process; only their metadata does."""
    sub = get_submitter()
    outs = [sub.submit(convert, [r], num_returns=2, options=_CONVERT, name=name) for r in refs]
    metas = sub.get([meta for _, meta in outs])
    bundles = [RefBundle([(block, meta)]) for (block, _), meta in zip(outs, metas)]
    return MaterializedDataset(L.InputData(name, bundles=bundles))


def from_pandas_refs(dfs: Any) -> MaterializedDataset:
    """A dataset from object refs to pandas DataFrames (one ref or a list): one block per
    DataFrame, converted to Arrow on the cluster. The refs stay the caller's."""
    return _from_objects(_ref_list(dfs, "from_pandas_refs", "pandas DataFrame"), T.pandas_to_block,
                         "FromPandasRefs")


def from_numpy_refs(ndarrays: Any) -> MaterializedDataset:
    """A dataset from object refs to ndarrays (one ref or a list), column ``data`` as in
    ``from_numpy``: one block per array, built on the cluster. The refs stay the caller's."""
    return _from_objects(_ref_list(ndarrays, "from_numpy_refs", "numpy ndarray"), T.numpy_to_block,
                         "FromNumpyRefs")


def from_arrow_refs(tables: Any) -> MaterializedDataset:
    """A dataset from object refs to Arrow tables (one ref or a list; a ref may also hold
    Arrow's IPC stream format in bytes). Each table is a block as it is, with no copy: only
    its metadata is computed, on the cluster."""
    refs = _ref_list(tables, "from_arrow_refs", "pyarrow Table")
    sub = get_submitter()
    outs = [sub.submit(T.arrow_to_block, [r], num_returns=3, options=_CONVERT, name="FromArrowRefs")
            for r in refs]
    got = sub.get([x for _, meta, new in outs for x in (meta, new)])
    metas, new = got[0::2], got[1::2]
    bundles = [RefBundle([(block if made else ref, meta)])
               for ref, (block, _, _), meta, made in zip(refs, outs, metas, new)]
    return MaterializedDataset(L.InputData("FromArrowRefs", bundles=bundles))


def _file_read(cls: type, paths: Any, override_num_blocks: int | None, parallelism: int | None,
               ray_remote_args: dict[str, Any] | None, **kwargs: Any) -> Dataset:
    return read_datasource(cls(paths, **kwargs), override_num_blocks=override_num_blocks,
                           parallelism=parallelism, ray_remote_args=ray_remote_args)


def read_parquet(paths: str | Sequence[str], *, filesystem: Any = None, columns: list[str] | None = None,
                 filter: Any = None, override_num_blocks: int | None = None, parallelism: int | None = None,
                 ray_remote_args: dict[str, Any] | None = None, file_extensions: list[str] | None = None,
                 include_paths: bool = False, partitioning: Any = "hive", schema: pa.Schema | None = None,
                 **arrow_parquet_args: Any) -> Dataset:
    """Parquet files/directories/globs/URIs; ``columns`` and ``filter`` (an Arrow expression) are pushed down."""
    filter = filter if filter is not None else arrow_parquet_args.pop("filter", None)
    return _file_read(ParquetDatasource, paths, override_num_blocks, parallelism, ray_remote_args,
                      filesystem=filesystem, columns=columns, filter=filter, file_extensions=file_extensions,
                      include_paths=include_paths, partitioning=partitioning, schema=schema)


def read_orc(paths: str | Sequence[str], *, filesystem: Any = None, columns: list[str] | None = None,
             override_num_blocks: int | None = None, parallelism: int | None = None,
             ray_remote_args: dict[str, Any] | None = None, file_extensions: list[str] | None = None,
             include_paths: bool = False, partitioning: Any = "hive", **arrow_orc_args: Any) -> Dataset:
    """ORC files (``pyarrow.orc``); ``columns`` selects columns while reading."""
    return _file_read(ORCDatasource, paths, override_num_blocks, parallelism, ray_remote_args,
                      filesystem=filesystem, columns=columns, file_extensions=file_extensions,
                      include_paths=include_paths, partitioning=partitioning)


def read_avro(paths: str | Sequence[str], *, filesystem: Any = None, override_num_blocks: int | None = None,
              parallelism: int | None = None, ray_remote_args: dict[str, Any] | None = None,
              file_extensions: list[str] | None = None, include_paths: bool = False,
              partitioning: Any = None, **kwargs: Any) -> Dataset:
    """Avro container files, one row per record (needs the ``fastavro`` package)."""
    return _file_read(AvroDatasource, paths, override_num_blocks, parallelism, ray_remote_args,
                      filesystem=filesystem, file_extensions=file_extensions, include_paths=include_paths,
                      partitioning=partitioning)


def from_huggingface(dataset: Any, parallelism: int = -1, concurrency: int | None = None,
                     override_num_blocks: int | None = None) -> MaterializedDataset:
    """A Hugging Face ``datasets.Dataset`` (or ``IterableDataset``) already loaded in this process.

    A map-style dataset's Arrow table is used as is (zero copy; a filtered or shuffled
    one is flattened first); an iterable one is read in batches. Pick one split of a
    ``DatasetDict`` first (``ds["train"]``).
    """
    try:
        import datasets as hf
    except ImportError as e:
        raise ImportError("from_huggingface needs the 'datasets' package: pip install datasets") from e
    if isinstance(dataset, (hf.DatasetDict, hf.IterableDatasetDict)):
        raise TypeError(f"from_huggingface got a {type(dataset).__name__} with splits {list(dataset)}; "
                        "pass one split, e.g. from_huggingface(ds['train'])")
    if isinstance(dataset, hf.IterableDataset):
        tables = [pa.Table.from_pydict(batch) for batch in dataset.iter(batch_size=4096)]
        table = pa.concat_tables(tables) if tables else pa.table({})
    elif isinstance(dataset, hf.Dataset):
        if getattr(dataset, "_indices", None) is not None:
            dataset = dataset.flatten_indices()
        table = dataset.data.table if hasattr(dataset.data, "table") else dataset.data
        table = pa.Table.from_batches(table.to_batches(), schema=table.schema)
    else:
        raise TypeError(f"from_huggingface needs a datasets.Dataset or IterableDataset, got {type(dataset).__name__}")
    blocks = _blocks_param(override_num_blocks, parallelism if parallelism != -1 else None)
    n = blocks if blocks > 0 else max(1, min(DEFAULT_FROM_ITEMS_BLOCKS, table.num_rows // 1024 or 1))
    bounds = np.linspace(0, table.num_rows, n + 1).astype(np.int64)
    parts = [table.slice(int(a), int(b - a)) for a, b in zip(bounds[:-1], bounds[1:])]
    return _from_blocks(parts)


def read_csv(paths: str | Sequence[str], *, filesystem: Any = None, override_num_blocks: int | None = None,
             parallelism: int | None = None, ray_remote_args: dict[str, Any] | None = None,
             file_extensions: list[str] | None = None, include_paths: bool = False, partitioning: Any = None,
             **arrow_csv_args: Any) -> Dataset:
    """CSV files; ``parse_options``/``convert_options``/``read_options`` go to ``pyarrow.csv``."""
    return _file_read(CSVDatasource, paths, override_num_blocks, parallelism, ray_remote_args,
                      filesystem=filesystem, file_extensions=file_extensions, include_paths=include_paths,
                      partitioning=partitioning, **arrow_csv_args)


def read_json(paths: str | Sequence[str], *, filesystem: Any = None, override_num_blocks: int | None = None,
              parallelism: int | None = None, ray_remote_args: dict[str, Any] | None = None,
              file_extensions: list[str] | None = None, include_paths: bool = False,
              partitioning: Any = None, lines: bool | None = None, **arrow_json_args: Any) -> Dataset:
    """JSON lines files (a file holding one JSON array of objects also works)."""
    return _file_read(JSONDatasource, paths, override_num_blocks, parallelism, ray_remote_args,
                      filesystem=filesystem, file_extensions=file_extensions, include_paths=include_paths,
                      partitioning=partitioning, **arrow_json_args)


def read_text(paths: str | Sequence[str], *, encoding: str = "utf-8", drop_empty_lines: bool = True,
              filesystem: Any = None, override_num_blocks: int | None = None, parallelism: int | None = None,
              ray_remote_args: dict[str, Any] | None = None, file_extensions: list[str] | None = None,
              include_paths: bool = False, partitioning: Any = None, **kwargs: Any) -> Dataset:
    """One row ``{"text": line}`` per line."""
    return _file_read(TextDatasource, paths, override_num_blocks, parallelism, ray_remote_args,
                      filesystem=filesystem, file_extensions=file_extensions, include_paths=include_paths,
                      partitioning=partitioning, encoding=encoding, drop_empty_lines=drop_empty_lines)


def read_numpy(paths: str | Sequence[str], *, filesystem: Any = None, override_num_blocks: int | None = None,
               parallelism: int | None = None, ray_remote_args: dict[str, Any] | None = None,
               file_extensions: list[str] | None = None, include_paths: bool = False,
               partitioning: Any = None, **numpy_load_args: Any) -> Dataset:
    """``.npy`` files -> column ``data`` (one row per element of the first axis)."""
    return _file_read(NumpyDatasource, paths, override_num_blocks, parallelism, ray_remote_args,
                      filesystem=filesystem, file_extensions=file_extensions or ["npy", "npz"],
                      include_paths=include_paths, partitioning=partitioning, **numpy_load_args)


def read_binary_files(paths: str | Sequence[str], *, include_paths: bool = False, filesystem: Any = None,
                      override_num_blocks: int | None = None, parallelism: int | None = None,
                      ray_remote_args: dict[str, Any] | None = None, file_extensions: list[str] | None = None,
                      partitioning: Any = None, **kwargs: Any) -> Dataset:
    """One row ``{"bytes": ...}`` (plus ``path`` with ``include_paths``) per file."""
    return _file_read(BinaryDatasource, paths, override_num_blocks, parallelism, ray_remote_args,
                      filesystem=filesystem, file_extensions=file_extensions, include_paths=include_paths,
                      partitioning=partitioning)


def read_images(paths: str | Sequence[str], *, filesystem: Any = None, size: tuple[int, int] | None = None,
                mode: str | None = None, include_paths: bool = False, override_num_blocks: int | None = None,
                parallelism: int | None = None, ray_remote_args: dict[str, Any] | None = None,
                file_extensions: list[str] | None = None, partitioning: Any = None, **kwargs: Any) -> Dataset:
    """Images (needs Pillow) -> column ``image`` of HxWxC uint8 arrays; ``size=(h, w)`` resizes."""
    try:
        import PIL  # noqa: F401
    except ImportError as e:
        raise ImportError("read_images needs Pillow: pip install Pillow") from e
    return _file_read(ImageDatasource, paths, override_num_blocks, parallelism, ray_remote_args,
                      filesystem=filesystem, file_extensions=file_extensions or list(ImageDatasource._FILE_EXTENSIONS),
                      include_paths=include_paths, partitioning=partitioning, size=size, mode=mode)
