"""TLS on TCP links: nodes and drivers with the cluster certificate work; a plain client is refused."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys

import pytest

from raylite._core.cluster.driver import run_head_request
from raylite._core.protocol import GetClusterInfo
from raylite._core.transport.base import HandshakeError

from .conftest import wait_until

pytestmark = pytest.mark.skipif(shutil.which("openssl") is None, reason="needs the openssl command")


@pytest.fixture
def cert(tmp_path):
    key, crt = tmp_path / "key.pem", tmp_path / "cert.pem"
    subprocess.run(["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "1", "-subj",
                    "/CN=raylite-test", "-keyout", str(key), "-out", str(crt)], check=True,
                   capture_output=True)
    return str(crt), str(key)


def test_tls_cluster(make_cluster, cert):
    crt, key = cert
    c = make_cluster()
    c.add_head(num_cpus=1, tls_cert=crt, tls_key=key)
    c.add_node(num_cpus=1, resources={"w": 1}, tls_cert=crt, tls_key=key)
    env = dict(os.environ, RAYLITE_ADDRESS=c.address, RAYLITE_TOKEN=c.token, RAYLITE_TLS_CERT_FILE=crt,
               RAYLITE_TLS_KEY_FILE=key, RAYLITE_TEMP_DIR=c.config.temp_dir)
    code = """
import numpy as np, raylite as ray
ray.init()
@ray.remote(resources={"w": 1})
def make():
    return np.arange(3_000_000)
assert len([n for n in ray.nodes() if n["Alive"]]) == 2
print(int(ray.get(make.remote()).sum()))
"""
    wait_until(lambda: subprocess.run([sys.executable, "-c", code], env=env, capture_output=True,
                                      timeout=60).returncode == 0, 30, "a TLS driver run")
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=60)
    assert out.stdout.strip() == str(sum(range(3_000_000))), out.stderr
    with pytest.raises(HandshakeError, match="TLS"):
        run_head_request(c.address, c.token, GetClusterInfo(), timeout_s=5)
