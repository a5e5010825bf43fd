"""init() with no address joins the cluster `raylite start` left running, as Ray's does."""

from __future__ import annotations

import pytest

import raylite as ray

from .conftest import wait_until


def test_init_without_address_joins_the_running_cluster(make_cluster):
    c = make_cluster()
    c.add_head(num_cpus=1, resources={"head_r": 1})
    c.add_node(num_cpus=1, resources={"w1": 1})
    wait_until(lambda: len(c.alive_ids()) == 2, what="two alive nodes")
    ray.init()  # no address: the running cluster, not a new local one
    try:
        assert ray.cluster_resources().get("w1") == 1
        assert len([n for n in ray.nodes() if n["Alive"]]) == 2
    finally:
        ray.shutdown()
    assert len(c.alive_ids()) == 2  # disconnecting left the cluster running


def test_system_config_when_joining_a_running_cluster_is_named_as_ignored(make_cluster):
    """Ray refuses _system_config with an address; raylite joins and says the keys cannot apply."""
    c = make_cluster()
    c.add_head(num_cpus=1)
    wait_until(lambda: len(c.alive_ids()) == 1, what="the head node")
    with pytest.warns(UserWarning, match="ignores _system_config when it connects to a running cluster"):
        ray.init(_system_config={"memory_usage_threshold": 0.5})
    try:
        assert ray.cluster_resources().get("CPU") == 1
    finally:
        ray.shutdown()


def test_port_zero_head_gets_a_real_port_and_localhost_reaches_it(make_cluster):
    """`ray start --head --port 0` (Ray: "we will allocate an available port") used to record
    and print HOST:0, with no TCP listener at all; and `init(address="localhost:PORT")` on the
    head's own machine was refused for a missing token while the printed address worked."""
    c = make_cluster()
    node = c.add_head(port=0, num_cpus=1, resources={"zero_r": 1})
    port = int(node.address.rsplit(":", 1)[1])
    assert port > 0
    wait_until(lambda: len(c.alive_ids()) == 1, what="the head node")
    ray.init(address=f"localhost:{port}")
    try:
        assert ray.cluster_resources().get("zero_r") == 1
    finally:
        ray.shutdown()


def test_system_config_with_an_explicit_address_is_refused_as_in_ray(make_cluster):
    c = make_cluster()
    node = c.add_head(num_cpus=1)
    wait_until(lambda: len(c.alive_ids()) == 1, what="the head node")
    with pytest.raises(ValueError, match="When connecting to an existing cluster, _system_config must not be provided"):
        ray.init(address=node.address, _system_config={"memory_usage_threshold": 0.5})
    assert not ray.is_initialized()
