"""placement_group_capture_child_tasks: children of a task in a group run in that group.

The cluster has 2 CPUs and the group reserves both, so a child that left the group could never
be scheduled: these tests would hang (bounded by their timeouts) without capture.
"""

from __future__ import annotations

import pytest

import raylite as ray
from raylite.exceptions import GetTimeoutError
from raylite.util import placement_group, remove_placement_group
from raylite.util.placement_group import get_current_placement_group
from raylite.util.scheduling_strategies import PlacementGroupSchedulingStrategy


@ray.remote(num_cpus=1)
def child():
    pg = get_current_placement_group()
    return pg.id.hex() if pg is not None else None


@ray.remote(num_cpus=1)
def parent():
    return ray.get(child.remote())


@ray.remote(num_cpus=1)
def grandparent():
    return ray.get(parent.remote())


@ray.remote(num_cpus=1)
def parent_with_timeout(opt_out):
    strategy = PlacementGroupSchedulingStrategy(placement_group=None) if opt_out else None
    ref = child.options(scheduling_strategy=strategy).remote()
    try:
        return ray.get(ref, timeout=3)
    except GetTimeoutError:
        ray.cancel(ref, force=True)
        return "not scheduled"


@ray.remote(num_cpus=1)
class ChildActor:
    def where(self):
        pg = get_current_placement_group()
        return pg.id.hex() if pg is not None else None


@ray.remote(num_cpus=0)
class Spawner:
    def spawn(self):
        return ray.get(ChildActor.remote().where.remote())


@pytest.fixture
def full_group(cluster):
    pg = placement_group([{"CPU": 2}])
    ray.get(pg.ready(), timeout=30)
    yield pg
    remove_placement_group(pg)


def _in(pg, capture=True):
    return PlacementGroupSchedulingStrategy(placement_group=pg, placement_group_capture_child_tasks=capture)


def test_child_task_runs_in_the_parents_group(full_group):
    assert ray.get(parent.options(scheduling_strategy=_in(full_group)).remote(), timeout=60) == full_group.id.hex()


def test_capture_reaches_grandchildren(full_group):
    # grandparent and parent each hold a CPU of the group while blocked in get: the
    # grandchild still fits because blocked workers lend their CPU back within the group
    out = ray.get(grandparent.options(scheduling_strategy=_in(full_group)).remote(), timeout=60)
    assert out == full_group.id.hex()


def test_child_actor_of_a_capturing_actor_is_placed_in_the_group(full_group):
    spawner = Spawner.options(scheduling_strategy=_in(full_group)).remote()
    assert ray.get(spawner.spawn.remote(), timeout=60) == full_group.id.hex()


def test_placement_group_none_opts_a_child_out(full_group):
    out = ray.get(parent_with_timeout.options(scheduling_strategy=_in(full_group)).remote(True), timeout=60)
    assert out == "not scheduled"


def test_without_capture_children_leave_the_group(full_group):
    out = ray.get(parent_with_timeout.options(scheduling_strategy=_in(full_group, False)).remote(False),
                  timeout=60)
    assert out == "not scheduled"
