"""File modes of what a cluster writes (token 0600; the sockets directory 0700, every Unix socket
in it 0600), and TLS coverage: with `--tls-cert`, the head's port and a Serve replica's TCP port
speak only TLS (a plain client gets nothing, and is closed at the handshake deadline), while a
driver with the certificate reaches a replica on another node over TLS."""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import stat
import subprocess
import sys
import tempfile

import pytest

from raylite._core import config as config_mod
from raylite._core.cluster import cluster as C

from . import attacks as A
from .conftest import HANDSHAKE_TIMEOUT_S, free_port, serve_hello


def test_token_and_sockets_are_private(secure_cluster):
    session = secure_cluster["head"].session_dir
    assert stat.S_IMODE(os.stat(os.path.join(session, "token")).st_mode) == 0o600
    sockets = os.path.join(session, "sockets")
    assert stat.S_IMODE(os.stat(sockets).st_mode) == 0o700
    names = os.listdir(sockets)
    assert "head" in names and any(n.startswith("serve-") for n in names)
    for name in names:
        mode = os.stat(os.path.join(sockets, name)).st_mode
        if stat.S_ISSOCK(mode):
            assert stat.S_IMODE(mode) == 0o600, f"{name} is {oct(stat.S_IMODE(mode))}"
    replica = secure_cluster["replica"]
    assert os.path.dirname(replica["unix_path"]) == sockets


def test_channel_security_is_the_clusters(secure_cluster):
    """The public facility Serve uses: the cluster's token, the private socket directory, the limits."""
    from raylite.experimental import get_channel_security

    sec = get_channel_security()
    assert sec.check_token(secure_cluster["token"].encode()) and not sec.check_token(b"guess")
    assert os.path.basename(sec.socket_dir) == "sockets"  # this driver's own, on this node
    assert stat.S_IMODE(os.stat(sec.socket_dir).st_mode) == 0o700
    assert sec.server_ssl is None and sec.max_frame_bytes > 0 and sec.handshake_timeout_s > 0
    assert secure_cluster["token"] not in repr(sec)


DRIVER = """
import json, raylite as ray
from raylite import serve
from raylite.serve._internal import client as serve_client
ray.init()
serve.start(http_options={"host": "127.0.0.1", "port": %d})

@serve.deployment(ray_actor_options={"num_cpus": 0, "resources": {"far": 1}})
class Echo:
    def __call__(self, x):
        return "echo:" + x

h = serve.run(Echo.bind(), name="tls", route_prefix=None)
out = [h.remote(str(i)).result() for i in range(3)]
rep = serve_client.state().routers[("tls", "Echo")].replicas[0]
me = ray.get_runtime_context().get_node_id()
print("RESULT " + json.dumps({"out": out, "tcp_addr": rep["tcp_addr"], "remote": rep["node_id"] != me}), flush=True)
import sys
sys.stdin.read()  # the test probes the replica's port meanwhile
serve.shutdown()
"""


@pytest.mark.skipif(shutil.which("openssl") is None, reason="needs the openssl command")
def test_tls_covers_core_and_serve_tcp(tmp_path, monkeypatch):
    key, crt = tmp_path / "key.pem", tmp_path / "cert.pem"
    subprocess.run(["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "1", "-subj",
                    "/CN=raylite-test", "-keyout", str(key), "-out", str(crt)], check=True, capture_output=True)
    temp_dir = tempfile.mkdtemp(prefix="rlt", dir="/tmp")
    monkeypatch.setenv("RAYLITE_HANDSHAKE_TIMEOUT_S", str(HANDSHAKE_TIMEOUT_S))
    monkeypatch.delenv("RAYLITE_TOKEN", raising=False)
    cfg = config_mod.get_config().replace(temp_dir=temp_dir, token="")
    nodes = []
    try:
        head = C.start_node(cfg, head=True, port=free_port(), node_ip="127.0.0.1", num_cpus=1,
                            tls_cert=str(crt), tls_key=str(key))
        nodes.append(head)
        token = open(os.path.join(head.session_dir, "token")).read().strip()
        nodes.append(C.start_node(cfg, head=False, address=head.address, node_ip="127.0.0.1", num_cpus=1,
                                  resources={"far": 1}, token=token, tls_cert=str(crt), tls_key=str(key)))
        # a plain client at the head's port: no TLS, no service; garbage is closed at once, silence
        # at the handshake deadline (the TLS handshake has the same deadline as the Hello)
        host, port = head.address.rsplit(":", 1)
        plain = A.Target("head RPC (TLS)", (host, int(port)), head.pid, serve_hello, lambda: True)
        assert A.closed_within(A.attack(plain, b"\x00\x00\x00\x10" + b"x" * 16), 3)
        assert A.closed_within(A.connect(plain), HANDSHAKE_TIMEOUT_S + 3)

        env = dict(os.environ, RAYLITE_ADDRESS=head.address, RAYLITE_TOKEN=token, RAYLITE_TLS_CERT_FILE=str(crt),
                   RAYLITE_TLS_KEY_FILE=str(key), RAYLITE_TEMP_DIR=temp_dir)
        driver = subprocess.Popen([sys.executable, "-c", DRIVER % free_port()], env=env, stdin=subprocess.PIPE,
                                  stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        try:
            line = ""
            for line in driver.stdout:  # type: ignore[union-attr]
                if line.startswith("RESULT "):
                    break
            assert line.startswith("RESULT "), driver.stderr.read()[-4000:]  # type: ignore[union-attr]
            result = json.loads(line[len("RESULT "):])
            assert result["out"] == ["echo:0", "echo:1", "echo:2"]
            assert result["remote"]  # the driver reached the replica over TCP (TLS), not its Unix socket
            # a plain client at the replica's port: the replica waits for a TLS ClientHello (no
            # challenge in clear), then closes at the handshake deadline
            replica = A.Target("replica TCP (TLS)", tuple(result["tcp_addr"]), 0, serve_hello, lambda: True)
            got = A.received_before_close(A.connect(replica), HANDSHAKE_TIMEOUT_S + 3)
            assert b"challenge" not in got
            s = A.connect(replica)
            assert A.closed_within(s, HANDSHAKE_TIMEOUT_S + 3)
        finally:
            driver.stdin.close()  # type: ignore[union-attr]
            driver.wait(60)
    finally:
        with contextlib.suppress(Exception):
            C.stop_nodes(cfg, grace_s=5)
        for n in nodes:
            with contextlib.suppress(Exception):
                if n.process.poll() is None:
                    os.killpg(n.pid, 9)
                n.process.wait(10)
        shutil.rmtree(temp_dir, ignore_errors=True)
