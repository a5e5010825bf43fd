"""The Ray Client server (client_server.py) runs nothing for a stranger: whatever fails the
token check, no proxy driver process is started; an authenticated peer is still bounded by
max_frame_bytes in its proxy. (The generic attacks run in test_battery.py, target ray-client.)"""

from __future__ import annotations

import contextlib
import os
import shutil
import socket
import struct
import tempfile

import pytest

from raylite._core import config as config_mod
from raylite._core import protocol as P
from raylite._core.cluster import cluster as C

from . import attacks as A
from .conftest import core_hello, free_port, ray_client_served

HANDSHAKE_TIMEOUT_S = 2.0
MAX_FRAME_BYTES = 1 << 20


def _proxies(head_pid: int) -> list[int]:
    from tests.client.conftest import proxy_pids

    return proxy_pids(head_pid)


@pytest.fixture(scope="module")
def server():
    # this process's Config is read (and kept) before the head's environment is set: the small
    # limits below are the head's, never those of every test after this one
    cfg = config_mod.get_config().replace(temp_dir=tempfile.mkdtemp(prefix="rlsc", dir="/tmp"), token="")
    temp_dir = cfg.temp_dir
    mp = pytest.MonkeyPatch()
    port = free_port()
    mp.setenv("RAYLITE_RAY_CLIENT_SERVER_PORT", str(port))
    mp.setenv("RAYLITE_HANDSHAKE_TIMEOUT_S", str(HANDSHAKE_TIMEOUT_S))
    mp.setenv("RAYLITE_MAX_FRAME_BYTES", str(MAX_FRAME_BYTES))
    mp.delenv("RAYLITE_TOKEN", raising=False)
    head = None
    try:
        head = C.start_node(cfg, head=True, port=free_port(), node_ip="127.0.0.1", num_cpus=1)
        token = open(os.path.join(head.session_dir, "token")).read().strip()
        target = A.Target("Ray Client server", ("127.0.0.1", port), head.pid, core_hello,
                          lambda: ray_client_served(port, token), HANDSHAKE_TIMEOUT_S)
        yield {"target": target, "token": token, "head": head, "port": port}
    finally:
        if head is not None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(head.pid, 9)
            with contextlib.suppress(Exception):
                head.process.wait(10)
        mp.undo()
        shutil.rmtree(temp_dir, ignore_errors=True)


def _wrong_version_hello(token: bytes) -> bytes:
    data = P.encode(P.Hello(token.decode(), P.PROTOCOL_VERSION + 7, "ray-client"), 0)
    return struct.pack(">I", len(data)) + data


def _no_proxies_left(head_pid: int) -> None:
    """Proxies of earlier real clients exit once their connection closed: wait for that."""
    A.wait_until(lambda: not _proxies(head_pid), 30, "earlier proxies to exit")


def test_strangers_start_no_proxy(server, tmp_path):
    t, head = server["target"], server["head"]
    _no_proxies_left(head.pid)
    proof = tmp_path / "owned"
    attempts = [t.hello(b""), t.hello(b"not-the-cluster-token-0123456789"), A.garbage(),
                A.huge_prefix(0xFFFFFFFF, 1 << 20), A.huge_prefix(2**40, 1 << 20), A.half_frame(),
                A.framed(A.pickle_creating(str(proof))), A.pickle_creating(str(proof))]
    socks = [A.attack(t, data) for data in attempts]
    for s in socks:
        assert A.closed_within(s, HANDSHAKE_TIMEOUT_S + 3)
    assert _proxies(head.pid) == [], "a proxy driver was started for an unauthenticated connection"
    assert not proof.exists()
    assert t.served()  # and a real client is still served


def test_wrong_protocol_version_is_refused_with_the_reason(server):
    _no_proxies_left(server["head"].pid)
    s = A.attack(server["target"], _wrong_version_hello(server["token"].encode()))
    data = A.received_before_close(s, HANDSHAKE_TIMEOUT_S + 3)
    (n,) = struct.unpack(">I", data[:4])
    reply, _ = P.decode(data[4:4 + n])
    assert reply.ok is False and "protocol version mismatch" in reply.error
    assert _proxies(server["head"].pid) == []


def test_an_authenticated_peer_is_still_bounded_by_max_frame_bytes(server):
    head = server["head"]
    with socket.create_connection(("127.0.0.1", server["port"]), timeout=10) as s:
        s.sendall(core_hello(server["token"].encode()))
        s.settimeout(10)
        (n,) = struct.unpack(">I", s.recv(4))
        assert P.decode(s.recv(n))[0] == P.HelloReply(True)
        with contextlib.suppress(OSError):
            s.sendall(struct.pack(">I", MAX_FRAME_BYTES + 1) + b"\0" * (1 << 16))
        assert A.closed_within(s, 20), "the proxy kept reading a frame over max_frame_bytes"
    A.wait_until(lambda: not _proxies(head.pid), 30, "the proxy to exit")
    assert server["target"].served()
