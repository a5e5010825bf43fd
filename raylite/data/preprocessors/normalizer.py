"""``Normalizer``: each row's values in ``columns`` divided by that row's norm (l1, l2 or max)."""

from __future__ import annotations

from typing import Any

import numpy as np

from raylite.data.preprocessors.preprocessor import Preprocessor, check_columns, output_columns_for

_NORMS = {
    "l1": lambda m: np.abs(m).sum(axis=1),
    "l2": lambda m: np.sqrt((m * m).sum(axis=1)),
    "max": lambda m: np.abs(m).max(axis=1),
}


class Normalizer(Preprocessor):
    """Scale each row to unit norm over ``columns``; a row whose norm is 0 stays zeros. Nothing
    to fit."""

    _is_fittable = False

    def __init__(self, columns: list[str], norm: str = "l2", *, output_columns: list[str] | None = None) -> None:
        super().__init__()
        if norm not in _NORMS:
            raise ValueError(f"Normalizer(norm={norm!r}): use one of {sorted(_NORMS)}.")
        self.columns = list(columns)
        self.norm = norm
        self.output_columns = output_columns_for(columns, output_columns)

    def _transform_pandas(self, df: Any) -> Any:
        check_columns(df, self.columns, "Normalizer")
        values = df[self.columns].to_numpy(dtype=np.float64)
        norms = _NORMS[self.norm](values)
        scaled = values / np.where(norms == 0, 1.0, norms)[:, None]
        for i, out in enumerate(self.output_columns):
            df[out] = scaled[:, i]
        return df
