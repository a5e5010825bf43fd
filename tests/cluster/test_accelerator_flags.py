"""KubeRay names a pod's accelerator with `--resources` or `--labels`; both become the
`accelerator_type:<TYPE>` resource that `accelerator_type=` asks for."""

from __future__ import annotations

import glob
import json
import os
import shutil
import subprocess
import sys
import tempfile

import pytest

from raylite._core import resources as R
from raylite._core.cluster.driver import query_cluster

from .conftest import free_port


def _cli(env: dict, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "raylite.cli", *args], env=env, capture_output=True,
                          text=True, timeout=120)


@pytest.mark.parametrize("flag, expected", [
    ("--labels=ray.io/accelerator-type=L4,zone=a", "accelerator_type:L4"),
    ('--resources={"accelerator_type:A100": 1}', "accelerator_type:A100"),
])
def test_kuberay_accelerator_spellings_become_the_type_resource(flag, expected):
    temp = tempfile.mkdtemp(prefix="rlacc", dir="/tmp")
    env = dict(os.environ, RAYLITE_TEMP_DIR=temp)
    env.pop("RAYLITE_TOKEN", None)
    port = free_port()
    try:
        out = _cli(env, "start", "--head", f"--port={port}", "--node-ip-address=127.0.0.1",
                   "--num-cpus=1", "--num-gpus=1", flag)
        assert out.returncode == 0, out.stderr
        token = open(glob.glob(os.path.join(temp, "session_*", "token"))[0]).read()
        (node,) = query_cluster(f"127.0.0.1:{port}", token)
        types = {k: v for k, v in R.from_fixed(node["total"]).items() if k.startswith("accelerator_type:")}
        assert types == {expected: 1}, json.dumps(R.from_fixed(node["total"]))
    finally:
        _cli(env, "stop")
        shutil.rmtree(temp, ignore_errors=True)
