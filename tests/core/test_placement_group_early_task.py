"""A task placed in a placement group right after the group is asked for (before its bundle is
reserved on the node) waits for the bundle, as in Ray; it was refused as unschedulable."""

from __future__ import annotations

import raylite
from raylite.util.placement_group import placement_group, remove_placement_group
from raylite.util.scheduling_strategies import PlacementGroupSchedulingStrategy


@raylite.remote(num_cpus=1)
def in_group():
    return "ran"


def test_a_task_submitted_before_the_group_is_ready_runs_once_it_is(cluster):
    for _ in range(3):  # the race is the task reaching the node first: try it a few times
        pg = placement_group([{"CPU": 1}])
        strategy = PlacementGroupSchedulingStrategy(placement_group=pg, placement_group_bundle_index=0)
        assert raylite.get(in_group.options(scheduling_strategy=strategy).remote(), timeout=60) == "ran"
        remove_placement_group(pg)


def test_a_request_no_bundle_can_hold_is_refused_at_remote(cluster):
    import pytest

    pg = placement_group([{"CPU": 1}])
    raylite.get(pg.ready(), timeout=60)

    @raylite.remote(num_cpus=1, num_gpus=8)
    class TooBig:
        pass

    strategy = PlacementGroupSchedulingStrategy(placement_group=pg)
    with pytest.raises(ValueError, match=r"Cannot schedule .*TooBig with the placement group because the resource "
                                         r"request \{'CPU': 1, 'GPU': 8\} cannot fit into any bundles for the "
                                         r"placement group, \[\{'CPU': 1\.0\}\]\."):
        TooBig.options(scheduling_strategy=strategy, name="too-big", get_if_exists=True).remote()
    with pytest.raises(ValueError, match="cannot fit into any bundles"):
        in_group.options(num_cpus=2, scheduling_strategy=strategy).remote()
    remove_placement_group(pg)
