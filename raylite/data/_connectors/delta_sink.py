"""``write_delta``'s sink: write tasks add Parquet files, the driver commits them once.

Apart from the reader (delta.py), which imports ``read_api`` and so ``dataset``: Dataset's
writer methods import this module, so it must not import them back.
"""

from __future__ import annotations

import json
import time
import uuid
from collections.abc import Iterable, Iterator
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from raylite.data._connectors import require, save_mode
from raylite.data._internal.filesystem import filesystem_for
from raylite.data.block import Block, concat_blocks
from raylite.data.datasink import Datasink, TaskContext, WriteResult


class DeltaDatasink(Datasink[list[dict[str, Any]]]):
    """``write_delta``: write tasks add Parquet files, the driver commits them once.

    Each task writes its blocks as Parquet files under the table root (one per
    ``partition_by`` value combination, in ``col=value/`` directories, the partition
    columns left out of the file as Delta expects) and returns the files' add actions.
    ``on_write_complete`` commits them all in one Delta transaction: a new table is
    created with them, an existing one gets an append or overwrite commit. A failed
    write commits nothing, so readers never see a partial write.
    """

    def __init__(self, path: str, *, mode: Any = "append", partition_by: list[str] | None = None,
                 storage_options: dict[str, str] | None = None, schema_mode: str = "merge",
                 filesystem: Any = None, name: str | None = None, description: str | None = None) -> None:
        self.path, self.partition_by = path, list(partition_by or [])
        self.mode = save_mode(mode, ("append", "overwrite", "error", "ignore"), "write_delta")
        self.storage_options, self.schema_mode = storage_options, schema_mode
        self.filesystem, self.name, self.description = filesystem, name, description
        self.write_uuid = uuid.uuid4().hex[:16]
        self._skip = False
        self._schema: pa.Schema | None = None

    def get_name(self) -> str:
        return "Delta"

    def _exists(self) -> bool:
        deltalake = require("deltalake", "deltalake", "write_delta")
        return bool(deltalake.DeltaTable.is_deltatable(self.path, storage_options=self.storage_options))

    def on_write_start(self, schema: pa.Schema | None = None) -> None:
        if self._exists():
            if self.mode == "error":
                raise ValueError(f"write_delta({self.path!r}, mode='error'): a Delta table is already "
                                 "there; use mode='append' or 'overwrite'.")
            self._skip = self.mode == "ignore"

    def write(self, blocks: Iterable[Block], ctx: TaskContext) -> list[dict[str, Any]]:
        if self._skip:
            return []
        fs, root = filesystem_for(self.path, self.filesystem)
        table = concat_blocks([b for b in blocks if b.num_rows])
        if not table.num_rows:
            return []
        missing = [c for c in self.partition_by if c not in table.column_names]
        if missing:
            raise ValueError(f"write_delta(partition_by={self.partition_by}): no column {missing}; "
                             f"the dataset has {table.column_names}.")
        actions = []
        for n, (values, part) in enumerate(_partitions(table, self.partition_by)):
            relative = "".join(f"{k}={v}/" for k, v in values.items())
            relative += f"part-{self.write_uuid}-{ctx.task_idx:06d}-{n:04d}.parquet"
            fs.create_dir(f"{root.rstrip('/')}/{relative.rpartition('/')[0]}".rstrip("/"), recursive=True)
            full = f"{root.rstrip('/')}/{relative}"
            pq.write_table(part.drop_columns(self.partition_by), full, filesystem=fs)
            actions.append({"path": relative, "size": fs.get_file_info(full).size,
                            "partition_values": values, "num_rows": part.num_rows,
                            "schema": table.schema})
        return actions

    def on_write_complete(self, write_result: WriteResult[list[dict[str, Any]]]) -> None:
        deltalake = require("deltalake", "deltalake", "write_delta")
        from deltalake.transaction import AddAction, create_table_with_add_actions

        found = [a for task in write_result.write_returns for a in (task or [])]
        if self._skip:
            return
        if not found:  # nothing written: an overwrite still empties an existing table
            if self.mode == "overwrite" and self._exists():
                table = deltalake.DeltaTable(self.path, storage_options=self.storage_options)
                table.create_write_transaction([], "overwrite", table.schema())
            return
        schema = found[0]["schema"]
        now_ms = int(time.time() * 1000)
        adds = [AddAction(a["path"], a["size"], a["partition_values"], now_ms, True,
                          json.dumps({"numRecords": a["num_rows"]})) for a in found]
        if self._exists():
            table = deltalake.DeltaTable(self.path, storage_options=self.storage_options)
            table.create_write_transaction(adds, self.mode, schema, partition_by=self.partition_by or None)
        else:
            create_table_with_add_actions(self.path, deltalake.Schema.from_arrow(schema), adds, mode="error",
                                          partition_by=self.partition_by or None, name=self.name,
                                          description=self.description, storage_options=self.storage_options)


def _partitions(table: pa.Table, by: list[str]) -> Iterator[tuple[dict[str, str | None], pa.Table]]:
    """``(partition values as Delta strings, rows)`` for each combination of ``by``'s values."""
    if not by:
        yield {}, table
        return
    keys = table.select(by).group_by(by).aggregate([]).to_pylist()
    for key in keys:
        mask = None
        for column, value in key.items():
            test = pc.is_null(table[column]) if value is None else pc.equal(table[column], value)
            mask = test if mask is None else pc.and_(mask, test)
        yield {k: None if v is None else str(v) for k, v in key.items()}, table.filter(mask)
