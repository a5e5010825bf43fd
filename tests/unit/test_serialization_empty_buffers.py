"""Values holding a zero-size multi-dimensional buffer serialize on every path.

Python refuses `memoryview.cast("B")` on a view with a 0 in its shape, so flattening buffers
that way made an empty 2-D array or an empty DataFrame unserializable. Each value here is
round-tripped through both payload forms a value can take: inline bytes inside a message
(`to_inline` / `from_inline`) and a shared-memory object file (`write_file` / `read_file`).
"""

from __future__ import annotations

import numpy as np
import pandas as pd
import pyarrow as pa
import pytest

from raylite._core import serialization as ser

EMPTY_VALUES = {
    "2d_float64": np.zeros((0, 3)),
    "2d_int8_cols": np.zeros((5, 0), dtype=np.int8),
    "3d_int16": np.zeros((2, 0, 4), dtype=np.int16),
    "3d_complex": np.zeros((0, 2, 2), dtype=np.complex128),
    "2d_bool_fortran": np.asfortranarray(np.zeros((0, 7), dtype=bool)),
    "2d_datetime": np.zeros((0, 2), dtype="datetime64[ns]"),
    "empty_non_contiguous": np.zeros((0, 6))[:, ::2],
    "empty_transposed": np.zeros((0, 3), dtype=np.float32).T,
    "dataframe_typed_cols": pd.DataFrame({"a": pd.Series([], dtype="float64"),
                                          "b": pd.Series([], dtype="int64")}),
    "dataframe_columns_only": pd.DataFrame(columns=["x", "y"], dtype="float32"),
    "arrow_table": pa.table({"a": pa.array([], pa.int64()), "s": pa.array([], pa.string())}),
}
OTHER_VALUES = {
    "non_contiguous": np.arange(48, dtype=np.float64).reshape(6, 8)[::2, 1::3],
    "fortran": np.asfortranarray(np.arange(12, dtype=np.int32).reshape(3, 4)),
}


def _equal(a, b) -> bool:
    if isinstance(a, np.ndarray):
        return a.dtype == b.dtype and a.shape == b.shape and np.array_equal(a, b)
    if isinstance(a, pd.DataFrame):
        return list(a.columns) == list(b.columns) and list(a.dtypes) == list(b.dtypes) and a.equals(b)
    return a.equals(b)


@pytest.mark.parametrize("name", [*EMPTY_VALUES, *OTHER_VALUES])
def test_inline_round_trip(name):
    value = {**EMPTY_VALUES, **OTHER_VALUES}[name]
    payload = ser.serialize(value).to_inline()
    assert all(isinstance(b, bytes) for b in payload[1])
    assert _equal(value, ser.from_inline(payload))


@pytest.mark.parametrize("name", [*EMPTY_VALUES, *OTHER_VALUES])
def test_shared_memory_file_round_trip(name, tmp_path):
    value = {**EMPTY_VALUES, **OTHER_VALUES}[name]
    # beside a large buffer, as a store-sized value holding an empty one would be
    so = ser.serialize((value, np.arange(40_000)))
    path = str(tmp_path / "obj")
    assert ser.write_file(so, path) == ser.stored_size(so)
    kind, (back, filler) = ser.read_file(path)
    assert kind == ser.KIND_VALUE
    assert _equal(value, back) and filler.sum() == np.arange(40_000).sum()
