"""Every TCP listener of a head binds what the node was told (issue 33, finding 4): started with
`--node-ip-address=127.0.0.1`, nothing listens beyond loopback (the Ray Client server bound
0.0.0.0 and ran a stranger's task in no-auth mode); started without it, the ports meant for
other machines listen on every interface, as docs/security.md's table says. The listening
sockets are read from the head's process (psutil), not from what it reports."""

from __future__ import annotations

import shutil
import tempfile

import psutil
import pytest

from raylite._core import config as config_mod
from raylite._core.cluster import cluster as C

from ..cluster.conftest import free_port, stop_started_head


def _listening(pid: int) -> dict[int, set[str]]:
    out: dict[int, set[str]] = {}
    for c in psutil.Process(pid).net_connections("inet"):
        if c.status == psutil.CONN_LISTEN:
            out.setdefault(c.laddr.port, set()).add(c.laddr.ip)
    return out


@pytest.fixture
def start_head(monkeypatch):
    started = []

    def start(node_ip: str):
        cfg = config_mod.get_config().replace(temp_dir=tempfile.mkdtemp(prefix="rlbind", dir="/tmp"), token="")
        ports = {"head": free_port(), "ray_client": free_port(), "health": free_port(),
                 "metrics": free_port(), "dashboard": free_port()}
        monkeypatch.setenv("RAYLITE_RAY_CLIENT_SERVER_PORT", str(ports["ray_client"]))
        monkeypatch.delenv("RAYLITE_TOKEN", raising=False)
        head = C.start_node(cfg, head=True, port=ports["head"], node_ip=node_ip, num_cpus=1,
                            agent_port=ports["health"], metrics_port=ports["metrics"],
                            include_dashboard=True, dashboard_port=ports["dashboard"])
        started.append((cfg, head))
        return head, ports

    yield start
    for cfg, head in started:
        stop_started_head(cfg, head)
        shutil.rmtree(cfg.temp_dir, ignore_errors=True)


def test_a_head_told_127_0_0_1_listens_on_loopback_only(start_head):
    head, ports = start_head("127.0.0.1")
    listening = _listening(head.pid)
    for name, port in ports.items():
        assert listening.get(port) == {"127.0.0.1"}, f"{name} port {port}: {listening.get(port)}"
    beyond = {port: ips for port, ips in listening.items() if ips - {"127.0.0.1"}}
    assert not beyond, f"listening beyond loopback: {beyond} (ports {ports})"


def test_a_head_told_no_ip_listens_as_the_docs_say(start_head):
    head, ports = start_head("")
    listening = _listening(head.pid)
    for name in ("head", "ray_client", "health", "metrics"):
        assert listening.get(ports[name]) == {"0.0.0.0"}, f"{name}: {listening.get(ports[name])}"
    assert listening.get(ports["dashboard"]) == {"127.0.0.1"}  # --dashboard-host's default
