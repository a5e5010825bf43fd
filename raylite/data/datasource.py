"""Datasources: where a Dataset's blocks come from.

A ``Datasource`` is planned into ``ReadTask``s: small picklable callables that
produce an iterator of Arrow tables when run inside a task. File-based sources
list their files when the dataset is created (so a missing path fails at once)
and read them lazily, one task per file or per group of row groups.

Users may subclass ``Datasource`` (``get_read_tasks`` and
``estimate_inmemory_data_size``) and pass it to ``raylite.data.read_datasource``.
"""

from __future__ import annotations

import io
import json
import math
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.fs as pafs

from raylite.data._internal.filesystem import expand_paths, parse_hive_partitions
from raylite.data.block import (
    Block,
    BlockMetadata,
    SchemaMismatchError,
    to_arrow_array,
    unify_schemas,
)


class ReadTask:
    """A unit of reading: ``read_task()`` yields Arrow tables; ``metadata`` is an estimate."""

    def __init__(self, read_fn: Callable[[], Any], metadata: BlockMetadata) -> None:
        self._read_fn = read_fn
        self.metadata = metadata

    def __call__(self) -> Iterator[Block]:
        result = self._read_fn()
        if isinstance(result, (pa.Table, pa.RecordBatch)):
            result = [result]
        for item in result:
            if isinstance(item, pa.RecordBatch):
                item = pa.Table.from_batches([item])
            elif not isinstance(item, pa.Table):
                from raylite.data.block import batch_to_block

                item = batch_to_block(item, where="a read task")
            yield item

    def get_metadata(self) -> BlockMetadata:
        return self.metadata


class Datasource:
    """Base class: something that can be split into read tasks."""

    def get_name(self) -> str:
        name = type(self).__name__
        return name[: -len("Datasource")] if name.endswith("Datasource") else name

    def get_read_tasks(self, parallelism: int) -> list[ReadTask]:
        raise NotImplementedError

    def estimate_inmemory_data_size(self) -> int | None:
        return None

    def schema(self) -> pa.Schema | None:
        return None

    def num_rows(self) -> int | None:
        return None

    def input_files(self) -> list[str]:
        return []


# ------------------------------------------------------------------ in-memory sources


class RangeDatasource(Datasource):
    """``range(n)`` -> column ``id``; ``range_tensor(n, shape)`` -> column ``data``."""

    def __init__(self, n: int, tensor_shape: tuple[int, ...] | None = None) -> None:
        if n < 0:
            raise ValueError(f"range() needs a non-negative count, got {n}")
        self.n = int(n)
        self.tensor_shape = tuple(tensor_shape) if tensor_shape is not None else None

    def get_name(self) -> str:
        return "ReadRange" if self.tensor_shape is None else "ReadRangeTensor"

    def _row_bytes(self) -> int:
        return 8 * (int(np.prod(self.tensor_shape)) if self.tensor_shape else 1)

    def estimate_inmemory_data_size(self) -> int:
        return self.n * self._row_bytes()

    def num_rows(self) -> int:
        return self.n

    def schema(self) -> pa.Schema:
        return _range_block(0, 0, self.tensor_shape).schema

    def get_read_tasks(self, parallelism: int) -> list[ReadTask]:
        parallelism = max(1, min(parallelism, self.n))
        bounds = np.linspace(0, self.n, parallelism + 1).astype(np.int64)
        tasks = []
        for lo, hi in zip(bounds[:-1], bounds[1:]):
            lo, hi = int(lo), int(hi)
            meta = BlockMetadata(hi - lo, (hi - lo) * self._row_bytes(), self.schema())
            tasks.append(ReadTask(_RangeRead(lo, hi, self.tensor_shape), meta))
        return tasks or [ReadTask(_RangeRead(0, 0, self.tensor_shape), BlockMetadata(0, 0, self.schema()))]


@dataclass
class _RangeRead:
    lo: int
    hi: int
    shape: tuple[int, ...] | None

    def __call__(self) -> Iterator[Block]:
        step = 1 << 20
        for start in range(self.lo, self.hi, step) if self.hi > self.lo else [self.lo]:
            yield _range_block(start, min(self.hi, start + step), self.shape)


