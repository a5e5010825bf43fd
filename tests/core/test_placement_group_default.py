"""`PlacementGroupSchedulingStrategy(placement_group="default")` and `placement_group=None`.

Ray's meaning of "default": the caller's own placement group when the child is captured (its
`placement_group_capture_child_tasks`, else whether the caller captures its children), else no
group. The cluster has 2 CPUs and the group 1, so a child can run inside or outside it; each
child reports the group it ran in.
"""

from __future__ import annotations

import pytest

import raylite as ray
from raylite.util import placement_group, remove_placement_group
from raylite.util.placement_group import get_current_placement_group
from raylite.util.scheduling_strategies import PlacementGroupSchedulingStrategy as PGS


@ray.remote(num_cpus=1)
def where():
    pg = get_current_placement_group()
    return pg.id.hex() if pg is not None else None


@ray.remote(num_cpus=1)
class Where:
    def group(self):
        pg = get_current_placement_group()
        return pg.id.hex() if pg is not None else None


@ray.remote(num_cpus=1)
def call_child(strategy):
    return ray.get(where.options(scheduling_strategy=strategy).remote(), timeout=60)


@ray.remote(num_cpus=1)
def make_actor(strategy):
    return ray.get(Where.options(scheduling_strategy=strategy).remote().group.remote(), timeout=60)


@pytest.fixture
def group(cluster):
    pg = placement_group([{"CPU": 1}])
    ray.get(pg.ready(), timeout=30)
    yield pg
    remove_placement_group(pg)


def _in(pg, capture):
    return PGS(placement_group=pg, placement_group_capture_child_tasks=capture)


def test_default_from_the_driver_means_no_group(cluster):
    assert ray.get(where.options(scheduling_strategy=PGS(placement_group="default")).remote(), timeout=60) is None
    assert ray.get(where.options(scheduling_strategy=PGS(placement_group=None)).remote(), timeout=60) is None


def test_default_in_a_capturing_parent_is_the_parents_group(group):
    out = ray.get(call_child.options(scheduling_strategy=_in(group, True)).remote(PGS("default")), timeout=60)
    assert out == group.id.hex()


def test_default_actor_in_a_capturing_parent_is_placed_in_the_group(group):
    out = ray.get(make_actor.options(scheduling_strategy=_in(group, True)).remote(PGS("default")), timeout=60)
    assert out == group.id.hex()


def test_default_without_capture_leaves_the_group(group):
    out = ray.get(call_child.options(scheduling_strategy=_in(group, False)).remote(PGS("default")), timeout=60)
    assert out is None


def test_default_with_capture_asked_by_the_child_joins_the_callers_group(group):
    strategy = PGS("default", placement_group_capture_child_tasks=True)
    out = ray.get(call_child.options(scheduling_strategy=_in(group, False)).remote(strategy), timeout=60)
    assert out == group.id.hex()


def test_default_with_capture_turned_off_leaves_a_capturing_parents_group(group):
    strategy = PGS("default", placement_group_capture_child_tasks=False)
    out = ray.get(call_child.options(scheduling_strategy=_in(group, True)).remote(strategy), timeout=60)
    assert out is None


def test_none_opts_out_of_a_capturing_parents_group(group):
    out = ray.get(call_child.options(scheduling_strategy=_in(group, True)).remote(PGS(None)), timeout=60)
    assert out is None


def test_any_other_string_is_a_clear_error(cluster):
    with pytest.raises(ValueError, match="placement_group='current'"):
        where.options(scheduling_strategy=PGS(placement_group="current")).remote()
