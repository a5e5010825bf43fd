"""Dataset's connector writers and ``to_*`` conversions, mixed into ``Dataset``.

Kept apart from the readers (api.py), which import ``read_api`` and so ``dataset``:
this module imports only the sinks and the ``to_*`` helpers, never ``dataset``.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any


class ConnectorMethods:
    """Dataset's writers and conversions for the connectors (mixed into Dataset, whose
    ``write_datasink`` runs each sink)."""

    write_datasink: Callable[..., None]

    def write_lance(self, path: str, *, schema: Any = None, mode: Any = "create",
                    min_rows_per_file: int = 1024 * 1024, max_rows_per_file: int = 64 * 1024 * 1024,
                    data_storage_version: str | None = None, storage_options: dict[str, Any] | None = None,
                    ray_remote_args: dict[str, Any] | None = None, concurrency: int | None = None,
                    **kwargs: Any) -> None:
        """Write as a Lance dataset: each task writes fragments, one commit at the end."""
        from raylite.data._connectors.lance import LanceDatasink

        self.write_datasink(LanceDatasink(path, schema=schema, mode=mode, min_rows_per_file=min_rows_per_file,
                                          max_rows_per_file=max_rows_per_file,
                                          data_storage_version=data_storage_version,
                                          storage_options=storage_options),
                            ray_remote_args=ray_remote_args, concurrency=concurrency)

    def write_sql(self, sql: str, connection_factory: Callable[[], Any],
                  ray_remote_args: dict[str, Any] | None = None, concurrency: int | None = None) -> None:
        """``INSERT`` every row with ``sql`` (one placeholder per column), a connection per task."""
        from raylite.data._connectors.sql import SQLDatasink

        self.write_datasink(SQLDatasink(sql, connection_factory), ray_remote_args=ray_remote_args,
                            concurrency=concurrency)

    def write_webdataset(self, path: str, *, filesystem: Any = None, try_create_dir: bool = True,
                         encoder: Any = True, ray_remote_args: dict[str, Any] | None = None,
                         concurrency: int | None = None, **kwargs: Any) -> None:
        """One WebDataset tar shard per write task; each column is a member extension."""
        from raylite.data._connectors.webdataset import WebDatasetDatasink

        self.write_datasink(WebDatasetDatasink(path, filesystem=filesystem, try_create_dir=try_create_dir,
                                               encoder=encoder),
                            ray_remote_args=ray_remote_args, concurrency=concurrency)

    def write_tfrecords(self, path: str, *, tf_schema: Any = None, filesystem: Any = None,
                        try_create_dir: bool = True, ray_remote_args: dict[str, Any] | None = None,
                        concurrency: int | None = None, **kwargs: Any) -> None:
        """One TFRecord file of tf.train.Examples per write task (no TensorFlow needed)."""
        from raylite.data._connectors.tfrecords import TFRecordDatasink

        if tf_schema is not None:
            raise NotImplementedError("write_tfrecords(tf_schema=...) is not in raylite yet.")
        self.write_datasink(TFRecordDatasink(path, filesystem=filesystem, try_create_dir=try_create_dir),
                            ray_remote_args=ray_remote_args, concurrency=concurrency)

    def write_images(self, path: str, column: str, file_format: str = "png", *, filesystem: Any = None,
                     try_create_dir: bool = True, ray_remote_args: dict[str, Any] | None = None,
                     concurrency: int | None = None, **kwargs: Any) -> None:
        """One image file per row from ``column`` (uint8 HxW or HxWxC arrays)."""
        from raylite.data._connectors.images import ImageDatasink

        self.write_datasink(ImageDatasink(path, column, file_format, filesystem=filesystem,
                                          try_create_dir=try_create_dir),
                            ray_remote_args=ray_remote_args, concurrency=concurrency)

    def write_iceberg(self, table_identifier: str, catalog_kwargs: dict[str, Any] | None = None,
                      catalog: Any = None, snapshot_properties: dict[str, str] | None = None,
                      mode: Any = "append", overwrite_filter: Any = None,
                      ray_remote_args: dict[str, Any] | None = None, concurrency: int | None = None,
                      **kwargs: Any) -> None:
        """Append (or overwrite) the rows into an existing Iceberg table, in one commit."""
        from raylite.data._connectors.iceberg import IcebergDatasink

        if catalog is not None:
            raise NotImplementedError("write_iceberg(catalog=...) is not in raylite yet; pass "
                                      "catalog_kwargs= instead.")
        self.write_datasink(IcebergDatasink(table_identifier, catalog_kwargs=catalog_kwargs,
                                            snapshot_properties=snapshot_properties, mode=mode,
                                            overwrite_filter=overwrite_filter),
                            ray_remote_args=ray_remote_args, concurrency=concurrency)

    def write_delta(self, path: str, *, catalog: Any = None, mode: Any = "append",
                    partition_by: list[str] | None = None, storage_options: dict[str, str] | None = None,
                    schema_mode: str = "merge", filesystem: Any = None, name: str | None = None,
                    description: str | None = None, ray_remote_args: dict[str, Any] | None = None,
                    concurrency: int | None = None) -> None:
        """Write a Delta Lake table (new or existing): Parquet files from every task, one commit."""
        from raylite.data._connectors.delta_sink import DeltaDatasink

        if catalog is not None:
            raise NotImplementedError("write_delta(catalog=...) is not in raylite yet; pass the table's path.")
        self.write_datasink(DeltaDatasink(path, mode=mode, partition_by=partition_by,
                                          storage_options=storage_options, schema_mode=schema_mode,
                                          filesystem=filesystem, name=name, description=description),
                            ray_remote_args=ray_remote_args, concurrency=concurrency)

    def to_dask(self, meta: Any = None, verify_meta: bool = True) -> Any:
        """A Dask DataFrame, one partition per block."""
        from raylite.data._connectors.interop_to import to_dask

        return to_dask(self, meta, verify_meta)

    def to_modin(self) -> Any:
        """A Modin DataFrame of the rows."""
        from raylite.data._connectors.interop_to import to_modin

        return to_modin(self)

    def to_daft(self) -> Any:
        """A Daft DataFrame of the rows."""
        from raylite.data._connectors.interop_to import to_daft

        return to_daft(self)
