"""Turn a deployment's return value into an HTTP body the way Ray Serve does.

Ray answers a value that is not a Starlette `Response` like this: `None` -> empty text body,
`bytes` -> `text/plain`, `str` -> `text/plain; charset=utf-8`, anything else -> compact JSON of
FastAPI's `jsonable_encoder(value)` with Serve's extra encoders (numpy arrays and scalars,
pandas DataFrames as records, exceptions as their message). `to_jsonable` below follows FastAPI's
rules, written out here so that Serve needs no FastAPI install; a test compares the two on many
kinds of values.

Plain results (dicts, lists, strings and numbers) go straight through `json.dumps`, in C: for
them the rules give the same bytes. Anything `json.dumps` refuses takes the rules' walk, and so
does a body that mentions a `"_sa` key, which FastAPI's encoder drops.
"""

from __future__ import annotations

import dataclasses
import datetime
import decimal
import ipaddress
import json
import re
import uuid
from collections import deque
from enum import Enum
from pathlib import PurePath
from types import GeneratorType
from typing import Any

TEXT = [(b"content-type", b"text/plain")]
TEXT_UTF8 = [(b"content-type", b"text/plain; charset=utf-8")]
JSON = [(b"content-type", b"application/json")]


def _decimal(value: decimal.Decimal) -> int | float:
    exponent = value.as_tuple().exponent
    return int(value) if isinstance(exponent, int) and exponent >= 0 else float(value)


# Exact-type encoders first (FastAPI's ENCODERS_BY_TYPE), then by isinstance.
_BY_TYPE: dict[type, Any] = {
    bytes: lambda o: o.decode(),
    datetime.date: lambda o: o.isoformat(),
    datetime.datetime: lambda o: o.isoformat(),
    datetime.time: lambda o: o.isoformat(),
    datetime.timedelta: lambda o: o.total_seconds(),
    decimal.Decimal: _decimal,
    frozenset: list, set: list, deque: list, GeneratorType: list,
    uuid.UUID: str, re.Pattern: lambda o: o.pattern,
    ipaddress.IPv4Address: str, ipaddress.IPv6Address: str, ipaddress.IPv4Interface: str,
    ipaddress.IPv6Interface: str, ipaddress.IPv4Network: str, ipaddress.IPv6Network: str,
}


def _serve_extra(obj: Any) -> tuple[bool, Any]:
    """Serve's own encoders (applied before FastAPI's rules): (handled, value)."""
    if isinstance(obj, Exception):
        return True, str(obj)
    module = type(obj).__module__.split(".", 1)[0]
    if module == "numpy":
        import numpy as np

        if isinstance(obj, np.ndarray):
            if obj.dtype.kind == "f":
                obj = obj.astype(float)
            elif obj.dtype.kind in "iu":
                obj = obj.astype(int)
            return True, obj.tolist()
        if isinstance(obj, np.generic):
            return True, obj.item()
    elif module == "pandas":
        import pandas as pd

        if isinstance(obj, pd.DataFrame):
            return True, obj.to_dict(orient="records")
    return False, None


def _pydantic_dump(obj: Any) -> tuple[bool, Any]:
    dump = getattr(obj, "model_dump", None)
    if dump is None or not hasattr(type(obj), "model_fields"):
        return False, None
    data = dump(mode="json", by_alias=True)
    if isinstance(data, dict) and "__root__" in data:
        data = data["__root__"]
    return True, data


_PLAIN = (str, int, float, bool, type(None))


def to_jsonable(obj: Any) -> Any:
    """`obj` as plain JSON data, by FastAPI's `jsonable_encoder` rules plus Serve's encoders."""
    kind = type(obj)
    if kind in _PLAIN:  # the common cases first, by exact type (subclasses take the long way)
        return obj
    if kind is dict:
        return {to_jsonable(k): to_jsonable(v) for k, v in obj.items()
                if not (type(k) is str and k.startswith("_sa"))}
    if kind is list:
        return [to_jsonable(v) for v in obj]
    handled, value = _serve_extra(obj)
    if handled:
        return to_jsonable(value) if value is not obj else value
    handled, value = _pydantic_dump(obj)
    if handled:
        return to_jsonable(value)
    if dataclasses.is_dataclass(obj) and not isinstance(obj, type):
        return to_jsonable(dataclasses.asdict(obj))
    if isinstance(obj, Enum):
        return obj.value
    if isinstance(obj, PurePath):
        return str(obj)
    if obj is None or isinstance(obj, str | int | float):
        return obj
    if isinstance(obj, dict):  # FastAPI drops SQLAlchemy's "_sa..." keys by default
        return {to_jsonable(k): to_jsonable(v) for k, v in obj.items()
                if not (isinstance(k, str) and k.startswith("_sa"))}
    if isinstance(obj, list | set | frozenset | GeneratorType | tuple | deque):
        return [to_jsonable(v) for v in obj]
    encoder = _BY_TYPE.get(type(obj))
    if encoder is not None:
        return encoder(obj)
    for cls, enc in _BY_TYPE.items():
        if isinstance(obj, cls):
            return enc(obj)
    try:
        data = dict(obj)  # Mappings such as Starlette's QueryParams and Headers
    except Exception as first:  # noqa: BLE001
        try:
            data = vars(obj)
        except Exception as second:  # noqa: BLE001
            raise ValueError([first, second]) from second
    return to_jsonable(data)


def encode_body(result: Any) -> tuple[list, bytes]:
    """(headers, body) for a return value that is not a Response; raises TypeError/ValueError
    when it cannot become JSON."""
    if result is None:
        return TEXT, b""
    if isinstance(result, bytes):
        return TEXT, result
    if isinstance(result, str):
        return TEXT_UTF8, result.encode()
    try:
        body = json.dumps(result, separators=(",", ":"), default=_not_plain).encode()
    except _NotPlain:
        body = b'"_sa'  # take the walk below
    except (TypeError, ValueError):  # e.g. non-string dict keys json cannot write
        body = b'"_sa'
    if b'"_sa' in body:
        body = json.dumps(to_jsonable(result), separators=(",", ":")).encode()
    return JSON, body


class _NotPlain(Exception):
    """A value json.dumps cannot write as it is: FastAPI's rules must turn it into data first."""


def _not_plain(obj: Any) -> Any:
    raise _NotPlain