def _range_block(lo: int, hi: int, shape: tuple[int, ...] | None) -> Block:
    ids = np.arange(lo, hi, dtype=np.int64)
    if shape is None:
        return pa.table({"id": ids})
    data = np.broadcast_to(ids.reshape((-1,) + (1,) * len(shape)), (len(ids),) + tuple(shape))
    return pa.table({"data": to_arrow_array(np.ascontiguousarray(data))})


# ------------------------------------------------------------------ files


class FileBasedDatasource(Datasource):
    """Lists files at construction; one read task per file (or group of small files)."""

    _FILE_EXTENSIONS: tuple[str, ...] | None = None
    _NAME = "ReadFiles"

    def __init__(
        self,
        paths: Any,
        *,
        filesystem: Any = None,
        file_extensions: Sequence[str] | None = None,
        include_paths: bool = False,
        partitioning: Any = "hive",
        **reader_args: Any,
    ) -> None:
        self.fs, self.files = expand_paths(paths, filesystem, file_extensions)
        self.include_paths = include_paths
        self.partitioning = partitioning
        self.reader_args = reader_args

    def get_name(self) -> str:
        return self._NAME

    def input_files(self) -> list[str]:
        return [p for p, _ in self.files]

    def estimate_inmemory_data_size(self) -> int:
        return sum(s for _, s in self.files)

    def get_read_tasks(self, parallelism: int) -> list[ReadTask]:
        groups = _group_files(self.files, parallelism)
        tasks = []
        for group in groups:
            meta = BlockMetadata(num_rows=None, size_bytes=sum(s for _, s in group),
                                 input_files=[p for p, _ in group])
            tasks.append(ReadTask(_FileGroupRead(self, [p for p, _ in group]), meta))
        return tasks

    # formats override this: one file -> tables
    def _read_stream(self, f: Any, path: str) -> Iterator[Block]:
        raise NotImplementedError

    def _open(self, path: str) -> Any:
        return self.fs.open_input_file(path)

    def _read_file(self, path: str) -> Iterator[Block]:
        try:
            with self._open(path) as f:
                for table in self._read_stream(f, path):
                    yield self._decorate(table, path)
        except (ValueError, UnicodeDecodeError) as e:  # ArrowInvalid is a ValueError
            raise ValueError(f"{self.get_name()} failed to read file {path!r}: {e}") from e
        except OSError as e:
            raise OSError(f"{self.get_name()} failed to read file {path!r}: {e}") from e

    def _decorate(self, table: Block, path: str) -> Block:
        if self.partitioning == "hive":
            for key, value in parse_hive_partitions(path, []).items():
                if key not in table.column_names:
                    table = table.append_column(key, pa.array([value] * table.num_rows, type=pa.string()))
        if self.include_paths:
            table = table.append_column("path", pa.array([path] * table.num_rows, type=pa.string()))
        return table


def _group_files(files: list[tuple[str, int]], parallelism: int) -> list[list[tuple[str, int]]]:
    """One group per file, unless there are many more files than ``parallelism``."""
    if len(files) <= max(1, parallelism):
        return [[f] for f in files]
    per = math.ceil(len(files) / parallelism)
    return [files[i:i + per] for i in range(0, len(files), per)]


@dataclass
class _FileGroupRead:
    source: FileBasedDatasource
    paths: list[str]

    def __call__(self) -> Iterator[Block]:
        for p in self.paths:
            yield from self.source._read_file(p)


class CSVDatasource(FileBasedDatasource):
    _NAME = "ReadCSV"

    def _read_stream(self, f: Any, path: str) -> Iterator[Block]:
        import pyarrow.csv as pacsv

        args = dict(self.reader_args)
        reader = pacsv.open_csv(
            f,
            read_options=args.pop("read_options", None),
            parse_options=args.pop("parse_options", None),
            convert_options=args.pop("convert_options", None),
        )
        batches = list(reader)
        if batches:
            yield pa.Table.from_batches(batches)
        else:
            yield reader.schema.empty_table()


