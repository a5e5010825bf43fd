"""The head dies under a ray:// program: the program's next call fails with a clear
ConnectionError, and the head's proxy driver does not outlive it."""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import tempfile

import pytest

from raylite._core import config as config_mod
from raylite._core.cluster import cluster as C
from tests.cluster.conftest import wait_until

from .conftest import free_port, proxy_pids


def test_head_killed(monkeypatch):
    import raylite as ray

    if ray.is_initialized():
        ray.shutdown()
    temp_dir = tempfile.mkdtemp(prefix="rlhl", dir="/tmp")
    port = free_port()
    monkeypatch.setenv("RAYLITE_RAY_CLIENT_SERVER_PORT", str(port))
    monkeypatch.delenv("RAYLITE_TOKEN", raising=False)
    cfg = config_mod.get_config().replace(temp_dir=temp_dir, token="")
    head = C.start_node(cfg, head=True, port=free_port(), node_ip="127.0.0.1", num_cpus=1)
    try:
        token = open(os.path.join(head.session_dir, "token")).read().strip()
        monkeypatch.setattr(config_mod, "_CONFIG", cfg.replace(token=token))
        ray.init(f"ray://127.0.0.1:{port}")
        assert ray.get(ray.put(41)) == 41
        (proxy,) = proxy_pids(head.pid)
        os.killpg(head.pid, signal.SIGKILL)  # the head daemon and its process group
        head.process.wait(10)
        wait_until(lambda: not os.path.exists(f"/proc/{proxy}") or _zombie(proxy), 30, "the proxy to exit")
        with pytest.raises(ConnectionError, match="connection to the Ray Client server .* is gone|is closed"):
            ray.get(ray.put(1), timeout=30)
    finally:
        with contextlib.suppress(Exception):
            ray.shutdown()
        with contextlib.suppress(ProcessLookupError):
            os.killpg(head.pid, signal.SIGKILL)
        with contextlib.suppress(Exception):
            head.process.wait(10)
        shutil.rmtree(temp_dir, ignore_errors=True)


def _zombie(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] == "Z"
    except OSError:
        return True
