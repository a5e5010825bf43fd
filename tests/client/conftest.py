"""A `raylite start --head` head with a Ray Client server on a free port, and this test process
as its ray:// driver (client_remote.py): nothing here attaches to a node as a local driver."""

from __future__ import annotations

import contextlib
import os
import shutil
import tempfile

import pytest

from raylite._core import config as config_mod
from raylite._core.cluster import cluster as C

from ..cluster.conftest import free_port, stop_started_head


@pytest.fixture(scope="module")
def client_head():
    """{"url": "ray://127.0.0.1:PORT", "address": head RPC HOST:PORT, "token", "head"}."""
    import raylite

    if raylite.is_initialized():
        raylite.shutdown()
    mp = pytest.MonkeyPatch()
    temp_dir = tempfile.mkdtemp(prefix="rlcl", dir="/tmp")
    port = free_port()
    mp.delenv("RAYLITE_TOKEN", raising=False)
    cfg = config_mod.get_config().replace(temp_dir=temp_dir, token="")
    mp.setattr(config_mod, "_CONFIG", cfg)
    head = None
    try:
        with pytest.MonkeyPatch.context() as only_here:  # this head's Ray Client port, no later head's
            only_here.setenv("RAYLITE_RAY_CLIENT_SERVER_PORT", str(port))
            head = C.start_node(cfg, head=True, port=free_port(), node_ip="127.0.0.1", num_cpus=4)
        token = open(os.path.join(head.session_dir, "token")).read().strip()
        mp.setattr(config_mod, "_CONFIG", cfg.replace(token=token))  # as RAYLITE_TOKEN would
        yield {"url": f"ray://127.0.0.1:{port}", "port": port, "address": head.address, "token": token,
               "head": head, "temp_dir": temp_dir}
    finally:
        with contextlib.suppress(Exception):
            raylite.shutdown()
        stop_started_head(cfg, head)
        mp.undo()
        shutil.rmtree(temp_dir, ignore_errors=True)


@pytest.fixture
def ray_client(client_head):
    """raylite connected through ray://; disconnected after the test."""
    import raylite

    raylite.init(client_head["url"], namespace="client-tests")
    try:
        yield raylite
    finally:
        raylite.shutdown()


def proxy_pids(head_pid: int) -> list[int]:
    """The proxy driver processes the head's client server started (its children)."""
    out = []
    for pid in os.listdir("/proc"):
        if not pid.isdigit():
            continue
        try:
            with open(f"/proc/{pid}/stat") as f:
                ppid = int(f.read().rsplit(")", 1)[1].split()[1])
            with open(f"/proc/{pid}/cmdline", "rb") as f:
                cmd = f.read()
        except (OSError, ValueError, IndexError):
            continue
        if ppid == head_pid and b"raylite._core.ray_client.proxy" in cmd:
            out.append(int(pid))
    return out
