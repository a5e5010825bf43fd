"""Datasets to Dask, Modin and Daft dataframes, block by block.

The dataset's blocks become the other engine's pandas partitions; Daft goes through
Arrow.
"""

from __future__ import annotations

from typing import Any

from raylite.data._connectors import require


def to_dask(ds: Any, meta: Any = None, verify_meta: bool = True) -> Any:
    """A Dask DataFrame with one partition per block of ``ds``."""
    require("dask.dataframe", "dask[dataframe]", "Dataset.to_dask")
    import dask
    import dask.dataframe as dd

    frames = list(_pandas_blocks(ds))
    if meta is None and frames:
        meta = frames[0].iloc[:0]
    return dd.from_delayed([dask.delayed(f) for f in frames], meta=meta, verify_meta=verify_meta)


def to_modin(ds: Any) -> Any:
    """A Modin DataFrame holding ``ds``'s rows."""
    mpd = require("modin.pandas", "modin", "Dataset.to_modin")
    import pandas as pd

    frames = list(_pandas_blocks(ds))
    whole = pd.concat(frames, ignore_index=True) if frames else pd.DataFrame()
    return mpd.DataFrame(whole)


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
