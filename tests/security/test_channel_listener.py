"""The compiled-graph channel listener (raylite._core.channels): nothing from a peer is decoded
or kept before it proved it holds the cluster token, and a silent peer is dropped."""

from __future__ import annotations

import socket
import time

import pytest

from raylite._core import channels as C
from tests.conftest import wait_for

TOKEN = "t" * 32


@pytest.fixture
def listener():
    lst = C.ChannelListener(TOKEN, "127.0.0.1")
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


@pytest.mark.parametrize("unix", [True, False])
def test_wrong_token_is_dropped_and_never_registered(listener, unix):
    sock = _raw(listener, unix)
    sock.sendall(b"x" * len(TOKEN) + C.HELLO.pack(6) + b"driver")
    assert _closed_by_peer(sock)
    with pytest.raises(C.ChannelClosedError):
        listener.wait_peer("driver", 0.3)


def test_silent_peer_is_dropped_after_the_handshake_timeout(listener, monkeypatch):
    monkeypatch.setattr(C, "HANDSHAKE_TIMEOUT_S", 0.3)
    sock = _raw(listener)
    sock.sendall(TOKEN[:5].encode())  # half a token, then nothing
    start = time.monotonic()
    assert _closed_by_peer(sock)
    assert time.monotonic() - start < 5


def test_frames_sent_before_the_token_are_not_taken_as_frames(listener):
    sock = _raw(listener)
    frame = C.HEADER.pack(3, 0, C.OK) + b"abc"
    sock.sendall(frame + b"\0" * len(TOKEN))
    assert _closed_by_peer(sock)


def test_right_token_gets_a_working_endpoint(listener):
    ep = C.connect(listener.address(), TOKEN, "driver", timeout_s=10)
    server_side = listener.wait_peer("driver", 10)
    ep.send(7, C.OK, b"payload")
    assert server_side.recv(7) == (C.OK, b"payload")
    server_side.send(9, C.ERROR, b"err")
    assert ep.recv(9) == (C.ERROR, b"err")
    ep.close()
    wait_for(lambda: _eof(server_side), what="the listener side to see the close")


def _eof(ep) -> bool:
    try:
        ep.next_frame(block=False)
    except C.ChannelClosedError:
        return True
    return False
