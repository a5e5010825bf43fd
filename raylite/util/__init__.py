"""raylite.util: ActorPool, queue, placement groups, scheduling strategies (Ray's names)."""

from raylite.util import queue, scheduling_strategies
from raylite.util.actor_pool import ActorPool
from raylite.util.helpers import as_completed, map_unordered
from raylite.util.inspect import inspect_serializability

# importing the submodule first binds util.placement_group to it; the names below rebind it
# to the function, which is what Ray's `ray.util.placement_group(...)` calls
from raylite.util.placement_group import (
    PlacementGroup,
    get_current_placement_group,
    get_placement_group,
    placement_group,
    placement_group_table,
    remove_placement_group,
)


def get_node_ip_address() -> str:
    """The IP address of the node this process runs on (Ray's name)."""
    from raylite.api import node_ip_address

    return node_ip_address()


def list_named_actors(all_namespaces: bool = False) -> list:
    """Names of the live named actors (with namespaces when `all_namespaces`)."""
    from raylite.api import list_named_actors as _list

    return _list(all_namespaces)


def __getattr__(name: str):
    if name in ("state", "metrics", "annotations", "multiprocessing", "joblib", "dask"):  # loaded on first use
        import importlib

        return importlib.import_module(f"raylite.util.{name}")
    raise AttributeError(f"module 'raylite.util' has no attribute {name!r}")

__all__ = [
    "ActorPool", "PlacementGroup", "get_current_placement_group", "get_placement_group",
    "placement_group", "placement_group_table", "remove_placement_group", "queue",
    "scheduling_strategies", "get_node_ip_address", "list_named_actors", "inspect_serializability",
    "as_completed", "map_unordered",
]
