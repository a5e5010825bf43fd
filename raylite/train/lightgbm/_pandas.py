"""``normalize_pandas_for_lightgbm``: Arrow-backed pandas columns to NumPy-nullable ones."""

from __future__ import annotations

from typing import Any


def normalize_pandas_for_lightgbm(df: Any) -> Any:
    """LightGBM rejects Arrow-backed dtypes (``int64[pyarrow]``); map the numeric and
    boolean ones to pandas' nullable NumPy dtypes, by dtype alone (no value scan), and
    leave every other column's buffers as they are."""
    import pandas as pd
    import pyarrow as pa

    mapping: dict[Any, str] = {}
    for column, dtype in df.dtypes.items():
        if not isinstance(dtype, pd.ArrowDtype):
            continue
        arrow = dtype.pyarrow_dtype
        if pa.types.is_signed_integer(arrow):
            mapping[column] = f"Int{arrow.bit_width}"
        elif pa.types.is_unsigned_integer(arrow):
            mapping[column] = f"UInt{arrow.bit_width}"
        elif pa.types.is_floating(arrow):
            mapping[column] = f"Float{arrow.bit_width}"
        elif pa.types.is_boolean(arrow):
            mapping[column] = "boolean"
    return df.astype(mapping, copy=False) if mapping else df
