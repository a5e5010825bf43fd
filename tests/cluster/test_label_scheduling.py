"""Label scheduling (Ray 2.60): `label_selector=` with `fallback_strategy=` on tasks and actors,
and `NodeLabelSchedulingStrategy(hard, soft)`, placing work on nodes by their labels, on a
two-node cluster of real node daemons."""

from __future__ import annotations

import pytest

import raylite
from raylite.cluster_utils import Cluster
from raylite.util.scheduling_strategies import (
    DoesNotExist,
    Exists,
    In,
    NodeLabelSchedulingStrategy,
    NotIn,
)

from .test_cluster_utils import fresh_temp_dir  # noqa: F401 - the fixture


@pytest.fixture
def labeled(fresh_temp_dir):  # noqa: F811
    c = Cluster(initialize_head=True, head_node_args={"num_cpus": 1, "labels": {"zone": "a", "disk": "ssd"}})
    east = c.add_node(num_cpus=1, labels={"zone": "b"})
    raylite.init(address=c.address)
    ids = {n["Labels"].get("zone"): n["NodeID"] for n in raylite.nodes() if n["Alive"]}
    assert set(ids) == {"a", "b"} and east is not None
    yield ids
    raylite.shutdown()
    c.shutdown()


@raylite.remote(num_cpus=0)
def where():
    return raylite.get_runtime_context().get_node_id()


@raylite.remote(num_cpus=0)
class Where:
    def node(self):
        return raylite.get_runtime_context().get_node_id()


def test_label_selector_places_tasks_and_actors(labeled):
    assert raylite.get(where.options(label_selector={"zone": "b"}).remote()) == labeled["b"]
    assert raylite.get(where.options(label_selector={"zone": "!b"}).remote()) == labeled["a"]
    assert raylite.get(where.options(label_selector={"zone": "in(x, b)"}).remote()) == labeled["b"]
    assert raylite.get(where.options(label_selector={"zone": "!in(b)", "disk": "ssd"}).remote()) == labeled["a"]
    actor = Where.options(label_selector={"zone": "b"}).remote()
    assert raylite.get(actor.node.remote()) == labeled["b"]


def test_fallback_strategy_is_tried_when_the_selector_matches_no_node(labeled):
    fallback = [{"label_selector": {"zone": "c"}}, {"label_selector": {"zone": "b"}}]
    task = where.options(label_selector={"zone": "gpu-rack"}, fallback_strategy=fallback)
    assert raylite.get(task.remote()) == labeled["b"]


def test_node_label_scheduling_strategy_hard_and_soft(labeled):
    hard = NodeLabelSchedulingStrategy({"zone": In("a", "b"), "disk": Exists()})
    assert raylite.get(where.options(scheduling_strategy=hard).remote()) == labeled["a"]
    missing = NodeLabelSchedulingStrategy({"disk": DoesNotExist()})
    assert raylite.get(where.options(scheduling_strategy=missing).remote()) == labeled["b"]
    prefer = NodeLabelSchedulingStrategy({"zone": NotIn("z")}, soft={"zone": In("b")})
    assert raylite.get(where.options(scheduling_strategy=prefer).remote()) == labeled["b"]


def test_no_matching_node_is_an_unschedulable_task(labeled):
    with pytest.raises(raylite.exceptions.TaskUnschedulableError, match="labels"):
        raylite.get(where.options(label_selector={"zone": "mars"}).remote(), timeout=60)
