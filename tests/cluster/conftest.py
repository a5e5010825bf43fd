"""Real multi-node clusters on loopback: a head and worker nodes as separate processes,
each with its own session dir and ports, started and stopped like `raylite start/stop` does."""

from __future__ import annotations

import contextlib
import os
import signal
import time
from dataclasses import dataclass, field

import pytest

from raylite._core import config as config_mod
from raylite._core.cluster import cluster as C
from raylite._core.cluster.driver import query_cluster
from tests.api_fixtures import free_port  # noqa: F401 - one helper, re-exported


def wait_until(predicate, timeout_s: float = 60.0, what: str = "condition"):
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        value = predicate()
        if value:
            return value
        time.sleep(0.05)
    raise AssertionError(f"timed out after {timeout_s}s waiting for {what}")


def stop_started_head(cfg: config_mod.Config, head: C.StartedNode | None) -> None:
    """Stop what a test's `C.start_node(cfg, head=True, ...)` started: the nodes of its temp dir,
    the head's process group if it outlived them, and the head's shared-memory files."""
    import glob
    import shutil

    with contextlib.suppress(Exception):
        C.stop_nodes(cfg, grace_s=5)
    if head is None:
        return
    with contextlib.suppress(ProcessLookupError):
        if head.process.poll() is None:
            os.killpg(head.pid, 9)
    with contextlib.suppress(Exception):
        head.process.wait(10)
    for path in glob.glob(os.path.join(cfg.shm_dir, f"raylite_{os.path.basename(head.session_dir)}_*")):
        shutil.rmtree(path, ignore_errors=True)


@dataclass
class Cluster:
    config: config_mod.Config
    address: str = ""
    token: str = ""
    nodes: list = field(default_factory=list)  # StartedNode

    def add_head(self, **kw) -> C.StartedNode:
        port = kw.pop("port", None)
        port = free_port() if port is None else port  # 0: the head picks one (as Ray's --port 0)
        node = C.start_node(self.config, head=True, port=port, node_ip="127.0.0.1", token=self.token, **kw)
        self.address = node.address
        self.token = open(os.path.join(node.session_dir, "token")).read()
        self.nodes.append(node)
        return node

    def add_node(self, **kw) -> C.StartedNode:
        node = C.start_node(self.config, head=False, address=self.address, node_ip="127.0.0.1",
                            token=self.token, **kw)
        self.nodes.append(node)
        return node

    def node_table(self) -> list[dict]:
        return query_cluster(self.address, self.token)

    def alive_ids(self) -> set[str]:
        return {n["node_id"].hex() for n in self.node_table() if n["alive"]}

    def kill_node(self, node: C.StartedNode, sig: int = signal.SIGKILL) -> None:
        """Kill the node daemon and every process it started (its process group). Only while
        the daemon (our child) is unreaped: its pid, and so its group, cannot be anyone else's."""
        if node.process.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(node.pid, sig)
        with contextlib.suppress(Exception):
            node.process.wait(10)

    def shutdown(self) -> None:
        with contextlib.suppress(Exception):
            C.stop_nodes(self.config, grace_s=5)
        for n in self.nodes:
            self.kill_node(n)
        remove_node_stores(self.nodes, self.config.shm_dir)


def remove_node_stores(nodes, shm_dir: str) -> None:
    """A killed node leaves its shared-memory store behind: remove it (named after its session)."""
    import glob
    import shutil

    for n in nodes:
        for path in glob.glob(os.path.join(shm_dir, f"raylite_{os.path.basename(n.session_dir)}_*")):
            shutil.rmtree(path, ignore_errors=True)


@pytest.fixture
def make_cluster(monkeypatch):
    """Factory of clusters whose files live under a fresh short temp dir (unix socket paths
    must stay short); all processes stopped and files removed after the test."""
    import shutil
    import tempfile

    made: list[Cluster] = []
    temp_dir = tempfile.mkdtemp(prefix="rlc", dir="/tmp")
    cfg = config_mod.get_config().replace(temp_dir=temp_dir, token="")
    monkeypatch.setattr(config_mod, "_CONFIG", cfg)  # drivers in this process read it
    monkeypatch.delenv("RAYLITE_TOKEN", raising=False)

    def make() -> Cluster:
        c = Cluster(cfg)
        made.append(c)
        return c

    try:
        yield make
    finally:
        import raylite

        with contextlib.suppress(Exception):
            raylite.shutdown()
        for c in made:
            c.shutdown()
        shutil.rmtree(temp_dir, ignore_errors=True)


@pytest.fixture
def three_nodes(make_cluster):
    """Head (1 CPU, resource head_r) + two workers (1 CPU each, resources w1 / w2)."""
    c = make_cluster()
    c.add_head(num_cpus=1, resources={"head_r": 1})
    c.add_node(num_cpus=1, resources={"w1": 1})
    c.add_node(num_cpus=1, resources={"w2": 1})
    wait_until(lambda: len(c.alive_ids()) == 3, what="three alive nodes")
    return c
