"""File writers: ``write_parquet/csv/json/numpy`` as a final fused map stage.

Each write task concatenates its blocks and writes one file named
``{write_uuid}_{task_index:06d}_000000.{ext}`` in the output directory, so
reading the directory back (sorted paths) gives the rows in dataset order.
Empty blocks write nothing. The stage outputs a one-row table per file
(rows written, path) that the driver sums up.
"""

from __future__ import annotations

import io
import uuid
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

import pyarrow as pa
import pyarrow.fs as pafs

from raylite.data._internal.filesystem import filesystem_for
from raylite.data._internal.transforms import Stage, current_task_index
from raylite.data.block import Block, column_to_numpy, concat_blocks, table_to_pandas
from raylite.util._storage import explain_storage_error


@dataclass
class FileDatasink:
    path: str
    fs: pafs.FileSystem
    fmt: str
    options: dict[str, Any] = field(default_factory=dict)
    write_uuid: str = field(default_factory=lambda: uuid.uuid4().hex[:16])
    uri: str = ""  # the path as the user wrote it, for errors

    @staticmethod
    def create(path: str, fmt: str, filesystem: Any = None, try_create_dir: bool = True,
               **options: Any) -> FileDatasink:
        fs, inner = filesystem_for(path, filesystem)
        if try_create_dir:
            try:
                fs.create_dir(inner, recursive=True)
            except OSError as e:
                raise explain_storage_error(path, e, "writing to", "filesystem") or e
        return FileDatasink(inner, fs, fmt, options, uri=path)

    @property
    def ext(self) -> str:
        return {"parquet": "parquet", "csv": "csv", "json": "json", "numpy": "npy", "orc": "orc"}[self.fmt]

    def write(self, table: Block, task_index: int) -> str:
        name = f"{self.write_uuid}_{task_index:06d}_000000.{self.ext}"
        full = f"{self.path.rstrip('/')}/{name}"
        try:
            with self.fs.open_output_stream(full) as f:
                getattr(self, f"_write_{self.fmt}")(table, f)
        except OSError as e:
            raise explain_storage_error(self.uri or full, e, "writing to", "filesystem") or e
        return full

    def _write_parquet(self, table: Block, f: Any) -> None:
        import pyarrow.parquet as pq

        pq.write_table(table, f, **self.options)

    def _write_orc(self, table: Block, f: Any) -> None:
        import pyarrow.orc as paorc

        paorc.write_table(table, f, **self.options)

    def _write_csv(self, table: Block, f: Any) -> None:
        import pyarrow.csv as pacsv

        pacsv.write_csv(table, f, **self.options)

    def _write_json(self, table: Block, f: Any) -> None:
        df = table_to_pandas(table)
        text = df.to_json(orient="records", lines=True, **self.options)
        f.write(text.encode("utf-8") if not text.endswith("\n") else text.encode("utf-8"))
        if not text.endswith("\n"):
            f.write(b"\n")

    def _write_numpy(self, table: Block, f: Any) -> None:
        import numpy as np

        column = self.options.get("column")
        if column not in table.column_names:
            raise KeyError(f"write_numpy: column {column!r} not found; the dataset has {table.column_names}")
        buf = io.BytesIO()
        np.save(buf, column_to_numpy(table.column(column)))
        f.write(buf.getvalue())


@dataclass
class WriteStage(Stage):
    sink: FileDatasink | None = None
    name: str = "Write"

    def apply(self, tables: Iterator[Block]) -> Iterator[Block]:
        assert self.sink is not None
        table = concat_blocks(list(tables))
        if table.num_rows == 0:
            return
        path = self.sink.write(table, current_task_index())
        yield pa.table({"num_rows": [table.num_rows], "path": [path]})
