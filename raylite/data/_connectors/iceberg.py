"""``read_iceberg`` / ``write_iceberg`` on pyiceberg (any catalog it loads: SQL, REST, Glue ...).

Reading plans the scan on the driver (``row_filter``, ``selected_fields``,
``snapshot_id`` pushed into Iceberg's own planning, which prunes files by their
statistics) and makes one read task per group of planned data files; each task
reloads the table from the catalog and reads its files with pyiceberg's Arrow
reader, which applies deletes and the filter. Writing collects the blocks on the
driver and commits them in one Iceberg transaction (``append`` or ``overwrite``).
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from typing import Any

import pyarrow as pa

from raylite.data._connectors import require, save_mode
from raylite.data.block import Block, BlockMetadata
from raylite.data.datasink import Datasink, TaskContext, WriteResult
from raylite.data.datasource import Datasource, ReadTask

_PIP = "pyiceberg"


def load_table(table_identifier: str, catalog_kwargs: dict[str, Any] | None) -> Any:
    require("pyiceberg", _PIP, "read_iceberg/write_iceberg")
    from pyiceberg.catalog import load_catalog

    kwargs = dict(catalog_kwargs or {})
    name = kwargs.pop("name", "default")
    catalog = load_catalog(name, **kwargs)
    try:
        return catalog.load_table(table_identifier)
    except Exception as e:  # noqa: BLE001 - NoSuchTableError and friends
        raise ValueError(f"Iceberg table {table_identifier!r} cannot be loaded from catalog "
                         f"{name!r}: {type(e).__name__}: {e}") from e


class IcebergDatasource(Datasource):
    def __init__(self, table_identifier: str, *, row_filter: Any = None,
                 selected_fields: tuple[str, ...] = ("*",), snapshot_id: int | None = None,
                 scan_kwargs: dict[str, Any] | None = None,
                 catalog_kwargs: dict[str, Any] | None = None) -> None:
        self.table_identifier, self.catalog_kwargs = table_identifier, dict(catalog_kwargs or {})
        self.scan_args: dict[str, Any] = {"selected_fields": tuple(selected_fields),
                                          "snapshot_id": snapshot_id, **(scan_kwargs or {})}
        if row_filter is not None:
            self.scan_args["row_filter"] = row_filter
        table = load_table(table_identifier, self.catalog_kwargs)
        scan = table.scan(**self.scan_args)
        self._files = [(t.file.file_path, int(t.file.record_count), int(t.file.file_size_in_bytes))
                       for t in scan.plan_files()]
        self._schema = scan.projection().as_arrow()

    def get_name(self) -> str:
        return "ReadIceberg"

    def schema(self) -> pa.Schema:
        return self._schema

    def estimate_inmemory_data_size(self) -> int:
        return sum(size for _, _, size in self._files)

    def get_read_tasks(self, parallelism: int) -> list[ReadTask]:
        if not self._files:
            return []
        n = max(1, min(parallelism if parallelism > 0 else len(self._files), len(self._files)))
        tasks = []
        for i in range(n):
            group = self._files[i::n]
            meta = BlockMetadata(None, sum(s for _, _, s in group), self._schema, [p for p, _, _ in group])
            tasks.append(ReadTask(_IcebergRead(self.table_identifier, self.catalog_kwargs, self.scan_args,
                                               {p for p, _, _ in group}), meta))
        return tasks


class _IcebergRead:
    def __init__(self, table_identifier: str, catalog_kwargs: dict[str, Any], scan_args: dict[str, Any],
                 files: set[str]) -> None:
        self.table_identifier, self.catalog_kwargs = table_identifier, catalog_kwargs
        self.scan_args, self.files = scan_args, files

    def __call__(self) -> Iterator[pa.Table]:
        from pyiceberg.io.pyarrow import ArrowScan

        table = load_table(self.table_identifier, self.catalog_kwargs)
        scan = table.scan(**self.scan_args)
        tasks = [t for t in scan.plan_files() if t.file.file_path in self.files]
        reader = ArrowScan(table.metadata, table.io, scan.projection(), scan.row_filter,
                           scan.case_sensitive)
        for batch in reader.to_record_batches(tasks):
            if batch.num_rows:
                yield pa.Table.from_batches([batch])


class IcebergDatasink(Datasink[None]):
    """All blocks, committed on the driver in one transaction."""

    def __init__(self, table_identifier: str, *, catalog_kwargs: dict[str, Any] | None = None,
                 snapshot_properties: dict[str, str] | None = None, mode: Any = "append",
                 overwrite_filter: Any = None) -> None:
        self.table_identifier, self.catalog_kwargs = table_identifier, dict(catalog_kwargs or {})
        self.snapshot_properties = dict(snapshot_properties or {})
        self.mode = save_mode(mode, ("append", "overwrite"), "write_iceberg")
        self.overwrite_filter = overwrite_filter
        self._tables: list[pa.Table] = []

    def get_name(self) -> str:
        return "Iceberg"

    @property
    def supports_distributed_writes(self) -> bool:
        return False

    def on_write_start(self, schema: pa.Schema | None = None) -> None:
        load_table(self.table_identifier, self.catalog_kwargs)  # a missing table fails first

    def write(self, blocks: Iterable[Block], ctx: TaskContext) -> None:
        self._tables.extend(b for b in blocks if b.num_rows)

    def on_write_complete(self, write_result: WriteResult[None]) -> None:
        table = load_table(self.table_identifier, self.catalog_kwargs)
        target = table.schema().as_arrow()
        data = (pa.concat_tables(self._tables, promote_options="default") if self._tables
                else target.empty_table())
        data = data.select(target.names).cast(target)
        if self.mode == "overwrite":
            args: dict[str, Any] = {"snapshot_properties": self.snapshot_properties}
            if self.overwrite_filter is not None:
                args["overwrite_filter"] = self.overwrite_filter
            table.overwrite(data, **args)
        else:
            table.append(data, snapshot_properties=self.snapshot_properties)
        self._tables = []
