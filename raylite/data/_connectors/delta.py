"""``read_delta``: a Delta Lake table's current (or ``version=``) data files, read as Parquet.

The ``deltalake`` package reads the transaction log and lists the live data files;
they are then planned like any Parquet read (column projection, one task per file
or row-group split), so a Delta read streams and is budgeted like ``read_parquet``.
Partition values come from the ``col=value`` directories (as strings, as in a hive
Parquet read).
"""

from __future__ import annotations

from typing import Any

from raylite.data._connectors import require


def read_delta(path: str | list[str], version: int | None = None, *,
               storage_options: dict[str, Any] | None = None, filesystem: Any = None,
               columns: list[str] | None = None, override_num_blocks: int | None = None,
               parallelism: int = -1, ray_remote_args: dict[str, Any] | None = None,
               **kwargs: Any) -> Any:
    """Rows of the Delta table at ``path`` (one path, or a list whose first is used)."""
    deltalake = require("deltalake", "deltalake", "read_delta")
    from raylite.data.read_api import read_parquet

    where = path[0] if isinstance(path, list) else path
    try:
        table = deltalake.DeltaTable(where, version=version, storage_options=storage_options)
    except Exception as e:  # noqa: BLE001 - deltalake raises TableNotFoundError and others
        raise ValueError(f"read_delta({where!r}): no Delta table there ({type(e).__name__}: {e}).") from e
    files = table.file_uris()
    if not files:
        from raylite.data.read_api import from_arrow

        return from_arrow(table.to_pyarrow_table(columns=columns))
    options = {k: v for k, v in kwargs.items() if k not in (
        "num_cpus", "num_gpus", "memory", "concurrency", "shuffle", "include_paths", "catalog")}
    return read_parquet(files, filesystem=filesystem, columns=columns,
                        override_num_blocks=override_num_blocks,
                        parallelism=None if parallelism == -1 else parallelism,
                        ray_remote_args=ray_remote_args, **options)

