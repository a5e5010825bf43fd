"""Ray Client sessions are bounded (issue 33, finding 7): each authenticated connection costs a
proxy driver process on the head, so at most `ray_client_max_sessions` run at once (the next
client is turned away with a message naming the setting), and a session that never sends its
`init` is closed after `ray_client_init_timeout_s`, its process gone."""

from __future__ import annotations

import contextlib
import os
import shutil
import socket
import struct
import subprocess
import sys
import tempfile

import pytest

from raylite._core import config as config_mod
from raylite._core import protocol as P
from raylite._core.cluster import cluster as C

from ..client.conftest import proxy_pids
from ..cluster.conftest import free_port, stop_started_head, wait_until
from .conftest import core_hello

MAX_SESSIONS = 2
INIT_TIMEOUT_S = 8.0


@pytest.fixture(scope="module")
def head():
    cfg = config_mod.get_config().replace(temp_dir=tempfile.mkdtemp(prefix="rlcs", dir="/tmp"), token="")
    mp = pytest.MonkeyPatch()
    port = free_port()
    mp.setenv("RAYLITE_RAY_CLIENT_SERVER_PORT", str(port))
    mp.setenv("RAYLITE_RAY_CLIENT_MAX_SESSIONS", str(MAX_SESSIONS))
    mp.setenv("RAYLITE_RAY_CLIENT_INIT_TIMEOUT_S", str(INIT_TIMEOUT_S))
    mp.delenv("RAYLITE_TOKEN", raising=False)
    started = None
    try:
        started = C.start_node(cfg, head=True, port=free_port(), node_ip="127.0.0.1", num_cpus=1)
        token = open(os.path.join(started.session_dir, "token")).read().strip()
        yield {"head": started, "port": port, "token": token, "cfg": cfg}
    finally:
        mp.undo()
        stop_started_head(cfg, started)
        shutil.rmtree(cfg.temp_dir, ignore_errors=True)


def _hello(port: int, token: str) -> tuple[socket.socket, P.Message]:
    s = socket.create_connection(("127.0.0.1", port), timeout=30)
    s.sendall(core_hello(token.encode()))
    (n,) = struct.unpack(">I", _exactly(s, 4))
    return s, P.decode(_exactly(s, n))[0]


def _exactly(s: socket.socket, n: int) -> bytes:
    buf = b""
    while len(buf) < n:
        chunk = s.recv(n - len(buf))
        assert chunk, "closed"
        buf += chunk
    return buf


def test_sessions_are_capped_and_one_without_init_is_closed(head):
    h, port, token = head["head"], head["port"], head["token"]
    socks = []
    try:
        for _ in range(MAX_SESSIONS):
            s, reply = _hello(port, token)
            socks.append(s)
            assert reply == P.HelloReply(True)
        wait_until(lambda: len(proxy_pids(h.pid)) == MAX_SESSIONS, 30, "the sessions' proxies")
        s, reply = _hello(port, token)
        socks.append(s)
        assert isinstance(reply, P.HelloReply) and not reply.ok
        assert f"maximum of {MAX_SESSIONS} sessions" in reply.error
        assert "RAYLITE_RAY_CLIENT_MAX_SESSIONS" in reply.error
        assert len(proxy_pids(h.pid)) == MAX_SESSIONS  # nothing started for the one turned away
        # neither session said `init`: both are closed by the deadline, their processes gone
        wait_until(lambda: not proxy_pids(h.pid), INIT_TIMEOUT_S + 30, "idle sessions to be closed")
        for s in socks[:MAX_SESSIONS]:
            s.settimeout(10)
            with contextlib.suppress(OSError):
                assert s.recv(1) == b""
    finally:
        for s in socks:
            s.close()


def test_a_real_client_turned_away_is_told_why(head):
    h, port, token = head["head"], head["port"], head["token"]
    wait_until(lambda: not proxy_pids(h.pid), INIT_TIMEOUT_S + 30, "earlier sessions to end")
    socks = [_hello(port, token)[0] for _ in range(MAX_SESSIONS)]
    try:
        env = {**os.environ, "RAYLITE_TOKEN": token}
        code = f"import raylite; raylite.init('ray://127.0.0.1:{port}')"
        out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=120)
        assert out.returncode != 0
        assert "turned this program away" in out.stderr and "RAYLITE_RAY_CLIENT_MAX_SESSIONS" in out.stderr
        assert "token" not in out.stderr.split("turned this program away", 1)[1].lower()
    finally:
        for s in socks:
            s.close()
    # room again: the same program now runs
    wait_until(lambda: not proxy_pids(h.pid), INIT_TIMEOUT_S + 30, "the held sessions to end")
    code = (f"import raylite; raylite.init('ray://127.0.0.1:{port}')\n"
            "print('ok', raylite.get(raylite.remote(lambda: 3).remote()))")
    out = subprocess.run([sys.executable, "-c", code], env={**os.environ, "RAYLITE_TOKEN": token},
                         capture_output=True, text=True, timeout=180)
    assert "ok 3" in out.stdout, out.stderr[-1500:]
