"""`ray._private.state`: per-node resources and the `state` object, re-exported from the
compatibility module raylite/_private/compat_names.py."""

from raylite._private.compat_names import (
    GlobalState,
    available_resources_per_node,
    state,
    total_resources_per_node,
)

__all__ = ["GlobalState", "available_resources_per_node", "state", "total_resources_per_node"]
