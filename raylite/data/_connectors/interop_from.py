"""Datasets from Dask, Modin and Daft dataframes, partition by partition.

Each Dask or Modin partition becomes one block (Ray's convention: the result is
materialized); Daft goes through Arrow.
"""

from __future__ import annotations

from typing import Any

from raylite.data._connectors import require


def from_dask(df: Any) -> Any:
    """A MaterializedDataset with one block per Dask partition."""
    dask = require("dask", "dask[dataframe]", "from_dask")
    from raylite.data.read_api import from_pandas

    partitions = dask.compute(*df.to_delayed())
    return from_pandas(list(partitions))


def from_modin(df: Any) -> Any:
    """A MaterializedDataset from a Modin DataFrame's row partitions."""
    require("modin", "modin", "from_modin")
    from raylite.data.read_api import from_pandas

    try:
        from modin.distributed.dataframe.pandas import unwrap_partitions

        parts = unwrap_partitions(df, axis=0)
        import modin.config

        if modin.config.Engine.get() == "Ray":
            import raylite

            return from_pandas(raylite.get(parts))
    except Exception:  # noqa: BLE001 - another engine: one pandas frame
        pass
    return from_pandas(df._to_pandas())


def from_daft(df: Any) -> Any:
    """A Dataset from a Daft DataFrame (through Arrow)."""
    require("daft", "daft", "from_daft")
    from raylite.data.read_api import from_arrow

    return from_arrow(df.to_arrow())


def from_tf(dataset: Any) -> Any:
    """A MaterializedDataset of a ``tf.data.Dataset``'s elements, read on the driver as Ray
    does: a dict element is a row, any other element the row ``{"item": element}``."""
    from raylite.data._internal.tf_batches import import_tf
    from raylite.data.read_api import from_items

    tf = import_tf()
    if not isinstance(dataset, tf.data.Dataset):
        raise TypeError(f"from_tf expects a tf.data.Dataset, got {type(dataset).__name__}.")
    return from_items(list(dataset.as_numpy_iterator()))


def from_blocks(blocks: list[Any]) -> Any:
    """A MaterializedDataset with one block per given pyarrow Table or pandas DataFrame."""
    import pyarrow as pa

    from raylite.data.read_api import from_arrow

    tables = []
    for i, block in enumerate(blocks):
        if isinstance(block, pa.Table):
            tables.append(block)
        elif type(block).__name__ == "DataFrame" and hasattr(block, "to_dict"):
            tables.append(pa.Table.from_pandas(block, preserve_index=False))
        else:
            raise TypeError(f"from_blocks: block {i} is a {type(block).__name__}; give pyarrow Tables or "
                            "pandas DataFrames.")
    return from_arrow(tables)
