"""Ray Client from a machine that reaches only the head's client port (root only).

Two network-namespace hosts (../shared/tools/netns-hosts): the head runs on `client1` with every
raylite port bound to that host's loopback (--node-ip-address=127.0.0.1) and its Ray Client
server, by explicit choice (RAYLITE_RAY_CLIENT_SERVER_HOST=0.0.0.0), on all interfaces; the program runs on `client2`, a "laptop" whose connections to the
head's RPC, node and dashboard ports fail, and still runs tasks, actors and large objects
through ray://CLIENT1:10001."""

from __future__ import annotations

import glob
import json
import os
import shutil
import subprocess
import sys
import tempfile
import textwrap

import pytest

from tests.cluster import netns_cluster as N

pytestmark = [pytest.mark.slow,
              pytest.mark.skipif(not N.available(), reason="needs root and network namespaces (netns-hosts)")]

PREFIX = "client"  # hosts client1 (head) and client2 (laptop); unique to this test

LAPTOP = textwrap.dedent("""
    import json, os, socket, sys
    import numpy as np
    head_ip = sys.argv[1]
    blocked = {}
    for port in (6379, 8265, int(sys.argv[2])):  # head RPC, dashboard, node RPC
        try:
            socket.create_connection((head_ip, port), timeout=3).close()
            blocked[port] = False
        except OSError:
            blocked[port] = True
    import raylite as ray
    ray.init(f"ray://{head_ip}:10001")

    @ray.remote
    def square(x):
        return x * x

    @ray.remote
    class Counter:
        def __init__(self):
            self.n = 0
        def add(self, k):
            self.n += k
            return self.n

    @ray.remote
    def total(a):
        return float(a.sum())

    arr = np.arange(4_000_000, dtype=np.float64)
    ref = ray.put(arr)
    c = Counter.remote()
    out = {"blocked": blocked, "squares": ray.get([square.remote(i) for i in range(5)]),
           "counter": [ray.get(c.add.remote(2)) for _ in range(2)], "sum": ray.get(total.remote(ref)),
           "roundtrip": bool(np.array_equal(ray.get(ref), arr)), "nodes": len(ray.nodes())}
    try:
        ray.get(ray.remote(lambda: 1 / 0).remote())
    except ZeroDivisionError:
        out["zero_division"] = True
    ray.shutdown()
    print(json.dumps(out))
""")


def _run(argv: list[str], timeout_s: float = 120) -> subprocess.CompletedProcess:
    res = subprocess.run(argv, capture_output=True, text=True, timeout=timeout_s)
    if res.returncode != 0:
        raise AssertionError(f"{' '.join(argv[:6])} failed:\n{res.stdout[-3000:]}\n{res.stderr[-3000:]}")
    return res


def test_a_laptop_that_reaches_only_the_client_port():
    base = tempfile.mkdtemp(prefix="rlcn", dir="/tmp")
    try:
        out = _run([N.TOOL, "up", "2", "--prefix", PREFIX]).stdout
        ips = dict(line.split()[:2] for line in out.splitlines() if line.strip())
        head_ip = ips[f"{PREFIX}1"]

        def env(host: int, **extra: str) -> list[str]:
            values = {"RAYLITE_TEMP_DIR": os.path.join(base, f"h{host}"), "PYTHONPATH": N.REPO, **extra}
            return ["env", *[f"{k}={v}" for k, v in values.items()]]

        node_port = "46001"
        _run([N.TOOL, "exec", f"{PREFIX}1", "--", *env(1, RAYLITE_RAY_CLIENT_SERVER_HOST="0.0.0.0"),
              sys.executable, "-m", "raylite.cli", "start",
              "--head", "--node-ip-address=127.0.0.1", "--port=6379", "--num-cpus=2",
              f"--node-manager-port={node_port}", "--include-dashboard=true", "--ray-client-server-port=10001"])
        token = open(glob.glob(os.path.join(base, "h1", "session_*", "token"))[0]).read().strip()
        res = _run([N.TOOL, "exec", f"{PREFIX}2", "--", *env(2, RAYLITE_TOKEN=token), sys.executable, "-c",
                    LAPTOP, head_ip, node_port], timeout_s=180)
        result = json.loads(res.stdout.strip().splitlines()[-1])
        assert result["blocked"] == {"6379": True, "8265": True, node_port: True}, result
        assert result["squares"] == [0, 1, 4, 9, 16] and result["counter"] == [2, 4]
        assert result["sum"] == float(sum(range(4_000_000))) and result["roundtrip"]
        assert result["nodes"] == 1 and result.get("zero_division")
    finally:
        subprocess.run([N.TOOL, "down", "--prefix", PREFIX], capture_output=True)
        N.remove_stores(base)
        shutil.rmtree(base, ignore_errors=True)
