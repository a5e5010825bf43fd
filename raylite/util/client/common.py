"""`ray.util.client.common.ClientObjectRef` (Modin imports it), from the compatibility module
raylite/_private/compat_names.py. raylite's refs are one type with or without Ray Client, so
nothing is a ClientObjectRef that is not already an ObjectRef."""

from typing import Any


def __getattr__(name: str) -> Any:
    if name == "ClientObjectRef":
        from raylite._private import compat_names

        return compat_names.ClientObjectRef
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")