class JSONDatasource(FileBasedDatasource):
    """JSON lines (one object per line); a file holding one JSON array also works."""

    _NAME = "ReadJSON"

    def _read_stream(self, f: Any, path: str) -> Iterator[Block]:
        import pyarrow.json as pajson

        data = f.read()
        stripped = data.lstrip()
        if stripped.startswith(b"["):
            from raylite.data.block import rows_to_block

            rows = json.loads(data)
            yield rows_to_block(rows)
            return
        if not stripped:
            return
        yield pajson.read_json(
            io.BytesIO(data),
            read_options=self.reader_args.get("read_options"),
            parse_options=self.reader_args.get("parse_options"),
        )


class TextDatasource(FileBasedDatasource):
    _NAME = "ReadText"

    def _read_stream(self, f: Any, path: str) -> Iterator[Block]:
        encoding = self.reader_args.get("encoding", "utf-8")
        drop_empty = self.reader_args.get("drop_empty_lines", True)
        lines = f.read().decode(encoding).splitlines()
        if drop_empty:
            lines = [ln for ln in lines if ln.strip()]
        yield pa.table({"text": pa.array(lines, type=pa.string())})


class NumpyDatasource(FileBasedDatasource):
    _NAME = "ReadNumpy"

    def _read_stream(self, f: Any, path: str) -> Iterator[Block]:
        arr = np.load(io.BytesIO(f.read()), allow_pickle=self.reader_args.get("allow_pickle", False))
        if isinstance(arr, np.lib.npyio.NpzFile):
            yield pa.table({k: to_arrow_array(arr[k], k) for k in arr.files})
        else:
            yield pa.table({"data": to_arrow_array(arr, "data")})


class BinaryDatasource(FileBasedDatasource):
    _NAME = "ReadBinary"

    def _read_stream(self, f: Any, path: str) -> Iterator[Block]:
        yield pa.table({"bytes": pa.array([f.read()], type=pa.binary())})


class ImageDatasource(FileBasedDatasource):
    """Images via Pillow -> column ``image`` (HxWxC uint8 arrays)."""

    _NAME = "ReadImage"
    _FILE_EXTENSIONS = ("png", "jpg", "jpeg", "tif", "tiff", "bmp", "gif")

    def _read_stream(self, f: Any, path: str) -> Iterator[Block]:
        try:
            from PIL import Image
        except ImportError as e:
            raise ImportError("read_images needs Pillow: pip install Pillow") from e
        img = Image.open(io.BytesIO(f.read()))
        if self.reader_args.get("mode"):
            img = img.convert(self.reader_args["mode"])
        if self.reader_args.get("size"):
            h, w = self.reader_args["size"]
            img = img.resize((w, h))
        arr = np.asarray(img)
        yield pa.table({"image": to_arrow_array(arr[None, ...], "image")})


