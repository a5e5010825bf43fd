"""An empty multi-dimensional array or an empty DataFrame can be put, passed to a task and
returned from one, inline (small) and through the shared-memory store (large)."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pyarrow as pa
import pytest

import raylite

VALUES = {
    "2d": lambda: np.zeros((0, 3)),
    "3d_int16": lambda: np.zeros((2, 0, 4), dtype=np.int16),
    "3d_uint8": lambda: np.zeros((4, 5, 0), dtype=np.uint8),
    "empty_non_contiguous": lambda: np.zeros((0, 6))[:, ::2],
    "non_contiguous": lambda: np.arange(48.0).reshape(6, 8)[::2, 1::3],
    "dataframe": lambda: pd.DataFrame({"a": pd.Series([], dtype="float64"), "b": pd.Series([], dtype="int32")}),
    "arrow_table": lambda: pa.table({"a": pa.array([], pa.float32())}),
}
# the large form rides with 1 MiB of data, so it goes through the node's shared-memory store
SIZES = {"inline": lambda v: v, "store": lambda v: (v, np.ones(1 << 17))}


def _check(expected, got) -> None:
    if isinstance(expected, tuple):
        _check(expected[0], got[0])
        assert np.array_equal(expected[1], got[1])
    elif isinstance(expected, np.ndarray):
        assert (got.dtype, got.shape) == (expected.dtype, expected.shape)
        assert np.array_equal(got, expected)
    elif isinstance(expected, pd.DataFrame):
        assert list(got.dtypes) == list(expected.dtypes) and got.equals(expected)
    else:
        assert got.equals(expected)


@raylite.remote
def echo(x):
    return x


@raylite.remote
def build(name: str, size: str):
    return SIZES[size](VALUES[name]())


@pytest.mark.parametrize("size", list(SIZES))
@pytest.mark.parametrize("name", list(VALUES))
def test_put_arg_and_return(cluster, name, size):
    value = SIZES[size](VALUES[name]())
    _check(value, raylite.get(raylite.put(value)))
    _check(value, raylite.get(echo.remote(value)))
    _check(value, raylite.get(build.remote(name, size)))
    _check(value, raylite.get(echo.remote(raylite.put(value))))
