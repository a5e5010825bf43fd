"""The ``Preprocessor`` base: ``fit`` computes statistics once, ``transform`` applies them lazily.

Why a base class: every preprocessor is "aggregate over the dataset, then a pure
per-batch function of those statistics". ``fit`` runs the aggregation (a Data job)
and keeps its result in ``stats_``; ``transform(ds)`` appends one ``map_batches``
with the per-batch function, and ``transform_batch`` runs the same function on one
in-memory batch (serving), in whatever format it came in.
"""

from __future__ import annotations

import enum
from typing import Any

import numpy as np


class PreprocessorNotFittedException(RuntimeError):
    """``transform`` was called on a fittable preprocessor before ``fit``."""


class Preprocessor:
    """Subclasses implement ``_fit(ds) -> stats dict`` (if fittable) and ``_transform_pandas(df)``."""

    class FitStatus(str, enum.Enum):
        NOT_FITTABLE = "NOT_FITTABLE"
        NOT_FITTED = "NOT_FITTED"
        PARTIALLY_FITTED = "PARTIALLY_FITTED"
        FITTED = "FITTED"

    _is_fittable = True

    def __init__(self) -> None:
        self.stats_: dict[str, Any] | None = None

    # ---- status
    def fit_status(self) -> Preprocessor.FitStatus:
        if not self._is_fittable:
            return Preprocessor.FitStatus.NOT_FITTABLE
        return Preprocessor.FitStatus.FITTED if self.stats_ is not None else Preprocessor.FitStatus.NOT_FITTED

    def _check_fitted(self) -> None:
        status = self.fit_status()
        if status in (Preprocessor.FitStatus.NOT_FITTED, Preprocessor.FitStatus.PARTIALLY_FITTED):
            raise PreprocessorNotFittedException(
                f"{type(self).__name__} must be fitted before transform: call fit(ds) or fit_transform(ds) first")

    # ---- the public API
    def fit(self, ds: Any) -> Preprocessor:
        """Compute the statistics on ``ds`` (runs a Data job); returns ``self``."""
        if self._is_fittable:
            self.stats_ = self._fit(ds)
        return self

    def fit_transform(self, ds: Any, **transform_kwargs: Any) -> Any:
        return self.fit(ds).transform(ds, **transform_kwargs)

    def transform(self, ds: Any, *, batch_size: int | None | str = "default", num_cpus: float | None = None,
                  memory: float | None = None, concurrency: int | None = None) -> Any:
        """``ds`` with the transform appended (lazy)."""
        self._check_fitted()
        fn = self._transform_pandas
        return ds.map_batches(lambda df: fn(df), batch_format="pandas", batch_size=batch_size,
                              num_cpus=num_cpus, memory=memory, concurrency=concurrency)

    def transform_batch(self, data: Any) -> Any:
        """Transform one batch; a pandas DataFrame, dict of numpy arrays or Arrow table comes back as such."""
        import pandas as pd
        import pyarrow as pa

        from raylite.data.block import batch_to_block, table_to_batch, table_to_pandas

        self._check_fitted()
        if isinstance(data, pd.DataFrame):
            return self._transform_pandas(data.copy())
        if isinstance(data, (dict, pa.Table)):
            table = data if isinstance(data, pa.Table) else batch_to_block(data)
            out = batch_to_block(self._transform_pandas(table_to_pandas(table)))
            return out if isinstance(data, pa.Table) else table_to_batch(out, "numpy")
        raise TypeError(f"transform_batch takes a pandas DataFrame, a dict of numpy arrays or a pyarrow Table, "
                        f"got {type(data).__name__}")

    # ---- for subclasses
    def _fit(self, ds: Any) -> dict[str, Any]:
        raise NotImplementedError

    def _transform_pandas(self, df: Any) -> Any:
        raise NotImplementedError

    def __repr__(self) -> str:
        fields = {k.lstrip("_"): v for k, v in self.__dict__.items() if k != "stats_"}
        return f"{type(self).__name__}({', '.join(f'{k}={v!r}' for k, v in fields.items())})"


def output_columns_for(columns: list[str], output_columns: list[str] | None) -> list[str]:
    """``output_columns`` defaults to ``columns`` (in place) and must match its length."""
    if isinstance(columns, str):
        raise TypeError(f"columns must be a list of column names, got the string {columns!r}; use [{columns!r}]")
    if output_columns is None:
        return list(columns)
    if len(output_columns) != len(columns):
        raise ValueError(f"output_columns has {len(output_columns)} names for {len(columns)} columns {columns}")
    return list(output_columns)


def check_columns(df: Any, columns: list[str], who: str) -> None:
    missing = [c for c in columns if c not in df.columns]
    if missing:
        raise ValueError(f"{who}: column(s) {missing} not in the batch's columns {list(df.columns)}")


def as_float(values: Any) -> np.ndarray:
    return np.asarray(values, dtype=np.float64)
