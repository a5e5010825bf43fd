"""``Concatenator`` (columns -> one vector column) and ``Chain`` (preprocessors in sequence)."""

from __future__ import annotations

from typing import Any

import numpy as np

from raylite.data.preprocessors.preprocessor import Preprocessor


class Concatenator(Preprocessor):
    """Stack ``columns`` into one array per row in ``output_column_name``; the inputs are dropped.

    ``flatten=True`` also flattens array-valued columns into the vector. Missing columns
    raise when ``raise_if_missing`` is set and are skipped otherwise.
    """

    _is_fittable = False

    def __init__(self, columns: list[str], output_column_name: str = "concat_out", dtype: Any = None,
                 raise_if_missing: bool = False, flatten: bool = False) -> None:
        super().__init__()
        if isinstance(columns, str):
            raise TypeError(f"Concatenator takes a list of columns, got the string {columns!r}")
        self.columns = list(columns)
        self.output_column_name = output_column_name
        self.dtype = dtype
        self.raise_if_missing = raise_if_missing
        self.flatten = flatten

    def _transform_pandas(self, df: Any) -> Any:
        present = [c for c in self.columns if c in df.columns]
        missing = [c for c in self.columns if c not in df.columns]
        if missing and self.raise_if_missing:
            raise ValueError(f"Concatenator: missing column(s) {missing} in the batch's columns {list(df.columns)}")
        parts = []
        for c in present:
            values = df[c].to_numpy()
            if values.dtype == object:  # array-valued cells
                values = np.stack([np.asarray(v).reshape(-1) if self.flatten else np.asarray(v) for v in values])
            parts.append(values.reshape(len(df), -1))
        stacked = np.concatenate(parts, axis=1) if parts else np.zeros((len(df), 0))
        if self.dtype is not None:
            stacked = stacked.astype(self.dtype)
        df = df.drop(columns=present)
        df[self.output_column_name] = list(stacked)
        return df


class Chain(Preprocessor):
    """Apply ``preprocessors`` in order; fitting fits each on the previous ones' output."""

    def __init__(self, *preprocessors: Preprocessor) -> None:
        super().__init__()
        self.preprocessors = preprocessors

    def fit_status(self) -> Preprocessor.FitStatus:
        statuses = {p.fit_status() for p in self.preprocessors} - {Preprocessor.FitStatus.NOT_FITTABLE}
        if not statuses:
            return Preprocessor.FitStatus.NOT_FITTABLE
        if statuses == {Preprocessor.FitStatus.FITTED}:
            return Preprocessor.FitStatus.FITTED
        if Preprocessor.FitStatus.FITTED in statuses or Preprocessor.FitStatus.PARTIALLY_FITTED in statuses:
            return Preprocessor.FitStatus.PARTIALLY_FITTED
        return Preprocessor.FitStatus.NOT_FITTED

    def fit(self, ds: Any) -> Preprocessor:
        for p in self.preprocessors[:-1]:
            ds = p.fit_transform(ds)
        if self.preprocessors:
            self.preprocessors[-1].fit(ds)
        return self

    def fit_transform(self, ds: Any, **transform_kwargs: Any) -> Any:
        for p in self.preprocessors:
            ds = p.fit_transform(ds, **transform_kwargs)
        return ds

    def transform(self, ds: Any, **kwargs: Any) -> Any:
        self._check_fitted()
        for p in self.preprocessors:
            ds = p.transform(ds, **kwargs)
        return ds

    def transform_batch(self, data: Any) -> Any:
        self._check_fitted()
        for p in self.preprocessors:
            data = p.transform_batch(data)
        return data

    def __repr__(self) -> str:
        return f"Chain(preprocessors={list(self.preprocessors)!r})"
