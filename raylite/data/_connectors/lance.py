"""``read_lance`` / ``write_lance`` on pylance: one read task per group of fragments.

A Lance dataset is a list of fragments (data files plus deletions), each of which
knows its row count from the manifest alone; the reader plans one task per fragment
(or per group, when fewer tasks are asked for), pushing ``columns=`` and ``filter=``
(Lance's SQL-like predicate) down into each fragment's scan. The writer turns each
write task's blocks into new fragments and the driver commits them in one
transaction (``create``, ``append`` or ``overwrite``), so readers never see a
half-written dataset.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from typing import Any

import pyarrow as pa

from raylite.data._connectors import estimate_row_bytes, require, save_mode
from raylite.data.block import Block, BlockMetadata
from raylite.data.datasink import Datasink, TaskContext, WriteResult
from raylite.data.datasource import Datasource, ReadTask

_PIP = "pylance"


def _lance() -> Any:
    return require("lance", _PIP, "read_lance/write_lance")


class LanceDatasource(Datasource):
    """Fragments of one Lance dataset (at ``version``, or the latest)."""

    def __init__(self, uri: str, *, version: int | str | None = None, columns: list[str] | None = None,
                 filter: str | None = None, storage_options: dict[str, str] | None = None,  # noqa: A002
                 scanner_options: dict[str, Any] | None = None) -> None:
        lance = _lance()
        self.uri, self.version = uri, version
        self.columns, self.filter = list(columns) if columns is not None else None, filter
        self.storage_options = dict(storage_options or {})
        self.scanner_options = dict(scanner_options or {})
        try:
            ds = lance.dataset(uri, version=version, storage_options=self.storage_options or None)
        except (ValueError, OSError) as e:
            raise ValueError(f"read_lance({uri!r}): no Lance dataset there ({e}).") from e
        self._version = ds.version  # pin it: later commits must not change what the tasks read
        schema = ds.schema
        if self.columns is not None:
            missing = [c for c in self.columns if c not in schema.names]
            if missing:
                raise ValueError(f"read_lance(columns=...): {missing} not in the dataset; it has "
                                 f"{schema.names}.")
            schema = pa.schema([schema.field(c) for c in self.columns])
        if filter is not None:
            try:  # a bad predicate fails here, naming itself, not in a task
                ds.scanner(columns=self.columns, filter=filter, limit=0).to_table()
            except Exception as e:  # noqa: BLE001 - lance raises several types
                raise ValueError(f"read_lance(filter={filter!r}) is not a valid Lance filter: {e}") from e
        self._schema = schema
        self._fragments = [(f.fragment_id, f.count_rows()) for f in ds.get_fragments()]
        self._row_size = estimate_row_bytes(schema)

    def get_name(self) -> str:
        return "ReadLance"

    def schema(self) -> pa.Schema:
        return self._schema

    def num_rows(self) -> int | None:
        return None if self.filter else sum(n for _, n in self._fragments)

    def estimate_inmemory_data_size(self) -> int | None:
        return sum(n for _, n in self._fragments) * self._row_size

    def get_read_tasks(self, parallelism: int) -> list[ReadTask]:
        if not self._fragments:
            return []
        n = max(1, min(parallelism if parallelism > 0 else len(self._fragments), len(self._fragments)))
        groups: list[list[tuple[int, int]]] = [self._fragments[i::n] for i in range(n)]
        tasks = []
        for group in groups:
            rows = sum(count for _, count in group)
            meta = BlockMetadata(None if self.filter else rows, rows * self._row_size, self._schema,
                                 [self.uri])
            tasks.append(ReadTask(_LanceRead(self.uri, self._version, [fid for fid, _ in group],
                                             self.columns, self.filter, self.storage_options,
                                             self.scanner_options), meta))
        return tasks


class _LanceRead:
    """One read task: scan its fragments, batch by batch (picklable, runs in the task)."""

    def __init__(self, uri: str, version: int, fragment_ids: list[int], columns: list[str] | None,
                 filter: str | None, storage_options: dict[str, str],  # noqa: A002
                 scanner_options: dict[str, Any]) -> None:
        self.uri, self.version, self.fragment_ids = uri, version, fragment_ids
        self.columns, self.filter = columns, filter
        self.storage_options, self.scanner_options = storage_options, scanner_options

    def __call__(self) -> Iterator[pa.Table]:
        ds = _lance().dataset(self.uri, version=self.version, storage_options=self.storage_options or None)
        fragments = [ds.get_fragment(fid) for fid in self.fragment_ids]
        scanner = ds.scanner(columns=self.columns, filter=self.filter, fragments=fragments,
                             **self.scanner_options)
        for batch in scanner.to_batches():
            if batch.num_rows:
                yield pa.Table.from_batches([batch])


class LanceDatasink(Datasink[list[Any]]):
    """Each write task writes fragments; the driver commits them all at once."""

    def __init__(self, uri: str, *, schema: pa.Schema | None = None, mode: Any = "create",
                 min_rows_per_file: int = 1024 * 1024, max_rows_per_file: int = 64 * 1024 * 1024,
                 data_storage_version: str | None = None,
                 storage_options: dict[str, Any] | None = None) -> None:
        _lance()
        self.uri, self.schema = uri, schema
        self.mode = save_mode(mode, ("create", "append", "overwrite"), "write_lance")
        self.min_rows_per_file, self.max_rows_per_file = min_rows_per_file, max_rows_per_file
        self.data_storage_version = data_storage_version
        self.storage_options = dict(storage_options or {})
        self._read_version: int | None = None

    def get_name(self) -> str:
        return "Lance"

    @property
    def min_rows_per_write(self) -> int | None:
        return self.min_rows_per_file

    def on_write_start(self, schema: pa.Schema | None = None) -> None:
        lance = _lance()
        try:
            existing = lance.dataset(self.uri, storage_options=self.storage_options or None)
        except (ValueError, OSError):
            existing = None
        if existing is not None and self.mode == "create":
            raise ValueError(f"write_lance({self.uri!r}): a Lance dataset is already there; pass "
                             "mode='append' to add to it or mode='overwrite' to replace it.")
        if existing is None and self.mode == "append":
            self.mode = "create"  # appending to nothing makes the dataset, as Lance does
        self._read_version = existing.version if existing is not None else None

    def write(self, blocks: Iterable[Block], ctx: TaskContext) -> list[Any]:
        from lance.fragment import write_fragments

        tables = [b for b in blocks if b.num_rows]
        if not tables:
            return []
        table = pa.concat_tables(tables, promote_options="default")
        if self.schema is not None:
            table = table.select(self.schema.names).cast(self.schema)
        fragments = write_fragments(table, self.uri, schema=table.schema,
                                    max_rows_per_file=self.max_rows_per_file,
                                    data_storage_version=self.data_storage_version,
                                    storage_options=self.storage_options or None)
        return [(f, table.schema) for f in fragments]

    def on_write_complete(self, write_result: WriteResult[list[Any]]) -> None:
        lance = _lance()
        written = [item for task in write_result.write_returns for item in task]
        if not written:
            return
        fragments = [f for f, _ in written]
        schema = self.schema or written[0][1]
        if self.mode == "append":
            op = lance.LanceOperation.Append(fragments)
        else:
            op = lance.LanceOperation.Overwrite(schema, fragments)
        lance.LanceDataset.commit(self.uri, op, read_version=self._read_version,
                                  storage_options=self.storage_options or None)
