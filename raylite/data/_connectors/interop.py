"""Dataset <-> Dask, Modin and Daft dataframes, partition by partition.

``from_dask``/``from_modin`` turn each partition into one block (Ray's convention:
the result is materialized); ``to_dask``/``to_modin`` build the other engine's frame
from the dataset's blocks as pandas partitions; Daft goes through Arrow.
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


def to_dask(ds: Any, meta: Any = None, verify_meta: bool = True) -> Any:
    """A Dask DataFrame with one partition per block of ``ds``."""
    require("dask.dataframe", "dask[dataframe]", "Dataset.to_dask")
    import dask
    import dask.dataframe as dd

    frames = list(_pandas_blocks(ds))
    if meta is None and frames:
        meta = frames[0].iloc[:0]
    return dd.from_delayed([dask.delayed(f) for f in frames], meta=meta, verify_meta=verify_meta)


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


def to_modin(ds: Any) -> Any:
    """A Modin DataFrame holding ``ds``'s rows."""
    mpd = require("modin.pandas", "modin", "Dataset.to_modin")
    import pandas as pd

    frames = list(_pandas_blocks(ds))
    whole = pd.concat(frames, ignore_index=True) if frames else pd.DataFrame()
    return mpd.DataFrame(whole)


def from_daft(df: Any) -> Any:
    """A Dataset from a Daft DataFrame (through Arrow)."""
    require("daft", "daft", "from_daft")
    from raylite.data.read_api import from_arrow

    return from_arrow(df.to_arrow())


def to_daft(ds: Any) -> Any:
    """A Daft DataFrame holding ``ds``'s rows."""
    daft = require("daft", "daft", "Dataset.to_daft")
    import pyarrow as pa

    from raylite.data.block import concat_blocks

    tables = list(ds._iter_blocks())
    table = concat_blocks(tables) if tables else pa.table({})
    return daft.from_arrow(table)


def _pandas_blocks(ds: Any) -> Any:
    import pandas as pd

    from raylite.data.block import table_to_pandas

    for block in ds._iter_blocks():
        yield pd.DataFrame(table_to_pandas(block))
