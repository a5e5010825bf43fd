"""The local provider (`raylite autoscaler --config`) with real node daemons: on network-namespace
hosts (root), else on loopback addresses. Demand launches nodes that run the work; idle nodes
are stopped after the timeout; request_resources() sizes the cluster without any task."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest
import yaml

from raylite.autoscaler.providers.local import LocalProvider, load_config

from .conftest import ROOT, Head, wait_until

TOOL = os.path.join(os.path.dirname(ROOT), "shared", "tools", "netns-hosts")
if not os.path.exists(TOOL):
    TOOL = "/work/shared/tools/netns-hosts"


def test_config_errors_name_the_fix():
    with pytest.raises(ValueError, match="head_address"):
        load_config({"available_node_types": {"w": {"resources": {"CPU": 1}}}})
    with pytest.raises(ValueError, match="only 1 worker_ips"):
        load_config({"head_address": "h:1", "available_node_types": {
            "w": {"resources": {"CPU": 1}, "max_workers": 2, "worker_ips": ["10.0.0.2"]}}})
    with pytest.raises(ValueError, match="provider.type 'aws'"):
        load_config({"provider": {"type": "aws"}, "head_address": "h:1", "available_node_types": {}})
    cfg = load_config({"head_address": "h:1", "idle_timeout_minutes": 2, "provider": {"type": "local",
                       "worker_ips": ["10.0.0.2", {"name": "b", "ip": "10.0.0.3", "command_prefix": "ssh b"}]},
                       "available_node_types": {"w": {"resources": {"CPU": 2}, "min_workers": 1}}})
    assert cfg.idle_timeout_s == 120 and cfg.node_types[0].max_workers == 2
    assert cfg.hosts["w"][1].command_prefix == ("ssh", "b")
    assert LocalProvider(cfg).non_terminated_nodes() == []


def _nh(*args: str) -> str:
    return subprocess.run([TOOL, *args], check=True, text=True, capture_output=True).stdout.strip()


@pytest.fixture(params=["netns", "loopback"])
def hosts(request):
    """Two hosts for worker nodes and the address the head listens on that they reach."""
    if request.param == "netns":
        if os.geteuid() != 0 or not os.path.exists(TOOL):
            pytest.skip("network-namespace hosts need root and shared/tools/netns-hosts")
        check = subprocess.run([TOOL, "check"], capture_output=True, text=True)
        if check.returncode != 0:
            pytest.skip(f"netns-hosts unavailable here: {check.stderr.strip()}")
        prefix = f"asc{os.getpid() % 10000}x"
        out = _nh("up", "2", "--prefix", prefix)
        ips = dict(line.split() for line in out.splitlines())
        bridge = ".".join(next(iter(ips.values())).split(".")[:3]) + ".1"
        try:
            yield bridge, [{"name": n, "ip": ip, "command_prefix": [TOOL, "exec", n, "--"]} for n, ip in ips.items()]
        finally:
            _nh("down", "--prefix", prefix)
    else:  # loopback addresses, one per "host" (what runs without root)
        yield "127.0.0.1", [{"name": f"lo{i}", "ip": f"127.0.0.{60 + i}"} for i in (1, 2)]


@pytest.fixture
def head_on(hosts, monkeypatch):
    import shutil
    import tempfile

    from raylite._core import config as config_mod

    bridge, _ = hosts
    tmp = tempfile.mkdtemp(prefix="rlas", dir="/tmp")
    monkeypatch.setenv("RAYLITE_TEMP_DIR", os.path.join(tmp, "head"))
    monkeypatch.delenv("RAYLITE_TOKEN", raising=False)
    monkeypatch.setattr(config_mod, "_CONFIG", None)
    h = Head(tmp, bridge)
    monkeypatch.setenv("RAYLITE_TOKEN", h.token)
    monkeypatch.setattr(config_mod, "_CONFIG", None)
    try:
        yield h
    finally:
        import raylite

        raylite.shutdown()
        h.stop()
        shutil.rmtree(tmp, ignore_errors=True)


@pytest.mark.slow
def test_local_provider_scales_up_for_demand_and_down_when_idle(hosts, head_on):
    import raylite
    from raylite.autoscaler.sdk import request_resources
    from raylite.util.state import get_cluster_demand

    _, host_list = hosts
    head = head_on
    config = {"cluster_name": "t", "head_address": head.address, "idle_timeout_s": 3,
              "state_dir": os.path.join(head.tmp, "nodes"), "token": head.token,
              "available_node_types": {"w": {"resources": {"CPU": 1}, "max_workers": 2, "worker_ips": host_list,
                                             "start_args": ["--object-store-memory=100000000"]}}}
    path = os.path.join(head.tmp, "autoscaler.yaml")
    with open(path, "w") as f:
        yaml.safe_dump(config, f)
    env = {**os.environ, "PYTHONPATH": ROOT, "RAYLITE_TOKEN": head.token}
    log = open(os.path.join(head.tmp, "autoscaler.log"), "wb")
    scaler = subprocess.Popen([sys.executable, "-m", "raylite.cli", "autoscaler", f"--config={path}",
                               "--interval-s=0.5"], env=env, stdout=log, stderr=subprocess.STDOUT,
                              start_new_session=True)

    def workers() -> list[dict]:
        return [n for n in get_cluster_demand(head.address)["nodes"] if n["alive"] and not n["is_head"]]

    try:
        wait_until(lambda: get_cluster_demand(head.address) and _view(head), 30, "the autoscaler's view")
        raylite.init(address=head.address)

        @raylite.remote(num_cpus=1)
        def where(delay_s: float) -> str:
            import time

            time.sleep(delay_s)
            return raylite.util.get_node_ip_address()

        ips = raylite.get([where.remote(2.0) for _ in range(2)], timeout=120)
        host_ips = {h["ip"] for h in host_list}
        assert set(ips) <= host_ips
        assert {n["ip"] for n in workers()} == host_ips  # both hosts got a node
        # idle for 3 s: both nodes are stopped (their daemons gone, the head sees them leave)
        wait_until(lambda: not workers(), 60, "the idle nodes to be stopped")
        # request_resources(): one CPU of room, without any task
        request_resources(num_cpus=1)
        wait_until(lambda: len(workers()) == 1, 60, "a node for request_resources(num_cpus=1)")
        request_resources()
        wait_until(lambda: not workers(), 60, "the node to go once the request is withdrawn")
    finally:
        scaler.terminate()
        scaler.wait(60)
        log.close()
    # the autoscaler stopped every node it started when it exited
    assert not workers()


def _view(head) -> bool:
    from raylite._core.cluster import cluster as C

    return bool((C.cluster_status(head.config, head.address).get("autoscaler") or {}).get("node_types"))


@pytest.mark.slow
def test_autoscaling_cluster_adds_a_node_for_an_actor_and_removes_it_when_idle(monkeypatch):
    """Ray's cluster_utils.AutoscalingCluster: an actor no node fits waits for the autoscaler's
    node, runs there, and the node goes once the actor is gone and the timeout passed."""
    import shutil
    import tempfile

    import raylite
    from raylite._core import config as config_mod
    from raylite.cluster_utils import AutoscalingCluster

    tmp = tempfile.mkdtemp(prefix="rlas", dir="/tmp")
    monkeypatch.setenv("RAYLITE_TEMP_DIR", tmp)
    monkeypatch.delenv("RAYLITE_TOKEN", raising=False)
    monkeypatch.setattr(config_mod, "_CONFIG", None)
    cluster = AutoscalingCluster(head_resources={"CPU": 0},
                                 worker_node_types={"cpu_node": {"resources": {"CPU": 2, "object_store_memory": 10**8},
                                                                 "min_workers": 0, "max_workers": 1}},
                                 idle_timeout_minutes=0.05)
    try:
        cluster.start()
        raylite.init("auto")

        @raylite.remote(num_cpus=2)
        class A:
            def ip(self) -> str:
                return raylite.util.get_node_ip_address()

        a = A.remote()
        assert raylite.get(a.ip.remote(), timeout=120) == "127.0.1.1"
        raylite.kill(a)

        def workers() -> int:
            return sum(1 for n in raylite.nodes() if n["Alive"] and n["NodeManagerAddress"] != "127.0.0.1")

        wait_until(lambda: workers() == 0, 60, "the idle node to be removed")
    finally:
        raylite.shutdown()
        cluster.shutdown()
        shutil.rmtree(tmp, ignore_errors=True)


@pytest.mark.slow
def test_a_strict_spread_placement_group_gets_a_node_per_bundle(monkeypatch):
    import shutil
    import tempfile

    import raylite
    from raylite._core import config as config_mod
    from raylite.cluster_utils import AutoscalingCluster
    from raylite.util import placement_group, placement_group_table

    tmp = tempfile.mkdtemp(prefix="rlas", dir="/tmp")
    monkeypatch.setenv("RAYLITE_TEMP_DIR", tmp)
    monkeypatch.delenv("RAYLITE_TOKEN", raising=False)
    monkeypatch.setattr(config_mod, "_CONFIG", None)
    cluster = AutoscalingCluster(head_resources={"CPU": 0},
                                 worker_node_types={"cpu_node": {"resources": {"CPU": 1, "object_store_memory": 10**8},
                                                                 "min_workers": 0, "max_workers": 2}},
                                 idle_timeout_minutes=1)
    try:
        cluster.start()
        raylite.init("auto")
        pg = placement_group([{"CPU": 1}, {"CPU": 1}], strategy="STRICT_SPREAD")
        assert pg.wait(120)
        nodes = placement_group_table(pg)["bundles_to_node_id"]
        assert len(set(nodes.values())) == 2
    finally:
        raylite.shutdown()
        cluster.shutdown()
        shutil.rmtree(tmp, ignore_errors=True)


def test_a_node_that_cannot_join_is_reported_in_the_autoscaler_log(caplog, monkeypatch):
    """A node that exits at once (here: no head at the address; in use, a missing token) was
    relaunched every round with its reason only in a per-node log file, and each exit was kept
    in a list that grew for as long as the autoscaler ran."""
    import logging
    import shutil
    import tempfile

    from tests.api_fixtures import free_port

    monkeypatch.delenv("RAYLITE_TOKEN", raising=False)
    state_dir = tempfile.mkdtemp(prefix="rlasf", dir="/tmp")  # short: unix socket paths
    port = free_port()  # nothing listens there
    provider = LocalProvider({"cluster_name": "t", "head_address": f"127.0.0.1:{port}",
                              "state_dir": state_dir, "token": "some-token",
                              "available_node_types": {"w": {"resources": {"CPU": 1}, "max_workers": 1,
                                                             "worker_ips": ["127.0.0.61"]}}})
    provider.failures = [f"old {i}" for i in range(30)]
    try:
        provider.create_nodes("w", 1)
        provider.nodes["127.0.0.61"].process.wait(timeout=60)
        with caplog.at_level(logging.WARNING, logger="raylite.autoscaler"):
            assert provider.non_terminated_nodes() == []
    finally:
        provider.shutdown()
        shutil.rmtree(state_dir, ignore_errors=True)
    assert any("node on 127.0.0.61 exited" in r.getMessage() and f"127.0.0.1:{port}" in r.getMessage()
               for r in caplog.records), caplog.text
    assert len(provider.failures) == 20 and provider.failures[-1].startswith("node on 127.0.0.61 exited")
