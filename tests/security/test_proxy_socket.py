"""Serve's proxy socket holder hands the HTTP listening socket only to processes of its own user
(raylite/serve/_internal/proxy_socket.py). The battery (test_battery.py) attacks a live holder
with garbage and silence; here the uid check itself, with a fake peer credential (and, as root,
with a real process of another user), and a clean close."""

from __future__ import annotations

import os
import shutil
import socket
import stat
import subprocess
import sys
import tempfile
import threading
import time

import pytest

from raylite.serve._internal import proxy_socket as PS


class FakePeer:
    """What `offer` sees of a connection: the kernel's peer credential, and what is sent to it."""

    def __init__(self, uid: int) -> None:
        self.uid = uid
        self.sent: list = []

    def getsockopt(self, level: int, option: int, size: int) -> bytes:
        assert (level, option, size) == (socket.SOL_SOCKET, socket.SO_PEERCRED, PS._CRED.size)
        return PS._CRED.pack(4242, self.uid, self.uid)

    def sendmsg(self, buffers, ancdata=(), flags=0, address=None) -> int:
        self.sent.append((list(buffers), list(ancdata)))
        return sum(len(b) for b in buffers)


@pytest.fixture
def share(tmp_path):
    listening = socket.create_server(("127.0.0.1", 0))
    sh = PS.SocketShare(listening, str(tmp_path / "listen-test.h"))
    yield sh
    sh.close()
    listening.close()


def test_a_peer_of_another_user_gets_nothing(share):
    peer = FakePeer(os.getuid() + 1)
    assert share.offer(peer) is False  # type: ignore[arg-type]
    assert peer.sent == []


def test_root_is_another_user_too_when_the_holder_is_not_root(share, monkeypatch):
    monkeypatch.setattr(PS.os, "getuid", lambda: 1000)
    peer = FakePeer(0)
    assert share.offer(peer) is False  # type: ignore[arg-type]
    assert peer.sent == []


def test_a_peer_of_the_same_user_gets_the_descriptor(share):
    peer = FakePeer(os.getuid())
    assert share.offer(peer) is True  # type: ignore[arg-type]
    [(buffers, ancdata)] = peer.sent
    assert buffers == [b"L"]
    assert ancdata[0][:2] == (socket.SOL_SOCKET, socket.SCM_RIGHTS)


def test_the_share_is_a_private_file_and_serves_the_socket(share):
    assert stat.S_IMODE(os.stat(share.path).st_mode) == 0o600
    got = PS.fetch_socket(share.path)
    assert got is not None and got.getsockname() == share.sock.getsockname()
    got.close()


def test_close_ends_the_serving_thread_and_removes_the_file(share):
    share.close()
    assert not share._thread.is_alive()
    assert not os.path.exists(share.path)
    assert PS.fetch_socket(share.path) is None


def test_a_burst_of_connections_does_not_lock_out_a_real_fetch(share, monkeypatch):
    """Peers that fill the accept queue (the serving thread busy meanwhile): a restarting
    proxy's fetch waits its turn instead of failing (a Unix connect fails at once on a full
    queue), and gets the socket once the queue drains."""
    busy = threading.Event()
    release = threading.Event()
    real_offer = share.offer

    def slow_offer(conn):
        busy.set()
        release.wait(30)
        return real_offer(conn)

    share.offer = slow_offer
    socks = [socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)]
    socks[0].connect(share.path)
    assert busy.wait(10)  # the thread holds the first connection; the rest queue
    for _ in range(PS.LISTEN_BACKLOG + 8):
        s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        s.setblocking(False)
        try:
            s.connect(share.path)
        except BlockingIOError:  # the queue is full now
            s.close()
            break
        socks.append(s)
    else:
        pytest.fail("the accept queue never filled")
    result: list = []
    waited = threading.Event()  # the fetch found the queue full and waits its turn
    real_sleep = time.sleep
    monkeypatch.setattr(PS.time, "sleep", lambda s: (waited.set(), real_sleep(s)))
    fetcher = threading.Thread(target=lambda: result.append(PS.fetch_socket(share.path, timeout_s=30)))
    fetcher.start()
    waited.wait(10)
    for s in socks:  # the flood goes away; the thread drains the queue
        s.close()
    release.set()
    fetcher.join(60)
    assert result and result[0] is not None and result[0].getsockname() == share.sock.getsockname()
    result[0].close()


OTHER_USER = """
import socket, sys
s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
s.settimeout(10)
s.connect(sys.argv[1])
msg, fds, _, _ = socket.recv_fds(s, 4, 1)
print("fds", len(fds))
"""


def _python_for_anyone() -> str | None:
    """An interpreter another user can run (the test's own may live in root's home)."""
    for path in (sys.executable, shutil.which("python3") or "", "/usr/bin/python3"):
        if path and all(os.stat(d).st_mode & 0o001 for d in _parents(path)):
            return path
    return None


def _parents(path: str) -> list[str]:
    out, path = [], os.path.dirname(os.path.realpath(path))
    while path != "/":
        out.append(path)
        path = os.path.dirname(path)
    return out


@pytest.mark.root
@pytest.mark.skipif(os.geteuid() != 0, reason="needs root to run a process as another user")
def test_a_real_process_of_another_user_gets_nothing():
    python = _python_for_anyone()
    if python is None:
        pytest.skip("no Python interpreter that another user may run")
    directory = tempfile.mkdtemp(prefix="rl-share-")
    listening = socket.create_server(("127.0.0.1", 0))
    try:
        os.chmod(directory, 0o755)
        sh = PS.SocketShare(listening, os.path.join(directory, "listen-x.h"))
        os.chmod(sh.path, 0o666)  # let the other user reach it: the uid check must stop it
        out = subprocess.run([python, "-c", OTHER_USER, sh.path], user=65534, capture_output=True,
                             text=True, timeout=60)
        assert out.stdout.strip() == "fds 0", out.stderr
        mine = PS.fetch_socket(sh.path)  # and the holder keeps serving its own user
        assert mine is not None
        mine.close()
        sh.close()
    finally:
        listening.close()
        subprocess.run(["rm", "-rf", directory], check=False)
