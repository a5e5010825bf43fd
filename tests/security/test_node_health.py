"""The node's health server (KubeRay's probes, no token) and metrics port (token): what a stranger
can get from them and cost them. A head started as `ray start` under KubeRay starts them
(`--dashboard-agent-listen-port`, `--metrics-export-port`); raylite/_core/node/health.py."""

from __future__ import annotations

import os
import shutil
import socket
import tempfile
import time
import urllib.error
import urllib.request

import pytest

from raylite._core import config as config_mod
from raylite._core.cluster import cluster as C

from . import attacks as A
from .conftest import free_port

TOKEN = "k" * 32
HANDSHAKE_TIMEOUT_S = 2.0


@pytest.fixture(scope="module")
def node():
    temp_dir = tempfile.mkdtemp(prefix="rlh", dir="/tmp")  # short: the session's sockets live in it
    saved = dict(os.environ)
    config = None
    try:  # the environment comes back even when the node fails to start
        os.environ.update({"RAYLITE_TEMP_DIR": temp_dir, "RAYLITE_HANDSHAKE_TIMEOUT_S": str(HANDSHAKE_TIMEOUT_S)})
        config_mod._CONFIG = None
        config = config_mod.get_config()
        for attempt in range(3):  # a free port can be taken (an outgoing connection's) before we bind it
            agent, metrics, dash = free_port(), free_port(), free_port()
            try:
                started = C.start_node(config, head=True, port=free_port(), node_ip="127.0.0.1", num_cpus=1,
                                       token=TOKEN, agent_port=agent, metrics_port=metrics,
                                       include_dashboard=True, dashboard_port=dash)
                break
            except C.StartError as e:
                if "already in use" not in str(e) or attempt == 2:
                    raise
        yield {"pid": started.pid, "agent": agent, "metrics": metrics, "dashboard": dash, "temp_dir": temp_dir}
    finally:
        if config is not None:
            C.stop_nodes(config)
        os.environ.clear()
        os.environ.update(saved)
        config_mod._CONFIG = None
        shutil.rmtree(temp_dir, ignore_errors=True)


def _get(port: int, path: str, headers: dict | None = None, method: str = "GET") -> tuple[int, bytes]:
    req = urllib.request.Request(f"http://127.0.0.1:{port}{path}", headers=headers or {}, method=method)
    try:
        with urllib.request.urlopen(req, timeout=5) as r:
            return r.status, r.read()
    except urllib.error.HTTPError as e:
        return e.code, e.read()


def _target(node, port: int) -> A.Target:
    return A.Target("node health", ("127.0.0.1", port), node["pid"], hello=lambda t: b"",
                    served=lambda: _get(port, "/api/healthz") == (200, b"success"),
                    handshake_timeout_s=HANDSHAKE_TIMEOUT_S)


def test_probe_paths_answer_success_without_a_token(node):
    for path in ("/api/healthz", "/api/local_raylet_healthz", "/api/gcs_healthz"):
        assert _get(node["agent"], path) == (200, b"success"), path
    assert _get(node["agent"], "/api/healthz", method="HEAD")[0] == 200
    # the head's own probe goes to the API server's port, also without a token
    assert _get(node["dashboard"], "/api/gcs_healthz") == (200, b"success")
    assert _get(node["dashboard"], "/api/version")[0] == 401  # nothing else there is open


def test_everything_else_is_a_bare_404(node):
    marker = "zzmarker<script>"
    for path in (f"/{marker}", f"/api/healthz/{marker}", "/metrics", "/api/jobs/", "/api/healthz/../version"):
        assert _get(node["agent"], path) == (404, b""), path
    assert _get(node["agent"], "/api/gcs_healthz?x=1") == (200, b"success")  # a query changes nothing
    for method in ("POST", "PUT", "DELETE"):
        assert _get(node["agent"], "/api/healthz", method=method) == (404, b"")


def test_metrics_need_the_token(node):
    assert _get(node["metrics"], "/metrics")[0] == 401
    assert _get(node["metrics"], "/metrics", {"Authorization": "Bearer wrong"})[0] == 401
    status, body = _get(node["metrics"], "/metrics", {"Authorization": f"Bearer {TOKEN}"})
    assert status == 200 and b"raylite_node_up{" in body and b'resource="CPU"' in body
    status, body = _get(node["metrics"], "/metrics", {"x-ray-authorization": f"Bearer {TOKEN}"})
    assert status == 200
    assert _get(node["metrics"], "/api/healthz")[0] == 404  # the probes live on the agent port only


@pytest.mark.parametrize("payload", ["garbage", "huge", "oversized_head", "pickle"])
def test_bad_requests_are_dropped_and_run_nothing(node, payload, tmp_path):
    t = _target(node, node["agent"])
    marker = tmp_path / "pwned"
    data = {"garbage": A.garbage() + b"\r\n\r\n", "huge": A.huge_prefix(data_bytes=64 << 10),
            "oversized_head": b"GET /api/healthz HTTP/1.1\r\nX: " + b"a" * 20000 + b"\r\n\r\n",
            "pickle": A.framed(A.pickle_creating(str(marker)))}[payload]
    s = A.attack(t, data)
    got = A.received_before_close(s, HANDSHAKE_TIMEOUT_S + 3)
    assert b"success" not in got
    assert not marker.exists()
    assert t.served()


def test_half_sent_request_times_out(node):
    t = _target(node, node["agent"])
    s = A.attack(t, b"GET /api/healthz HTTP/1.1\r\nHost: x\r\n")  # never finished
    assert A.closed_within(s, HANDSHAKE_TIMEOUT_S + 3)
    assert t.served()


def test_many_idle_connections_do_not_lock_out_the_probe(node):
    t = _target(node, node["agent"])
    rss_before = A.rss_bytes(node["pid"])
    socks = A.open_many(t, 300, b"GET /api/healthz HTTP/1.1\r\n")
    try:
        assert t.served()  # the oldest idle ones were closed to let it in
        assert A.still_open(socks) <= 64 + 1
    finally:
        A.close_all(socks)
    assert A.rss_bytes(node["pid"]) - rss_before < 64 << 20
    assert t.served()


def test_a_raw_http11_probe_gets_a_complete_answer(node):
    """What kubelet's HTTP probe and wget read: a status line, then `success`, then the close."""
    with socket.socket() as s:
        s.settimeout(2)
        s.connect(("127.0.0.1", node["agent"]))
        s.sendall(b"GET /api/local_raylet_healthz HTTP/1.1\r\nHost: x\r\n\r\n")
        deadline = time.monotonic() + 5
        got = b""
        while time.monotonic() < deadline:
            chunk = s.recv(4096)
            if not chunk:
                break
            got += chunk
    assert got.startswith(b"HTTP/1.1 200") and got.endswith(b"success")
