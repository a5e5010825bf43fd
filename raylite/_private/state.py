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


def current_node_id() -> str:
    """This process's node as Ray names it in resources: `node:<its IP>`."""
    from raylite.api import node_ip_address

    return "node:" + node_ip_address()


def node_ids() -> list[str]:
    """Every alive node's `node:<IP>` resource, once per node (nodes sharing an IP, as a local
    test cluster's do, each count), without the head's `node:__internal_head__` marker."""
    return [name for per_node in total_resources_per_node().values() for name in per_node
            if name.startswith("node:") and name != "node:__internal_head__"]

__all__ = ["GlobalState", "available_resources", "available_resources_per_node", "cluster_resources",
           "current_node_id", "node_ids", "state", "total_resources_per_node"]
