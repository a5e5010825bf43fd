"""What a KubeRay pod asks of a node, on one machine: `ray health-check`, finding its own IP,
a head reachable on every interface, Ray's fault-tolerance variables (tests/kubernetes runs
the same on network-namespace pods)."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import threading

import pytest

from raylite._core.head.persistence import RedisPersistence
from raylite._core.node import ip as node_ip
from raylite.cli import ray_env

from .conftest import free_port


def _health_check(address: str, env: dict[str, str]) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "raylite.cli", "health-check", "--address", address],
                          env=env, capture_output=True, text=True, timeout=60)


def test_health_check_answers_for_a_live_head_only_with_its_token(make_cluster, tmp_path):
    c = make_cluster()
    c.add_head(num_cpus=1)
    elsewhere = {**os.environ, "RAYLITE_TEMP_DIR": str(tmp_path)}  # no token file to find here
    elsewhere.pop("RAYLITE_TOKEN", None)
    ok = _health_check(c.address, {**elsewhere, "RAY_AUTH_MODE": "token", "RAY_AUTH_TOKEN": c.token})
    assert ok.returncode == 0 and "up and serving" in ok.stdout, ok.stderr
    refused = _health_check(c.address, {**elsewhere, "RAY_AUTH_MODE": "token", "RAY_AUTH_TOKEN": "wrong"})
    assert refused.returncode == 1 and "refused this command's token" in refused.stderr
    assert "RAY_AUTH_TOKEN" in refused.stderr  # it says how to fix it
    down = _health_check(f"127.0.0.1:{free_port()}", elsewhere)
    assert down.returncode == 1 and "cannot connect to the head" in down.stderr


def test_health_check_refuses_a_peer_that_is_not_a_raylite_head(tmp_path):
    srv = socket.socket()
    srv.bind(("127.0.0.1", 0))
    srv.listen(1)

    def answer_junk():
        conn, _ = srv.accept()
        conn.recv(4096)
        conn.sendall(b"\xff\xff\xff\xff" + b"x" * 64)  # an enormous length prefix
        conn.close()

    t = threading.Thread(target=answer_junk, daemon=True)
    t.start()
    env = {**os.environ, "RAYLITE_TEMP_DIR": str(tmp_path)}
    out = _health_check(f"127.0.0.1:{srv.getsockname()[1]}", env)
    srv.close()
    assert out.returncode == 1 and "not a raylite head" in out.stderr


def test_node_ip_prefers_the_route_towards_the_head_and_never_loopback():
    ip = node_ip.detect_node_ip()
    assert ip == "127.0.0.1" or not node_ip.is_loopback(ip)
    assert node_ip.detect_node_ip("127.0.0.1:6379") == ip  # a loopback route says nothing: look further
    if ip != "127.0.0.1":
        assert node_ip.detect_node_ip(f"{ip}:6379") == ip
        assert ip in node_ip.local_ips()


def test_a_head_without_node_ip_listens_on_every_interface(make_cluster):
    from raylite._core.cluster import cluster as C

    c = make_cluster()
    head = C.start_node(c.config, head=True, port=free_port(), num_cpus=1)  # no node_ip: a pod
    c.nodes.append(head)
    host, port = head.address.rsplit(":", 1)
    assert host == node_ip.detect_node_ip()
    for addr in {host, "127.0.0.1"}:  # other machines, and KubeRay's RAY_ADDRESS=127.0.0.1:6379
        with socket.create_connection((addr, int(port)), timeout=5):
            pass


def test_ray_fault_tolerance_variables_map_onto_redis_persistence():
    env = {"RAY_REDIS_ADDRESS": "redis.ns.svc:6380", "REDIS_PASSWORD": "pw",
           "RAY_external_storage_namespace": "uid-1", "RAY_GCS_RPC_SERVER_RECONNECT_TIMEOUT_S": "600"}
    assert ray_env.persist_from_env("", env) == "redis://redis.ns.svc:6380"
    assert ray_env.persist_from_env("sqlite:/x.db", env) == "sqlite:/x.db"  # --persist wins
    assert ray_env.persist_from_env("", {"RAY_REDIS_ADDRESS": "redis://r:1,redis://r2:2"}) == "redis://r:1"
    assert ray_env.persist_from_env("", {}) == ""
    assert ray_env.daemon_env(True, env) == {"RAYLITE_REDIS_PASSWORD": "pw", "RAYLITE_PERSIST_NAMESPACE": "uid-1",
                                             "RAYLITE_HEAD_RECONNECT_TIMEOUT_S": "600"}
    # a worker has no Redis settings; what is already set (--redis-password) wins
    assert ray_env.daemon_env(False, env) == {"RAYLITE_HEAD_RECONNECT_TIMEOUT_S": "600"}
    assert "RAYLITE_REDIS_PASSWORD" not in ray_env.daemon_env(True, {**env, "RAYLITE_REDIS_PASSWORD": "flag"})


def test_redis_tables_are_kept_under_the_cluster_namespace(monkeypatch):
    import shutil

    if shutil.which("redis-server") is None:
        pytest.skip("redis-server is not installed")
    pytest.importorskip("redis")
    from .test_failures import _pings, _start_redis

    proc, port = _start_redis()
    try:
        import redis

        from .conftest import wait_until

        wait_until(lambda: _pings(redis.Redis(port=port)), 10, "redis-server up")
        from raylite._core.head.persistence import open_persistence

        a = open_persistence(f"redis://127.0.0.1:{port}", namespace="cluster-a")
        b = open_persistence(f"redis://127.0.0.1:{port}", namespace="cluster-b")
        assert isinstance(a, RedisPersistence)
        a.put("kv", b"k", b"from-a")
        assert list(b.load("kv")) == []  # two RayClusters on one Redis never see each other's tables
        assert list(a.load("kv")) == [(b"k", b"from-a")]
        assert redis.Redis(port=port).keys("raylite:cluster-a:*")
        a.close()
        b.close()
    finally:
        proc.kill()
        proc.wait(5)
