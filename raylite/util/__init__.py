"""raylite.util: ActorPool, queue, placement groups, scheduling strategies (Ray's names)."""

from raylite.placement_group import (
    PlacementGroup,
    get_current_placement_group,
    get_placement_group,
    placement_group,
    placement_group_table,
    remove_placement_group,
)
from raylite.util import queue, scheduling_strategies
from raylite.util.actor_pool import ActorPool

__all__ = [
    "ActorPool", "PlacementGroup", "get_current_placement_group", "get_placement_group",
    "placement_group", "placement_group_table", "remove_placement_group", "queue",
    "scheduling_strategies",
]
