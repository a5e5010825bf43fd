"""The compiled-graph channel listener (raylite._core.transport.channels): nothing from a peer is decoded
or kept before it proved it holds the cluster token, a silent peer is dropped at the cluster's
handshake deadline, strangers cost no thread and at most `max_pending_handshakes` of them are
held, the Unix socket is a private file, and TCP uses TLS where the cluster does."""

from __future__ import annotations

import os
import shutil
import socket
import ssl
import stat
import subprocess
import threading
import time

import pytest

from raylite._core import config as config_mod
from raylite._core.transport import channels as C
from tests.conftest import wait_for

from . import attacks as A

TOKEN = "t" * 32


@pytest.fixture
def small_limits(monkeypatch):
    cfg = config_mod.get_config().replace(handshake_timeout_s=0.5, max_pending_handshakes=4)
    monkeypatch.setattr(config_mod, "_CONFIG", cfg)
    return cfg


@pytest.fixture
def socket_dir(tmp_path):
    d = tmp_path / "sockets"
    d.mkdir(mode=0o700)
    return str(d)


@pytest.fixture
def listener(small_limits, socket_dir):
    lst = C.ChannelListener(TOKEN, "127.0.0.1", socket_dir=socket_dir, ssl_context=None)
    yield lst
    lst.close()


def _raw(listener, unix=True):
    addr = listener.address()
    if unix:
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        sock.connect(addr["unix"])
    else:
        sock = socket.create_connection((addr["host"], addr["port"]))
    sock.settimeout(10)
    return sock


def _closed_by_peer(sock) -> bool:
    try:
        return sock.recv(1) == b""
    except (ConnectionResetError, BrokenPipeError):
        return True


def _hello(peer: str, token: str = TOKEN) -> bytes:
    return token.encode() + C.HELLO.pack(len(peer)) + peer.encode()


@pytest.mark.parametrize("unix", [True, False])
def test_wrong_token_is_dropped_and_never_registered(listener, unix):
    sock = _raw(listener, unix)
    sock.sendall(_hello("driver", "x" * len(TOKEN)))
    assert _closed_by_peer(sock)
    with pytest.raises(C.ChannelClosedError):
        listener.wait_peer("driver", 0.3)


def test_silent_peer_is_dropped_at_the_clusters_handshake_deadline(listener):
    sock = _raw(listener)
    sock.sendall(TOKEN[:5].encode())  # half a token, then nothing
    start = time.monotonic()
    assert _closed_by_peer(sock)
    assert time.monotonic() - start < 3  # handshake_timeout_s=0.5 here (5 s by default)


def test_frames_sent_before_the_token_are_not_taken_as_frames(listener):
    sock = _raw(listener)
    frame = C.HEADER.pack(3, 0, C.OK) + b"abc"
    sock.sendall(frame + b"\0" * len(TOKEN))
    assert _closed_by_peer(sock)


def test_an_overlong_peer_id_is_refused(listener):
    sock = _raw(listener)
    sock.sendall(TOKEN.encode() + C.HELLO.pack(60000) + b"x" * 100)
    assert _closed_by_peer(sock)


def test_right_token_gets_a_working_endpoint(listener):
    ep = C.connect(listener.address(), TOKEN, "driver", timeout_s=10, ssl_context=None)
    server_side = listener.wait_peer("driver", 10)
    ep.send(7, C.OK, b"payload")
    assert server_side.recv(7) == (C.OK, b"payload")
    server_side.send(9, C.ERROR, b"err")
    assert ep.recv(9) == (C.ERROR, b"err")
    ep.close()
    wait_for(lambda: _eof(server_side), what="the listener side to see the close")


def test_frames_right_after_the_hello_stay_for_the_endpoint(listener):
    """The handshake reads exactly the hello: a frame in the same packet is the endpoint's."""
    sock = _raw(listener)
    sock.sendall(_hello("eager") + C.HEADER.pack(2, 5, C.OK) + b"hi")
    ep = listener.wait_peer("eager", 10)
    assert ep.recv(5) == (C.OK, b"hi")
    sock.close()


def test_the_unix_socket_is_a_private_file(listener, socket_dir):
    path = listener.address()["unix"]
    assert os.path.dirname(path) == socket_dir  # a file (not the abstract namespace, which has no mode)
    assert stat.S_IMODE(os.stat(path).st_mode) == 0o600
    listener.close()
    assert not os.path.exists(path)


