"""Arrow columns as numpy: ``column_to_numpy``, and the ``raylite.pyobject`` column type.

Shared by ``block.py`` (batches, pandas frames, rows) and ``rows.py`` (lazy row views). A
column of arbitrary Python objects is stored pickled in a ``PythonObjectType`` column;
registering the type (on import) lets Arrow read such columns back in any process.
"""

from __future__ import annotations

import pickle

import numpy as np
import pyarrow as pa


class PythonObjectType(pa.ExtensionType):
    """Arrow column of arbitrary (picklable) Python objects, stored as bytes."""

    def __init__(self) -> None:
        super().__init__(pa.large_binary(), "raylite.pyobject")

    def __arrow_ext_serialize__(self) -> bytes:
        return b""

    @classmethod
    def __arrow_ext_deserialize__(cls, storage_type: pa.DataType, serialized: bytes) -> PythonObjectType:
        return cls()


try:  # registering twice (module reloaded in tests) raises; the first one stays valid
    pa.register_extension_type(PythonObjectType())
except pa.ArrowKeyError:
    pass


def is_tensor_type(t: pa.DataType) -> bool:
    return isinstance(t, pa.FixedShapeTensorType)


def column_to_numpy(col: pa.ChunkedArray | pa.Array, writable: bool = False) -> np.ndarray:
    """One Arrow column as one numpy array (tensor columns become n-d arrays)."""
    if isinstance(col, pa.ChunkedArray):
        col = col.combine_chunks() if col.num_chunks != 1 else col.chunk(0)
    t = col.type
    if is_tensor_type(t):
        arr = col.to_numpy_ndarray()
    elif isinstance(t, PythonObjectType):
        arr = np.empty(len(col), dtype=object)
        arr[:] = [None if v is None else pickle.loads(v) for v in col.storage.to_pylist()]
        return arr
    elif _is_list_type(t):
        stacked = _stack_uniform_lists(col)
        if stacked is not None:
            arr = stacked
        else:  # ragged or with nulls: one array per row, as an object array
            arr = np.empty(len(col), dtype=object)
            arr[:] = [None if v is None else np.asarray(v) for v in col.to_pylist()]
            return arr
    elif pa.types.is_struct(t) or pa.types.is_map(t):
        arr = np.empty(len(col), dtype=object)
        arr[:] = col.to_pylist()
        return arr
    elif pa.types.is_dictionary(t):
        return column_to_numpy(col.dictionary_decode(), writable)
    else:
        arr = col.to_numpy(zero_copy_only=False)
    if writable and not arr.flags.writeable:
        arr = arr.copy()
    return arr


def _is_primitive(t: pa.DataType) -> bool:
    return pa.types.is_integer(t) or pa.types.is_floating(t) or pa.types.is_boolean(t)


def _is_list_type(t: pa.DataType) -> bool:
    return pa.types.is_list(t) or pa.types.is_large_list(t) or pa.types.is_fixed_size_list(t)


def _stack_uniform_lists(col: pa.Array) -> np.ndarray | None:
    """A list column whose rows all have one shape -> one n-d array (rows on axis 0).

    Why: token ids or embeddings stored as Arrow lists (Parquet files, rows built
    from Python lists) should batch as one ``(rows, width)`` array, and so as one
    tensor, as Ray does. Nested lists stack level by level. Returns None for ragged
    rows, nulls, or non-numeric values (the caller keeps those as an object array).
    """
    shape = [len(col)]
    values: pa.Array = col
    while _is_list_type(values.type):
        if values.null_count:
            return None
        if pa.types.is_fixed_size_list(values.type):
            width = values.type.list_size
        else:
            if len(values) == 0:
                return None
            offsets = values.offsets.to_numpy()
            lengths = np.diff(offsets)
            width = int(lengths[0])
            if not (lengths == width).all():
                return None
        shape.append(width)
        values = values.flatten()  # honours slicing offsets
    if not _is_primitive(values.type) or values.null_count:
        return None
    return values.to_numpy(zero_copy_only=False).reshape(shape)
