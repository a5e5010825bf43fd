"""Autoscaler tests: a real head (num_cpus=0, so every task needs a worker node) and helpers to
start and stop worker node daemons the way a provider or KubeRay's operator would."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys

import pytest

from raylite._core import config as config_mod
from raylite._core.cluster import cluster as C

from ..cluster.conftest import free_port, wait_until  # noqa: F401  (the tests import wait_until from here)

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))




class Head:
    """A head with no CPUs (every task needs a worker node) listening on `node_ip`."""

    def __init__(self, tmp: str, node_ip: str = "127.0.0.1") -> None:
        self.tmp = tmp
        self.config = config_mod.get_config()
        self.node = C.start_node(self.config, head=True, port=free_port(), node_ip=node_ip, num_cpus=0,
                                 include_dashboard=False)
        self.address = self.node.address
        with open(os.path.join(self.node.session_dir, "token")) as f:
            self.token = f.read().strip()

    def stop(self) -> None:
        with contextlib.suppress(Exception):
            C.stop_nodes(self.config, grace_s=5)
        if self.node.process.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(self.node.pid, signal.SIGKILL)
        with contextlib.suppress(Exception):
            self.node.process.wait(10)


def start_worker(head: Head, name: str, ip: str, num_cpus: int = 1, labels: str = "") -> subprocess.Popen:
    """A worker node daemon in the foreground (`start --block`), in its own session."""
    temp = os.path.join(head.tmp, name)
    os.makedirs(temp, exist_ok=True)
    env = {**os.environ, "RAYLITE_TEMP_DIR": temp, "RAYLITE_TOKEN": head.token, "PYTHONPATH": ROOT}
    cmd = [sys.executable, "-m", "raylite.cli", "start", "--block", f"--address={head.address}",
           f"--node-ip-address={ip}", f"--num-cpus={num_cpus}", "--object-store-memory=100000000"]
    if labels:
        cmd.append(f"--labels={labels}")
    with open(os.path.join(temp, "node.log"), "wb") as log:
        return subprocess.Popen(cmd, env=env, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                start_new_session=True)


def stop_worker(proc: subprocess.Popen) -> None:
    if proc.poll() is None:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGTERM)
        try:
            proc.wait(20)
        except subprocess.TimeoutExpired:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.pid, signal.SIGKILL)
            proc.wait(10)


@pytest.fixture
def head(monkeypatch):
    import shutil
    import tempfile

    tmp = tempfile.mkdtemp(prefix="rlas", dir="/tmp")  # short: unix socket paths are limited
    monkeypatch.setenv("RAYLITE_TEMP_DIR", os.path.join(tmp, "head"))
    monkeypatch.delenv("RAYLITE_TOKEN", raising=False)
    monkeypatch.setattr(config_mod, "_CONFIG", None)
    h = Head(tmp)
    monkeypatch.setenv("RAYLITE_TOKEN", h.token)
    monkeypatch.setattr(config_mod, "_CONFIG", None)  # the token is read from the environment
    try:
        yield h
    finally:
        import raylite

        raylite.shutdown()
        h.stop()
        shutil.rmtree(tmp, ignore_errors=True)
