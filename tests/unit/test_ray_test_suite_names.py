"""Names that Ray's own test modules import at their top (so one missing name stopped a whole
module from loading), and the behaviour behind them. No cluster needed."""

from __future__ import annotations

import pytest

import raylite
from raylite import cluster_utils
from raylite._private import ray_constants
from raylite.actor import ActorClassInheritanceException


def test_subclassing_an_actor_class_is_refused_with_rays_exception():
    class Plain:
        def value(self):
            return 1

    Actor = raylite.remote(Plain)
    with pytest.raises(ActorClassInheritanceException, match="Inheriting from actor classes is not currently supported"):
        class Derived(Actor):  # noqa: F841 - the class statement itself must fail
            pass
    # it is a TypeError, as in Ray, so `except TypeError` code keeps working
    assert issubclass(ActorClassInheritanceException, TypeError)

    # deriving from the plain class, then decorating, is the way Ray names
    class Derived(Plain):
        pass

    assert raylite.remote(Derived).__name__ == "Derived"


def test_cluster_not_supported_is_false_off_windows():
    assert cluster_utils.cluster_not_supported is False
    assert "cluster_not_supported" in cluster_utils.__all__


def test_function_table_namespace_constant_has_rays_value():
    assert ray_constants.KV_NAMESPACE_FUNCTION_TABLE == b"fun"


def test_names_that_rays_basic_wait_and_threaded_actor_tests_import():
    # test_basic_4/5, test_wait, test_threaded_actor stopped at these at collection
    from raylite._common.constants import HEAD_NODE_RESOURCE_NAME
    from raylite._private.state import available_resources, cluster_resources
    from raylite.autoscaler._private.constants import RAY_PROCESSES

    assert HEAD_NODE_RESOURCE_NAME == "node:__internal_head__"
    assert callable(available_resources) and callable(cluster_resources)
    assert ["raylite._core.cluster.daemon", False] in RAY_PROCESSES
    assert all(isinstance(k, str) and isinstance(by_name, bool) for k, by_name in RAY_PROCESSES)
    assert raylite._raylet.RAY_NODE_ID_KEY == "ray.io/node-id"  # reachable after a bare import
    assert raylite._raylet.RAY_NODE_ZONE_KEY == "ray.io/availability-zone"