class ParquetDatasource(FileBasedDatasource):
    """Parquet via ``pyarrow.dataset``: column projection, filter pushdown, row-group splits.

    File footers are read when the dataset is created, so a non-Parquet file or
    files whose schemas conflict fail at once with the file and column named,
    and ``count()`` needs no read.
    """

    _NAME = "ReadParquet"

    def __init__(self, paths: Any, *, columns: list[str] | None = None, filter: Any = None,
                 schema: pa.Schema | None = None, **kwargs: Any) -> None:
        super().__init__(paths, **kwargs)
        self.columns = columns
        self.filter = filter
        self._fragments = self._read_footers()
        self._schemas = {p: s for p, _, s in self._fragments}
        schemas = [frag[2] for frag in self._fragments]
        labels = [frag[0] for frag in self._fragments]
        self._file_schema = schema or (unify_schemas(schemas, labels) if schemas else pa.schema([]))
        if columns is not None:
            missing = [c for c in columns if c not in self._file_schema.names]
            hive = set()
            for p, _ in self.files:
                hive.update(parse_hive_partitions(p, []))
            missing = [c for c in missing if c not in hive]
            if missing:
                raise KeyError(
                    f"read_parquet: column(s) {missing} not found; the files have columns {self._file_schema.names}"
                )

    def _read_footers(self) -> list[tuple[str, list[tuple[int, int]], pa.Schema]]:
        """[(path, [(num_rows, byte_size) per row group], arrow schema)] for every file."""
        import pyarrow.parquet as pq

        out = []
        for path, _size in self.files:
            try:
                with self.fs.open_input_file(path) as f:
                    md = pq.ParquetFile(f).metadata
                    schema = md.schema.to_arrow_schema()
            except (pa.ArrowInvalid, OSError) as e:
                raise ValueError(
                    f"read_parquet: {path!r} is not a readable Parquet file ({e}). Pass only Parquet "
                    "files, or filter with file_extensions=['parquet']."
                ) from e
            groups = [(md.row_group(i).num_rows, self._selected_bytes(md.row_group(i)))
                      for i in range(md.num_row_groups)]
            out.append((path, groups, schema))
        return out

    def _selected_bytes(self, row_group: Any) -> int:
        """In-memory size of the row group's projected columns (sizes the read tasks)."""
        if self.columns is None:
            return row_group.total_byte_size
        wanted = {c.split(".")[0] for c in self.columns}
        total = 0
        for j in range(row_group.num_columns):
            col = row_group.column(j)
            if col.path_in_schema.split(".")[0] in wanted:
                total += col.total_uncompressed_size
        return total

    def schema(self) -> pa.Schema:
        s = self._file_schema
        if self.partitioning == "hive":
            keys: dict[str, None] = {}
            for p, _ in self.files:
                keys.update(dict.fromkeys(parse_hive_partitions(p, [])))
            for k in keys:
                if k not in s.names:
                    s = s.append(pa.field(k, pa.string()))
        if self.include_paths:
            s = s.append(pa.field("path", pa.string()))
        if self.columns is not None:
            s = pa.schema([s.field(c) for c in self.columns if c in s.names])
        return s

    def num_rows(self) -> int | None:
        if self.filter is not None:
            return None
        return sum(n for _, groups, _ in self._fragments for n, _ in groups)

    def estimate_inmemory_data_size(self) -> int:
        return sum(b for _, groups, _ in self._fragments for _, b in groups)

    def get_read_tasks(self, parallelism: int) -> list[ReadTask]:
        units: list[tuple[str, list[int], int, int]] = []  # path, row groups, rows, bytes
        want_split = parallelism > len(self._fragments)
        for path, groups, _ in self._fragments:
            if want_split and len(groups) > 1:
                per_file = max(1, math.ceil(parallelism / len(self._fragments)))
                chunk = max(1, math.ceil(len(groups) / per_file))
                for i in range(0, len(groups), chunk):
                    ids = list(range(i, min(len(groups), i + chunk)))
                    units.append((path, ids, sum(groups[j][0] for j in ids), sum(groups[j][1] for j in ids)))
            else:
                units.append((path, list(range(len(groups))), sum(n for n, _ in groups), sum(b for _, b in groups)))
        if len(units) > parallelism:
            per = math.ceil(len(units) / parallelism)
            merged = [units[i:i + per] for i in range(0, len(units), per)]
        else:
            merged = [[u] for u in units]
        schema = self.schema()
        tasks = []
        for group in merged:
            rows = None if self.filter is not None else sum(u[2] for u in group)
            meta = BlockMetadata(rows, sum(u[3] for u in group), schema, [u[0] for u in group])
            tasks.append(ReadTask(_ParquetRead(self, [(u[0], u[1]) for u in group]), meta))
        return tasks

    def _batches(self, frag: Any, path: str, row_groups: list[int], columns: list[str] | None) -> Any:
        """Record batches of one file: the plain Parquet reader when nothing needs the
        dataset scanner (no filter, the file already has the unified schema), else the scanner."""
        import pyarrow.parquet as pq

        file_schema = self._schemas[path]
        if self.filter is None and file_schema.equals(self._file_schema):
            pf = pq.ParquetFile(self.fs.open_input_file(path))
            return pf.iter_batches(row_groups=row_groups, columns=columns, use_threads=False)
        return frag.to_batches(schema=self._file_schema, columns=columns, filter=self.filter, use_threads=False)

    def read_fragment(self, path: str, row_groups: list[int]) -> Iterator[Block]:
        import pyarrow.dataset as pads

        fmt = pads.ParquetFileFormat()
        frag = fmt.make_fragment(path, filesystem=self.fs, row_groups=row_groups)
        hive = parse_hive_partitions(path, []) if self.partitioning == "hive" else {}
        cols = self.columns
        file_cols = [c for c in cols if c not in hive] if cols is not None else None
        try:
            batches = self._batches(frag, path, row_groups, file_cols)
            for batch in batches:
                table = pa.Table.from_batches([batch])
                for key, value in hive.items():
                    if cols is None or key in cols:
                        table = table.append_column(key, pa.array([value] * table.num_rows, type=pa.string()))
                if self.include_paths:
                    table = table.append_column("path", pa.array([path] * table.num_rows, type=pa.string()))
                yield table
        except (pa.ArrowInvalid, pa.ArrowTypeError) as e:
            raise SchemaMismatchError(f"read_parquet: failed reading {path!r}: {e}") from e


