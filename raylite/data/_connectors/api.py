"""The public entry points of the connectors: ``read_*`` functions and Dataset methods.

``raylite.data`` re-exports the readers; ``Dataset`` inherits ``ConnectorMethods``
(methods.py) for the writers and ``to_*`` conversions, so dataset.py stays about datasets.
Ray's per-read task options (``num_cpus``, ``memory`` ...) become the read tasks'
``ray_remote_args``.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from raylite.data._connectors.interop_from import (  # noqa: F401 - re-exported
    from_blocks,
    from_daft,
    from_dask,
    from_modin,
    from_tf,
)


def _task_args(ray_remote_args: dict[str, Any] | None, **options: Any) -> dict[str, Any]:
    args = dict(ray_remote_args or {})
    args.update({k: v for k, v in options.items() if v is not None})
    return args


def _read(datasource: Any, override_num_blocks: int | None, parallelism: int,
          ray_remote_args: dict[str, Any] | None, **options: Any) -> Any:
    from raylite.data.read_api import read_datasource

    return read_datasource(datasource, override_num_blocks=override_num_blocks,
                           parallelism=None if parallelism == -1 else parallelism,
                           ray_remote_args=_task_args(ray_remote_args, **options))


def read_lance(uri: str, *, version: int | str | None = None, columns: list[str] | None = None,
               filter: str | None = None, storage_options: dict[str, str] | None = None,  # noqa: A002
               scanner_options: dict[str, Any] | None = None, num_cpus: float | None = None,
               num_gpus: float | None = None, memory: float | None = None, concurrency: int | None = None,
               override_num_blocks: int | None = None, ray_remote_args: dict[str, Any] | None = None,
               **kwargs: Any) -> Any:
    """A Lance dataset; one read task per fragment, ``columns``/``filter`` pushed into the scan."""
    from raylite.data._connectors.lance import LanceDatasource

    source = LanceDatasource(uri, version=version, columns=columns, filter=filter,
                             storage_options=storage_options, scanner_options=scanner_options)
    return _read(source, override_num_blocks, -1, ray_remote_args, num_cpus=num_cpus,
                 num_gpus=num_gpus, memory=memory)


def read_sql(sql: str, connection_factory: Callable[[], Any], *, sql_params: Any = None,
             shard_keys: list[str] | None = None, shard_hash_fn: str = "MD5", parallelism: int = -1,
             num_cpus: float | None = None, num_gpus: float | None = None, memory: float | None = None,
             concurrency: int | None = None, override_num_blocks: int | None = None,
             ray_remote_args: dict[str, Any] | None = None, **kwargs: Any) -> Any:
    """The rows of ``sql`` from a DB API 2 database; parallel by hash of ``shard_keys``."""
    from raylite.data._connectors.sql import SQLDatasource

    source = SQLDatasource(sql, connection_factory, shard_keys=shard_keys, shard_hash_fn=shard_hash_fn,
                           sql_params=sql_params)
    return _read(source, override_num_blocks, parallelism, ray_remote_args, num_cpus=num_cpus,
                 num_gpus=num_gpus, memory=memory)


def read_webdataset(paths: str | list[str], *, filesystem: Any = None, parallelism: int = -1,
                    decoder: Any = True, fileselect: Any = None, filerename: Any = None,
                    suffixes: Any = None, include_paths: bool = False,
                    file_extensions: list[str] | None = None, num_cpus: float | None = None,
                    num_gpus: float | None = None, memory: float | None = None,
                    concurrency: int | None = None, override_num_blocks: int | None = None,
                    ray_remote_args: dict[str, Any] | None = None, **kwargs: Any) -> Any:
    """WebDataset tar shards; one row per sample (``__key__`` plus a field per extension)."""
    from raylite.data._connectors.webdataset import WebDatasetDatasource

    source = WebDatasetDatasource(paths, filesystem=filesystem, file_extensions=file_extensions,
                                  include_paths=include_paths, partitioning=None, decoder=decoder,
                                  fileselect=fileselect, filerename=filerename, suffixes=suffixes)
    return _read(source, override_num_blocks, parallelism, ray_remote_args, num_cpus=num_cpus,
                 num_gpus=num_gpus, memory=memory)


def read_tfrecords(paths: str | list[str], *, filesystem: Any = None, parallelism: int = -1,
                   include_paths: bool = False, tf_schema: Any = None,
                   file_extensions: list[str] | None = None, num_cpus: float | None = None,
                   num_gpus: float | None = None, memory: float | None = None,
                   concurrency: int | None = None, override_num_blocks: int | None = None,
                   ray_remote_args: dict[str, Any] | None = None, **kwargs: Any) -> Any:
    """TFRecord files of ``tf.train.Example``s (no TensorFlow needed)."""
    from raylite.data._connectors.tfrecords import TFRecordDatasource

    if tf_schema is not None:
        raise NotImplementedError("read_tfrecords(tf_schema=...) is not in raylite yet; column "
                                  "types are inferred from the Examples (int64/float32/binary).")
    source = TFRecordDatasource(paths, filesystem=filesystem, file_extensions=file_extensions,
                                include_paths=include_paths, partitioning=None)
    return _read(source, override_num_blocks, parallelism, ray_remote_args, num_cpus=num_cpus,
                 num_gpus=num_gpus, memory=memory)


def read_iceberg(*, table_identifier: str, row_filter: Any = None, parallelism: int = -1,
                 selected_fields: tuple[str, ...] = ("*",), snapshot_id: int | None = None,
                 scan_kwargs: dict[str, Any] | None = None, catalog_kwargs: dict[str, Any] | None = None,
                 num_cpus: float | None = None, num_gpus: float | None = None,
                 memory: float | None = None, override_num_blocks: int | None = None,
                 ray_remote_args: dict[str, Any] | None = None, **kwargs: Any) -> Any:
    """An Iceberg table through its catalog (``catalog_kwargs``: ``name`` plus the catalog's
    properties, e.g. ``{"name": "default", "type": "sql", "uri": "sqlite:///..."}``)."""
    from raylite.data._connectors.iceberg import IcebergDatasource

    source = IcebergDatasource(table_identifier, row_filter=row_filter, selected_fields=selected_fields,
                               snapshot_id=snapshot_id, scan_kwargs=scan_kwargs,
                               catalog_kwargs=catalog_kwargs)
    return _read(source, override_num_blocks, parallelism, ray_remote_args, num_cpus=num_cpus,
                 num_gpus=num_gpus, memory=memory)
