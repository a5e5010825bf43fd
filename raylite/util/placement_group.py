"""`raylite.util.placement_group`: the module path Ray's placement-group examples import from.

`from ray.util.placement_group import placement_group, PlacementGroup, ...` is how Ray's own
documentation reaches these names, so they live here as a module too. The implementation is
`raylite.placement_group`; `raylite.util` re-exports the same objects, and its attribute
`placement_group` stays the function (as in Ray), not this module.
"""

from raylite.placement_group import (
    PlacementGroup,
    get_current_placement_group,
    get_placement_group,
    placement_group,
    placement_group_table,
    remove_placement_group,
)

__all__ = [
    "PlacementGroup", "get_current_placement_group", "get_placement_group", "placement_group",
    "placement_group_table", "remove_placement_group",
]
