"""Connectors to stores and engines outside Arrow files: one module per connector.

Each reader is a ``Datasource`` (planned into ``ReadTask``s with row/size estimates,
so reads stream under the executor's memory budget and show progress like any other
read) and each writer a ``Datasink`` run by ``Dataset.write_datasink``. The optional
package a connector needs is imported when it is first used, never at
``import raylite.data``; a missing one names the pip command.
"""

from __future__ import annotations

import importlib
from types import ModuleType

import pyarrow as pa


def require(module: str, pip_name: str, what: str) -> ModuleType:
    """``import module`` or an ImportError saying which pip command brings it."""
    try:
        return importlib.import_module(module)
    except ImportError as e:
        raise ImportError(
            f"{what} needs the {pip_name!r} package, which is not installed: "
            f"pip install {pip_name}"
        ) from e


def save_mode(mode: object, allowed: tuple[str, ...], what: str) -> str:
    """Ray's SaveMode (an enum) or its string value, checked against ``allowed``."""
    value = str(getattr(mode, "value", mode)).lower()
    if value not in allowed:
        raise ValueError(f"{what}(mode={mode!r}): use one of {', '.join(allowed)}.")
    return value


def estimate_row_bytes(schema: pa.Schema, variable_width_bytes: int = 32) -> int:
    """Bytes a row of ``schema`` takes in memory, for read-task size estimates made
    from row counts alone (fixed-width types exactly, strings and lists by a guess)."""
    total = 0
    for field in schema:
        try:
            total += max(1, field.type.bit_width // 8)
        except ValueError:  # variable width (string, binary, list, struct)
            total += variable_width_bytes
    return max(1, total)
