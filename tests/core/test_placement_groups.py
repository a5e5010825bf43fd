"""Placement groups on one node: reservation, bundle scheduling, removal, infeasible groups."""

from __future__ import annotations

import pytest

import raylite as ray
from raylite.exceptions import PlacementGroupSchedulingError
from raylite.util import placement_group, placement_group_table, remove_placement_group
from raylite.util.scheduling_strategies import (
    NodeAffinitySchedulingStrategy,
    PlacementGroupSchedulingStrategy,
)


# Generous timeouts: a module that imported torch before this one makes new workers preload it
# (seconds each on a loaded 2-core machine), and these tests start several workers.
@ray.remote(num_cpus=1)
def assigned():
    return ray.get_runtime_context().get_assigned_resources()


def test_reserve_run_and_remove(cluster):
    pg = placement_group([{"CPU": 1}, {"CPU": 1}], strategy="STRICT_PACK")
    assert pg.wait(60)
    assert ray.get(pg.ready(), timeout=60) == pg
    assert ray.available_resources().get("CPU", 0) == 0
    strategy = PlacementGroupSchedulingStrategy(pg, placement_group_bundle_index=1)
    assert ray.get(assigned.options(scheduling_strategy=strategy).remote(), timeout=60) == {"CPU": 1}
    table = placement_group_table(pg)
    assert table["state"] == "CREATED" and len(table["bundles"]) == 2

    @ray.remote(num_cpus=1)
    class InGroup:
        def ok(self):
            return "ok"

    actor = InGroup.options(scheduling_strategy=PlacementGroupSchedulingStrategy(pg)).remote()
    assert ray.get(actor.ok.remote(), timeout=60) == "ok"
    remove_placement_group(pg)
    from tests.conftest import wait_for

    wait_for(lambda: ray.available_resources().get("CPU", 0) == 2, what="bundle CPUs to return")
    with pytest.raises(ray.exceptions.RayActorError):
        ray.get(actor.ok.remote(), timeout=60)


def test_infeasible_group_raises(cluster):
    pg = placement_group([{"CPU": 1}] * 3, strategy="STRICT_SPREAD")
    with pytest.raises(PlacementGroupSchedulingError, match="STRICT_SPREAD"):
        pg.wait(5)
    with pytest.raises(ValueError, match="strategy"):
        placement_group([{"CPU": 1}], strategy="CLUMP")
    with pytest.raises(ValueError, match="non-empty"):
        placement_group([])


def test_node_affinity(cluster):
    node_id = ray.get_runtime_context().get_node_id()
    strategy = NodeAffinitySchedulingStrategy(node_id, soft=False)
    assert ray.get(assigned.options(scheduling_strategy=strategy).remote(), timeout=60) == {"CPU": 1}
    bad = NodeAffinitySchedulingStrategy("ab" * 16, soft=False)
    with pytest.raises(ray.exceptions.TaskUnschedulableError):
        ray.get(assigned.options(scheduling_strategy=bad).remote(), timeout=60)
    soft = NodeAffinitySchedulingStrategy("ab" * 16, soft=True)
    assert ray.get(assigned.options(scheduling_strategy=soft).remote(), timeout=60) == {"CPU": 1}


def test_ray_util_placement_group_module_path(cluster):
    """Ray's examples import from the module `ray.util.placement_group`; the names on util stay."""
    import importlib

    import raylite.util
    from raylite.util.placement_group import (
        PlacementGroup,
        get_current_placement_group,
        placement_group,
        placement_group_table,
        remove_placement_group,
    )

    module = importlib.import_module("raylite.util.placement_group")
    assert module.placement_group is placement_group is raylite.util.placement_group
    assert callable(raylite.util.placement_group)  # the function, not the module
    pg = placement_group([{"CPU": 1}], strategy="PACK")
    assert isinstance(pg, PlacementGroup) and pg.wait(60)
    assert placement_group_table(pg)["state"] == "CREATED"

    @ray.remote(num_cpus=1)
    def current():
        return get_current_placement_group() is not None

    strategy = PlacementGroupSchedulingStrategy(pg, placement_group_capture_child_tasks=True)
    assert ray.get(current.options(scheduling_strategy=strategy).remote(), timeout=60)
    assert get_current_placement_group() is None  # the driver is in no group
    remove_placement_group(pg)


def test_ready_refs_wait_without_workers(cluster):
    """pg.ready() is resolved by the caller's own I/O loop from the head's answers: fifty
    groups waiting for room start no worker (each used to block one in a task)."""
    from raylite._core import protocol as P
    from raylite._core import runtime
    from tests.conftest import wait_for

    def workers() -> int:
        return runtime.client().node_request(P.GetNodeInfo(), timeout=10).num_workers

    big = placement_group([{"CPU": 2}])
    assert big.wait(60)
    before = workers()
    waiting = [placement_group([{"CPU": 0.01}]) for _ in range(50)]  # no CPU left: pending
    readies = [g.ready() for g in waiting]
    done, pending = ray.wait(readies, num_returns=len(readies), timeout=0.5)
    assert not done
    remove_placement_group(big)
    assert ray.get(readies, timeout=60) == waiting
    assert workers() <= before
    gone = placement_group([{"CPU": 0.01}])
    remove_placement_group(gone)
    with pytest.raises(PlacementGroupSchedulingError, match="removed"):
        ray.get(gone.ready(), timeout=60)
    for g in waiting:
        remove_placement_group(g)
    wait_for(lambda: ray.available_resources().get("CPU", 0) == 2, what="bundle CPUs to return")
