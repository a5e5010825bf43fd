"""TensorFlow views of a dataset: ``iter_tf_batches`` and ``to_tf`` (Ray's names).

Both ride on ``iter_batches(batch_format="numpy")``, so they stream, prefetch and
shuffle locally exactly as the numpy batches do; only the last step differs.
``to_tf`` wraps that stream in ``tf.data.Dataset.from_generator``, which needs each
element's ``TypeSpec`` up front: it is read from the dataset's schema (one scalar per
row gives shape ``(None,)``, a fixed-shape tensor column ``(None, *shape)``, strings
``tf.string``) unless the caller passes ``feature_type_spec``/``label_type_spec``.
TensorFlow is imported here, on first use, never by ``import raylite.data``.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

import numpy as np
import pyarrow as pa


def import_tf() -> Any:
    try:
        import tensorflow as tf
    except ModuleNotFoundError as e:
        raise ModuleNotFoundError(
            "iter_tf_batches()/to_tf() need TensorFlow, which is not installed: pip install tensorflow "
            "(or pip install tensorflow-cpu on a machine without GPUs)."
        ) from e
    return tf


def _dtype_for(dtypes: Any, name: str) -> Any:
    return dtypes.get(name) if isinstance(dtypes, dict) else dtypes


def numpy_batch_to_tf(batch: dict[str, np.ndarray], dtypes: Any = None) -> dict[str, Any]:
    """Each column as a ``tf.Tensor`` (cast to ``dtypes``, one dtype or a dict by column)."""
    tf = import_tf()
    out: dict[str, Any] = {}
    for name, arr in batch.items():
        try:
            if isinstance(arr, np.ndarray) and arr.dtype == object:
                arr = arr.astype(str) if all(isinstance(v, str) for v in arr) else np.stack(list(arr))
            out[name] = tf.convert_to_tensor(arr, dtype=_dtype_for(dtypes, name))
        except (ValueError, TypeError) as e:
            raise ValueError(f"Column {name!r} cannot become one tf.Tensor ({e}); rows of different "
                             "shapes (ragged lists) need map_batches to pad them, or drop the column "
                             "with select_columns.") from e
    return out


def _columns(value: str | list[str] | None, arg: str, known: list[str]) -> list[str]:
    names = [] if value is None else [value] if isinstance(value, str) else list(value)
    missing = [n for n in names if n not in known]
    if missing:
        raise ValueError(f"to_tf({arg}=...) names {missing}, which the dataset does not have; its "
                         f"columns are {known}.")
    return names


def _spec_for_field(field: pa.Field) -> Any:
    tf = import_tf()
    typ = field.type
    if isinstance(typ, pa.FixedShapeTensorType):
        return tf.TensorSpec((None, *typ.shape), tf.as_dtype(typ.value_type.to_pandas_dtype()))
    if pa.types.is_string(typ) or pa.types.is_large_string(typ) or pa.types.is_binary(typ):
        return tf.TensorSpec((None,), tf.string)
    if pa.types.is_list(typ) or pa.types.is_large_list(typ) or pa.types.is_fixed_size_list(typ):
        inner = typ.value_type
        size = typ.list_size if pa.types.is_fixed_size_list(typ) else None
        dtype = tf.string if pa.types.is_string(inner) else tf.as_dtype(inner.to_pandas_dtype())
        return tf.TensorSpec((None, size), dtype)
    try:
        return tf.TensorSpec((None,), tf.as_dtype(np.dtype(typ.to_pandas_dtype())))
    except (NotImplementedError, TypeError) as e:
        raise ValueError(f"to_tf: column {field.name!r} has type {typ}, which has no TensorFlow "
                         f"dtype; pass feature_type_spec/label_type_spec for it.") from e


def _spec(schema: pa.Schema, names: list[str], single: bool, given: Any) -> Any:
    if given is not None:
        return given
    specs = {n: _spec_for_field(schema.field(n)) for n in names}
    return specs[names[0]] if single else specs


def _pick(batch: dict[str, Any], names: list[str], single: bool) -> Any:
    return batch[names[0]] if single else {n: batch[n] for n in names}


def to_tf(iter_numpy_batches: Callable[[], Any], schema: pa.Schema | None, feature_columns: str | list[str],
          label_columns: str | list[str], additional_columns: str | list[str] | None,
          feature_type_spec: Any, label_type_spec: Any, additional_type_spec: Any) -> Any:
    """A ``tf.data.Dataset`` of ``(features, labels[, additional])``; a column named by a string
    gives one tensor, a list of names a dict of tensors, as in Ray."""
    tf = import_tf()
    if schema is None:
        raise ValueError("to_tf() needs the dataset's schema to build TypeSpecs, and this dataset has "
                         "none (is it empty?); pass feature_type_spec and label_type_spec.")
    known = list(schema.names)
    features = _columns(feature_columns, "feature_columns", known)
    labels = _columns(label_columns, "label_columns", known)
    extra = _columns(additional_columns, "additional_columns", known)
    if not features or not labels:
        raise ValueError("to_tf() needs at least one feature column and one label column.")
    shapes = [(features, isinstance(feature_columns, str), feature_type_spec),
              (labels, isinstance(label_columns, str), label_type_spec)]
    if extra:
        shapes.append((extra, isinstance(additional_columns, str), additional_type_spec))
    signature = tuple(_spec(schema, names, single, given) for names, single, given in shapes)

    def generate() -> Iterator[tuple[Any, ...]]:
        for batch in iter_numpy_batches():
            tensors = numpy_batch_to_tf(batch)
            yield tuple(_pick(tensors, names, single) for names, single, _ in shapes)

    dataset = tf.data.Dataset.from_generator(generate, output_signature=signature)
    options = tf.data.Options()  # the rows are this consumer's already: never shard them again
    options.experimental_distribute.auto_shard_policy = tf.data.experimental.AutoShardPolicy.OFF
    return dataset.with_options(options)