def test_strangers_cost_no_thread(listener):
    before = threading.active_count()
    socks = A.open_many(A.Target("channel", listener.address()["unix"], os.getpid(), _hello, lambda: True), 40,
                        TOKEN[:3].encode())
    try:
        assert threading.active_count() - before < 3
    finally:
        A.close_all(socks)


def test_pending_handshakes_are_bounded_and_the_oldest_goes(monkeypatch, socket_dir):
    # a long deadline: only the bound can close these connections within the test
    cfg = config_mod.get_config().replace(handshake_timeout_s=60.0, max_pending_handshakes=4)
    monkeypatch.setattr(config_mod, "_CONFIG", cfg)
    listener = C.ChannelListener(TOKEN, "127.0.0.1", socket_dir=socket_dir, ssl_context=None)
    target = A.Target("channel", listener.address()["unix"], os.getpid(), _hello, lambda: True)
    socks = A.open_many(target, 10)
    try:
        wait_for(lambda: A.still_open(socks) <= 4, what="the listener to close the oldest strangers")
        assert A.still_open(socks[-4:]) == 4  # the newest are the ones kept
        assert listener.gate.evicted == 6
        ep = C.connect(listener.address(), TOKEN, "real", timeout_s=10, ssl_context=None)
        assert listener.wait_peer("real", 5) is not None  # a real client gets in through the flood
        ep.close()
    finally:
        A.close_all(socks)
        listener.close()


def _eof(ep) -> bool:
    try:
        ep.next_frame(block=False)
    except C.ChannelClosedError:
        return True
    return False


# ------------------------------------------------------------------ TLS
@pytest.fixture(scope="module")
def tls_pair(tmp_path_factory):
    if shutil.which("openssl") is None:
        pytest.skip("needs the openssl command")
    d = tmp_path_factory.mktemp("tls")
    key, crt = d / "key.pem", d / "cert.pem"
    subprocess.run(["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "1", "-subj",
                    "/CN=raylite-test", "-keyout", str(key), "-out", str(crt)], check=True, capture_output=True)
    server = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH, cafile=str(crt))
    server.load_cert_chain(str(crt), str(key))
    server.verify_mode = ssl.CERT_REQUIRED
    client = ssl.create_default_context(ssl.Purpose.SERVER_AUTH, cafile=str(crt))
    client.check_hostname = False
    client.load_cert_chain(str(crt), str(key))
    return server, client


@pytest.fixture
def tls_listener(small_limits, socket_dir, tls_pair):
    lst = C.ChannelListener(TOKEN, "127.0.0.1", socket_dir=socket_dir, ssl_context=tls_pair[0])
    yield lst
    lst.close()


def _tcp_only(address: dict) -> dict:
    return {**address, "hostname": "another-machine"}  # as a peer on another node sees it


def test_tcp_speaks_only_tls_when_the_cluster_does(tls_listener, tls_pair):
    sock = _raw(tls_listener, unix=False)
    sock.sendall(_hello("plain"))  # the right token, in clear: not a TLS ClientHello
    assert _closed_by_peer(sock)
    with pytest.raises(C.ChannelClosedError):
        tls_listener.wait_peer("plain", 0.5)

    ep = C.connect(_tcp_only(tls_listener.address()), TOKEN, "tls", timeout_s=10, ssl_context=tls_pair[1])
    assert isinstance(ep.sock, ssl.SSLSocket)
    server_side = tls_listener.wait_peer("tls", 10)
    big = os.urandom(3 << 20)  # several TLS records
    ep.send(1, C.OK, big)
    assert server_side.recv(1) == (C.OK, big)
    server_side.send(2, C.OK, b"back")
    ep.sock.setblocking(False)  # as the driver reads: non-blocking, until nothing is left
    deadline = time.monotonic() + 10
    frame = None
    while frame is None and time.monotonic() < deadline:
        frame = ep.next_frame(block=False)
    assert frame == (2, C.OK, b"back")
    ep.close()


def test_a_silent_tls_handshake_is_dropped_at_the_deadline(tls_listener):
    sock = _raw(tls_listener, unix=False)  # connects, never starts TLS
    start = time.monotonic()
    assert _closed_by_peer(sock)
    assert time.monotonic() - start < 3


def test_the_unix_socket_never_uses_tls(tls_listener, tls_pair):
    ep = C.connect(tls_listener.address(), TOKEN, "local", timeout_s=10, ssl_context=tls_pair[1])
    assert ep.sock.family == socket.AF_UNIX and not isinstance(ep.sock, ssl.SSLSocket)
    assert tls_listener.wait_peer("local", 5) is not None
    ep.close()