@dataclass
class _ParquetRead:
    source: ParquetDatasource
    units: list[tuple[str, list[int]]]

    def __call__(self) -> Iterator[Block]:
        for path, groups in self.units:
            yield from self.source.read_fragment(path, groups)


class ORCDatasource(FileBasedDatasource):
    """ORC files through ``pyarrow.orc``, one table per stripe."""

    _NAME = "ReadORC"

    def _read_stream(self, f: Any, path: str) -> Iterator[Block]:
        import pyarrow.orc as orc

        reader = orc.ORCFile(f)
        columns = self.reader_args.get("columns")
        if reader.nstripes == 0:
            yield reader.schema.empty_table() if columns is None else reader.schema.empty_table().select(columns)
        for i in range(reader.nstripes):
            batch = reader.read_stripe(i, columns=columns)
            yield pa.Table.from_batches([batch])


class AvroDatasource(FileBasedDatasource):
    """Avro container files, decoded with ``fastavro`` (the reader Ray uses too)."""

    _NAME = "ReadAvro"
    ROWS_PER_BLOCK = 16_384

    def __init__(self, paths: Any, **kwargs: Any) -> None:
        try:
            import fastavro  # noqa: F401
        except ImportError as e:
            raise ImportError("read_avro needs the 'fastavro' package: pip install fastavro") from e
        super().__init__(paths, **kwargs)

    def _read_stream(self, f: Any, path: str) -> Iterator[Block]:
        import fastavro

        from raylite.data.block import rows_to_block

        rows: list[dict[str, Any]] = []
        for record in fastavro.reader(f):
            rows.append(record)
            if len(rows) >= self.ROWS_PER_BLOCK:
                yield rows_to_block(rows)
                rows = []
        if rows:
            yield rows_to_block(rows)


def file_datasource_class(kind: str) -> type[FileBasedDatasource]:
    return {
        "csv": CSVDatasource, "json": JSONDatasource, "text": TextDatasource, "numpy": NumpyDatasource,
        "binary": BinaryDatasource, "images": ImageDatasource, "orc": ORCDatasource, "avro": AvroDatasource,
    }[kind]


from raylite.data.datasink import Datasink, TaskContext, WriteResult  # noqa: E402  (Ray's import path too)

__all__ = [
    "AvroDatasource", "BinaryDatasource", "CSVDatasource", "Datasink", "Datasource", "FileBasedDatasource",
    "ImageDatasource", "JSONDatasource", "NumpyDatasource", "ORCDatasource", "ParquetDatasource",
    "RangeDatasource", "ReadTask", "TaskContext", "TextDatasource", "WriteResult", "pafs",
]
