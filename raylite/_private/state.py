"""`ray._private.state`: per-node resources, the cluster's totals and the `state` object, re-exported
from the compatibility module raylite/_private/compat_names.py (Ray's tests import
`available_resources` from here)."""

from raylite._private.compat_names import (
    GlobalState,
    available_resources_per_node,
    state,
    total_resources_per_node,
)

available_resources = state.available_resources
cluster_resources = state.cluster_resources

__all__ = ["GlobalState", "available_resources", "available_resources_per_node", "cluster_resources", "state",
           "total_resources_per_node"]
