"""`raylite status` names placement groups that wait for their bundles: what they need, how many
are placed, and which nodes lack it (or that the cluster can never hold them). A pending group's
bundles are no task demand, so status said "(no resource demands)" while a replica waited."""

from __future__ import annotations

import pytest

import raylite as ray
from raylite.util import placement_group, remove_placement_group

pytestmark = pytest.mark.timeout(120)


@pytest.fixture(scope="module")
def one_cpu():
    if ray.is_initialized():
        ray.shutdown()
    ray.init(num_cpus=1)
    yield
    ray.shutdown()


def _status() -> str:
    from raylite._core.cluster.cluster import cluster_status, format_status
    from raylite._core.config import get_config

    return format_status(cluster_status(get_config(), ray.get_runtime_context().gcs_address))


def test_a_group_waiting_for_room_names_its_bundles_and_the_node_lacking_them(one_cpu):
    @ray.remote(num_cpus=1)
    class Hold:
        def ready(self):
            return True

    holder = Hold.remote()
    ray.get(holder.ready.remote(), timeout=60)
    pg = placement_group([{"CPU": 1}], strategy="PACK", name="replica-pg")
    try:
        assert not pg.wait(0.5)
        text = _status().split("Demands", 1)[1]
        assert "(no resource demands)" not in text
        node = ray.get_runtime_context().get_node_id()[:8]
        assert "placement group 'replica-pg'" in text and "(PACK) waits for 1 bundles [{CPU: 1}], 0 placed" in text
        assert f"node {node} has {{CPU: 0}} of {{CPU: 1}} free" in text
    finally:
        remove_placement_group(pg)
        ray.kill(holder)


def test_a_group_the_cluster_can_never_hold_says_so(one_cpu):
    pg = placement_group([{"CPU": 1}, {"CPU": 1}], strategy="STRICT_SPREAD")
    try:
        text = _status().split("Demands", 1)[1]
        assert "(STRICT_SPREAD) waits for 2 bundles [{CPU: 1}, {CPU: 1}], 0 placed" in text
        assert "can never be placed" in text
    finally:
        remove_placement_group(pg)


def test_placed_groups_are_not_demands(one_cpu):
    pg = placement_group([{"CPU": 1}])
    try:
        assert pg.wait(30)
        assert "placement group" not in _status().split("Demands", 1)[1]
    finally:
        remove_placement_group(pg)
