"""TorchTrainer's gloo process group over two network-namespace hosts whose host names do not
resolve (the netns hosts: each a raylite node with 1 CPU). gloo resolves the host name unless
told an interface; there it falls back to 127.0.0.1 and the ranks refuse each other. Each rank
must use the interface holding its node's cluster IP."""

from __future__ import annotations

import json
import sys

import pytest

from tests.cluster import netns_cluster as N

pytest.importorskip("torch")
pytestmark = [pytest.mark.slow, pytest.mark.root, pytest.mark.timeout(600),
              pytest.mark.skipif(not N.available(), reason="needs root and network namespaces")]

DRIVER = """
import json, os, socket
import raylite as ray
from raylite import train
from raylite.train import RunConfig, ScalingConfig
from raylite.train.torch import TorchTrainer

def loop(config):
    import torch
    import torch.distributed as dist
    t = torch.tensor([float(train.get_context().get_world_rank() + 1)])
    dist.all_reduce(t)
    train.report({"sum": float(t.item()), "ifname": os.environ.get("GLOO_SOCKET_IFNAME", ""),
                  "node": ray.get_runtime_context().get_node_id()})

ray.init()
trainer = TorchTrainer(loop, scaling_config=ScalingConfig(num_workers=2, resources_per_worker={"CPU": 1}),
                       run_config=RunConfig(storage_path=os.environ["STORE"], name="netns"))
result = trainer.fit()
try:
    socket.gethostbyname(socket.gethostname())
    resolves = True
except OSError:
    resolves = False
print(json.dumps({"error": repr(result.error) if result.error else None,
                  "metrics": result.metrics, "hostname_resolves": resolves,
                  "nodes": len({n["NodeID"] for n in ray.nodes() if n["Alive"]})}), flush=True)
"""


def test_gloo_all_reduce_over_two_hosts_whose_names_do_not_resolve(tmp_path):
    with N.NetnsCluster(2, prefix="rltn") as c:
        res = c.exec(1, [sys.executable, "-c", DRIVER], {"RAYLITE_ADDRESS": c.address, "RAYLITE_TOKEN": c.token,
                                                   "STORE": str(tmp_path)}, timeout_s=400, check=False)

    assert res.returncode == 0, res.stderr[-3000:]
    out = json.loads(res.stdout.strip().splitlines()[-1])
    assert out["hostname_resolves"] is False and out["nodes"] == 2
    assert out["error"] is None, out["error"]
    assert out["metrics"]["sum"] == 3.0  # 1 + 2: both ranks took part
    assert out["metrics"]["ifname"] == "eth0"  # the interface holding rank 0's host's IP
