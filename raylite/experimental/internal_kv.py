"""The cluster's key-value store under Ray's `ray.experimental.internal_kv` names.

Libraries (Serve's controller, the dashboard's feeds, user code) keep small shared state in the
head's key-value store through these calls; with head persistence on, the store survives a head
restart. Keys and values are bytes (str keys are UTF-8 encoded); `namespace=None` is the
default namespace "". Each call is one round trip to the head.

    from raylite.experimental.internal_kv import _internal_kv_get, _internal_kv_put
    _internal_kv_put("config", b"{...}", namespace="myapp")
    _internal_kv_get("config", namespace="myapp")   # b"{...}"

The `*_async` variants are awaitable from any event loop (an async actor, a Serve replica):
they do not block the caller's loop while the head answers.
"""

from __future__ import annotations

from raylite import api

_DEFAULT_NAMESPACE = ""


# Ray keeps namespaces inside its keys under this prefix, so its key-value store refuses keys
# that start with it (a RaySystemError); refused the same way here, so code that works on
# raylite keeps working on Ray
_RESERVED_PREFIX = b"@namespace_"


def _key(key: str | bytes, what: str = "key") -> bytes:
    if isinstance(key, str):
        out = key.encode()
    elif isinstance(key, bytes | bytearray | memoryview):
        out = bytes(key)
    else:
        raise TypeError(f"internal_kv {what} must be str or bytes, not {type(key).__name__}")
    if out.startswith(_RESERVED_PREFIX):
        from raylite.exceptions import RaySystemError

        raise RaySystemError(f"internal_kv {what} {out!r} starts with the reserved prefix "
                             f"{_RESERVED_PREFIX.decode()!r} (Ray stores namespaces under it); "
                             "use another key, and the namespace= argument for namespaces")
    return out


def _ns(namespace: str | None) -> str:
    if namespace is None:
        return _DEFAULT_NAMESPACE
    if not isinstance(namespace, str):
        raise TypeError(f"internal_kv namespace must be a str or None, not {type(namespace).__name__}")
    return namespace


def _value(value: str | bytes) -> bytes:
    if isinstance(value, str):
        return value.encode()
    if isinstance(value, bytes | bytearray | memoryview):
        return bytes(value)
    raise TypeError(f"internal_kv values must be bytes (or str), not {type(value).__name__}; "
                    "serialize the value first (json.dumps(...).encode(), pickle.dumps(...))")


def _internal_kv_initialized() -> bool:
    """True when this process is connected to a cluster."""
    from raylite._core import runtime

    return runtime.client() is not None


def _internal_kv_get(key: str | bytes, *, namespace: str | None = None) -> bytes | None:
    """The value stored under key, or None."""
    return api.ensure_initialized().kv_get(_ns(namespace), _key(key))


def _internal_kv_exists(key: str | bytes, *, namespace: str | None = None) -> bool:
    return _internal_kv_get(key, namespace=namespace) is not None


def _internal_kv_put(key: str | bytes, value: str | bytes, overwrite: bool = True, *,
                     namespace: str | None = None) -> bool:
    """Store value under key; returns True when the key already existed (Ray's meaning).

    With overwrite=False an existing value is kept.
    """
    return api.ensure_initialized().kv_put(_ns(namespace), _key(key), _value(value), overwrite)


def _internal_kv_del(key: str | bytes, *, del_by_prefix: bool = False,
                     namespace: str | None = None) -> int:
    """Delete key (or every key starting with it); returns how many were deleted."""
    return api.ensure_initialized().kv_del(_ns(namespace), _key(key), del_by_prefix)


def _internal_kv_list(prefix: str | bytes, *, namespace: str | None = None) -> list[bytes]:
    """The keys that start with prefix."""
    return api.ensure_initialized().kv_keys(_ns(namespace), _key(prefix, "prefix"))


async def _internal_kv_get_async(key: str | bytes, *, namespace: str | None = None) -> bytes | None:
    return await api.ensure_initialized().kv_get_async(_ns(namespace), _key(key))


async def _internal_kv_put_async(key: str | bytes, value: str | bytes, overwrite: bool = True, *,
                                 namespace: str | None = None) -> bool:
    return await api.ensure_initialized().kv_put_async(_ns(namespace), _key(key), _value(value), overwrite)


async def _internal_kv_del_async(key: str | bytes, *, del_by_prefix: bool = False,
                                 namespace: str | None = None) -> int:
    return await api.ensure_initialized().kv_del_async(_ns(namespace), _key(key), del_by_prefix)


async def _internal_kv_list_async(prefix: str | bytes, *, namespace: str | None = None) -> list[bytes]:
    return await api.ensure_initialized().kv_keys_async(_ns(namespace), _key(prefix, "prefix"))


__all__ = ["_internal_kv_del", "_internal_kv_del_async", "_internal_kv_exists", "_internal_kv_get",
           "_internal_kv_get_async", "_internal_kv_initialized", "_internal_kv_list",
           "_internal_kv_list_async", "_internal_kv_put", "_internal_kv_put_async"]
