"""Ray Client on a TLS cluster: the program presents the cluster certificate (mutual TLS, as
every TCP link of the cluster) before its Hello; the head relays the encrypted connection to
the program's proxy driver."""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import subprocess
import sys
import tempfile

import pytest

from raylite._core import config as config_mod
from raylite._core.cluster import cluster as C

from .conftest import free_port

pytestmark = pytest.mark.skipif(shutil.which("openssl") is None, reason="needs the openssl command")

PROGRAM = """
import numpy as np, raylite as ray, sys
ray.init(sys.argv[1])
@ray.remote
def total(a):
    return float(a.sum())
print(ray.get(total.remote(np.ones(3_000_000))), float(ray.get(ray.put(np.ones(2_000_000))).sum()))
"""


def test_ray_client_over_tls(monkeypatch):
    temp_dir = tempfile.mkdtemp(prefix="rlct", dir="/tmp")
    crt, key = os.path.join(temp_dir, "cert.pem"), os.path.join(temp_dir, "key.pem")
    subprocess.run(["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "1", "-subj",
                    "/CN=raylite-test", "-keyout", key, "-out", crt], check=True, capture_output=True)
    port = free_port()
    monkeypatch.setenv("RAYLITE_RAY_CLIENT_SERVER_PORT", str(port))
    monkeypatch.delenv("RAYLITE_TOKEN", raising=False)
    cfg = config_mod.get_config().replace(temp_dir=temp_dir, token="")
    head = C.start_node(cfg, head=True, port=free_port(), node_ip="127.0.0.1", num_cpus=2, tls_cert=crt,
                        tls_key=key)
    try:
        token = open(os.path.join(head.session_dir, "token")).read().strip()
        env = dict(os.environ, RAYLITE_TOKEN=token, RAYLITE_TEMP_DIR=temp_dir, RAYLITE_TLS_CERT_FILE=crt,
                   RAYLITE_TLS_KEY_FILE=key, RAYLITE_RAY_CLIENT_SERVER_PORT="-1")
        url = f"ray://127.0.0.1:{port}"
        out = subprocess.run([sys.executable, "-c", PROGRAM, url], env=env, capture_output=True, text=True,
                             timeout=120)
        assert out.stdout.split() == ["3000000.0", "2000000.0"], out.stderr[-3000:]
        plain = {k: v for k, v in env.items() if not k.startswith("RAYLITE_TLS_")}
        out = subprocess.run([sys.executable, "-c", PROGRAM, url], env=plain, capture_output=True, text=True,
                             timeout=120)
        assert out.returncode != 0 and "requires TLS" in out.stderr, out.stderr[-3000:]
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(head.pid, signal.SIGKILL)
        with contextlib.suppress(Exception):
            head.process.wait(10)
        shutil.rmtree(temp_dir, ignore_errors=True)
