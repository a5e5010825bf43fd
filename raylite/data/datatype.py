"""DataType (Ray's ``ray.data.datatype``): the type of a column, for ``cast``, ``udf`` and schemas.

A DataType wraps an Arrow type (``DataType.int64()``, ``DataType.list(DataType.string())``,
``DataType.from_arrow(pa.float32())``), a NumPy dtype (``DataType.from_numpy("float32")``) or a
Python type (``DataType(object)``, for values Arrow cannot hold).
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pyarrow as pa

__all__ = ["DataType"]


class DataType:
    """One column type: Arrow, NumPy or Python (see the module docstring)."""

    def __init__(self, physical: Any) -> None:
        self._physical = physical

    # ---- constructors
    @classmethod
    def from_arrow(cls, arrow_type: pa.DataType) -> DataType:
        return cls(arrow_type)

    @classmethod
    def from_numpy(cls, dtype: Any) -> DataType:
        return cls(np.dtype(dtype))

    @classmethod
    def from_dtype(cls, dtype: Any) -> DataType:
        """Any of: a DataType, a pyarrow type, a NumPy dtype (or its name), a Python type."""
        if isinstance(dtype, DataType):
            return dtype
        if isinstance(dtype, pa.DataType):
            return cls(dtype)
        if isinstance(dtype, type) and not issubclass(dtype, np.generic):
            return cls(dtype)
        return cls(np.dtype(dtype))

    @classmethod
    def infer_dtype(cls, value: Any) -> DataType:
        """The type Arrow gives `value` (a Python object when Arrow cannot hold it)."""
        try:
            return cls(pa.scalar(value).type)
        except (pa.ArrowInvalid, pa.ArrowTypeError, TypeError):
            return cls(type(value))

    int8 = classmethod(lambda cls: cls(pa.int8()))
    int16 = classmethod(lambda cls: cls(pa.int16()))
    int32 = classmethod(lambda cls: cls(pa.int32()))
    int64 = classmethod(lambda cls: cls(pa.int64()))
    uint8 = classmethod(lambda cls: cls(pa.uint8()))
    uint16 = classmethod(lambda cls: cls(pa.uint16()))
    uint32 = classmethod(lambda cls: cls(pa.uint32()))
    uint64 = classmethod(lambda cls: cls(pa.uint64()))
    float32 = classmethod(lambda cls: cls(pa.float32()))
    float64 = classmethod(lambda cls: cls(pa.float64()))
    string = classmethod(lambda cls: cls(pa.string()))
    bool = classmethod(lambda cls: cls(pa.bool_()))
    binary = classmethod(lambda cls: cls(pa.binary()))

    @classmethod
    def list(cls, value_type: DataType) -> DataType:
        return cls(pa.list_(cls.from_dtype(value_type).to_arrow_dtype()))

    @classmethod
    def large_list(cls, value_type: DataType) -> DataType:
        return cls(pa.large_list(cls.from_dtype(value_type).to_arrow_dtype()))

    @classmethod
    def fixed_size_list(cls, value_type: DataType, list_size: int) -> DataType:
        return cls(pa.list_(cls.from_dtype(value_type).to_arrow_dtype(), list_size))

    @classmethod
    def struct(cls, fields: list[tuple[str, DataType]]) -> DataType:
        return cls(pa.struct([pa.field(name, cls.from_dtype(t).to_arrow_dtype()) for name, t in fields]))

    @classmethod
    def map(cls, key_type: DataType, value_type: DataType) -> DataType:
        return cls(pa.map_(cls.from_dtype(key_type).to_arrow_dtype(), cls.from_dtype(value_type).to_arrow_dtype()))

    @classmethod
    def temporal(cls, temporal_type: str = "timestamp", unit: str = "us", tz: str | None = None) -> DataType:
        kinds = {"timestamp": lambda: pa.timestamp(unit, tz), "date32": pa.date32, "date64": pa.date64,
                 "time32": lambda: pa.time32(unit), "time64": lambda: pa.time64(unit),
                 "duration": lambda: pa.duration(unit)}
        if temporal_type not in kinds:
            raise ValueError(f"DataType.temporal({temporal_type!r}): use one of {sorted(kinds)}")
        return cls(kinds[temporal_type]())

    # ---- conversions
    def is_arrow_type(self) -> bool:
        return isinstance(self._physical, pa.DataType)

    def is_numpy_type(self) -> bool:
        return isinstance(self._physical, np.dtype)

    def is_python_type(self) -> bool:
        return isinstance(self._physical, type)

    def to_arrow_dtype(self, values: Any = None) -> pa.DataType:
        if self.is_arrow_type():
            return self._physical
        if self.is_numpy_type():
            return pa.from_numpy_dtype(self._physical)
        if values is not None:
            return pa.array(values).type
        raise TypeError(f"{self!r} has no Arrow equivalent")

    def to_numpy_dtype(self) -> np.dtype:
        if self.is_numpy_type():
            return self._physical
        if self.is_arrow_type():
            try:
                return np.dtype(self._physical.to_pandas_dtype())
            except (NotImplementedError, TypeError):
                return np.dtype(object)
        return np.dtype(object)

    def to_python_type(self) -> type:
        if self.is_python_type():
            return self._physical
        raise TypeError(f"{self!r} is not a Python type")

    # ---- predicates (Arrow types; False for NumPy and Python types they do not match)
    def _arrow(self) -> pa.DataType | None:
        if self.is_arrow_type():
            return self._physical
        if self.is_numpy_type():
            try:
                return pa.from_numpy_dtype(self._physical)
            except (pa.ArrowNotImplementedError, TypeError):
                return None
        return None

    def _check(self, predicate: Any) -> bool:
        arrow = self._arrow()
        return bool(arrow is not None and predicate(arrow))

    def is_integer_type(self) -> bool:
        return self._check(pa.types.is_integer)

    def is_floating_type(self) -> bool:
        return self._check(pa.types.is_floating)

    def is_numerical_type(self) -> bool:
        return self._check(lambda t: pa.types.is_integer(t) or pa.types.is_floating(t) or pa.types.is_decimal(t))

    def is_string_type(self) -> bool:
        return self._check(lambda t: pa.types.is_string(t) or pa.types.is_large_string(t))

    def is_binary_type(self) -> bool:
        return self._check(lambda t: pa.types.is_binary(t) or pa.types.is_large_binary(t))

    def is_boolean_type(self) -> bool:
        return self._check(pa.types.is_boolean)

    def is_list_type(self) -> bool:
        return self._check(lambda t: pa.types.is_list(t) or pa.types.is_large_list(t)
                           or pa.types.is_fixed_size_list(t))

    def is_struct_type(self) -> bool:
        return self._check(pa.types.is_struct)

    def is_map_type(self) -> bool:
        return self._check(pa.types.is_map)

    def is_nested_type(self) -> bool:
        return self._check(pa.types.is_nested)

    def is_temporal_type(self) -> bool:
        return self._check(pa.types.is_temporal)

    def is_null_type(self) -> bool:
        return self._check(pa.types.is_null)

    def is_uint64_type(self) -> bool:
        return self._check(pa.types.is_uint64)

    def is_of(self, category: str) -> bool:
        """``is_of("integer")``, ``is_of("string")``, ...: the matching ``is_<category>_type``."""
        check = getattr(self, f"is_{category}_type", None)
        if check is None:
            raise ValueError(f"DataType.is_of({category!r}): unknown category")
        return check()

    def __eq__(self, other: object) -> bool:
        return isinstance(other, DataType) and self._physical == other._physical

    def __hash__(self) -> int:
        return hash(str(self._physical))

    def __repr__(self) -> str:
        return f"DataType({self._physical})"
