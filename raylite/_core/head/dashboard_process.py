"""The head's HTTP API server as a child process: bound at once, started on first use.

The head's daemon binds the server's TCP socket itself, before it reports READY, so a
port in use is an error at start that names the flag to change (or, for a local
`init()` on the default port, a warning and a free port, as Ray does). Nothing else is
paid up front: the daemon watches the listening socket, and the first connection
starts `python -m raylite.dashboard.server`, which inherits the socket and serves it
(the client's connection waits in the backlog meanwhile). So `init()` is no slower and
a cluster whose API is never used costs no memory for it. If the server exits, the
next connection starts a new one. The server dies with the daemon (parent-death
signal, and `stop()` here).
"""

from __future__ import annotations

import asyncio
import contextlib
import ipaddress
import logging
import os
import socket
import subprocess
import sys
import threading
import time

log = logging.getLogger("raylite.dashboard")


class DashboardPortInUse(RuntimeError):
    """The requested dashboard port is taken; the message names the setting to change."""


def bind(host: str, port: int, *, fallback: bool, flag: str) -> tuple[socket.socket, str]:
    """Bind and listen on host:port. Returns (socket, warning or "").

    `fallback`: a taken port is replaced by a free one with a warning instead of an error.
    """
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    warning = ""
    try:
        sock.bind((host, port))
    except OSError as e:
        if not fallback:
            sock.close()
            raise DashboardPortInUse(
                f"the dashboard port {port} on {host} is in use ({e.strerror or e}). Pick another with "
                f"{flag}, or stop what listens there.") from None
        sock.bind((host, 0))
        warning = (f"the dashboard port {port} on {host} is in use; the dashboard and the jobs API "
                   f"listen on port {sock.getsockname()[1]} instead (set {flag} to choose one).")
    sock.listen(128)
    sock.set_inheritable(True)
    return sock, warning


def url_of(sock: socket.socket) -> str:
    host, port = sock.getsockname()[:2]
    if host in ("0.0.0.0", "::"):
        host = "127.0.0.1"
    return f"http://{'[' + host + ']' if ':' in host else host}:{port}"


def is_loopback(host: str) -> bool:
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return host == "localhost"


class LazyServer:
    """Starts the server process on the first connection to `sock`, and again after it exits."""

    def __init__(self, sock: socket.socket, *, head_address: str, session_dir: str, token: str,
                 node_id: str, cluster_address: str = "") -> None:
        self.sock = sock
        self.head_address = head_address  # how the server reaches the head (its unix socket)
        self.cluster_address = cluster_address or head_address  # how a job's driver joins (TCP if any)
        self.session_dir = session_dir
        self.token = token
        self.node_id = node_id
        self.process: subprocess.Popen[bytes] | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._stopped = False

    def arm(self) -> None:
        """Watch the socket (call on the daemon's loop)."""
        self._loop = asyncio.get_running_loop()
        self._loop.add_reader(self.sock.fileno(), self._on_connection)

    def _on_connection(self) -> None:
        assert self._loop is not None
        self._loop.remove_reader(self.sock.fileno())
        if self._stopped:
            return
        try:
            self.process = self._spawn()
        except OSError:
            log.exception("could not start the dashboard server")
            self._loop.call_later(1.0, self.arm)
            return
        threading.Thread(target=self._wait, args=(self.process,), daemon=True,
                         name="raylite-dashboard-wait").start()

    def _wait(self, proc: subprocess.Popen[bytes]) -> None:
        code = proc.wait()
        if self._stopped or self._loop is None or self._loop.is_closed():
            return
        log.warning("the dashboard server exited (code %s); the next request starts a new one", code)
        with contextlib.suppress(RuntimeError):
            self._loop.call_soon_threadsafe(self.arm)

    def _spawn(self) -> subprocess.Popen[bytes]:
        env = dict(os.environ)
        env["RAYLITE_TOKEN"] = self.token
        logs = os.path.join(self.session_dir, "logs")
        os.makedirs(logs, exist_ok=True)
        cmd = [sys.executable, "-m", "raylite.dashboard.server", "--fd", str(self.sock.fileno()),
               "--head-address", self.head_address, "--session-dir", self.session_dir,
               "--node-id", self.node_id, "--url", url_of(self.sock), "--cluster-address", self.cluster_address]
        with open(os.path.join(logs, "dashboard.log"), "ab") as out:
            return subprocess.Popen(cmd, stdin=subprocess.DEVNULL, stdout=out, stderr=out, env=env,
                                    pass_fds=(self.sock.fileno(),), close_fds=True)

    async def stop(self, timeout_s: float = 5.0) -> None:
        """Stop the server (it stops the jobs it supervises) and close the socket. The head
        keeps serving meanwhile: the server's shutdown still talks to it."""
        self._stopped = True
        if self._loop is not None:
            with contextlib.suppress(Exception):
                self._loop.remove_reader(self.sock.fileno())
        proc = self.process
        if proc is not None and proc.poll() is None:
            proc.terminate()
            deadline = time.monotonic() + timeout_s
            while proc.poll() is None and time.monotonic() < deadline:
                await asyncio.sleep(0.02)
            if proc.poll() is None:
                proc.kill()
        with contextlib.suppress(OSError):
            self.sock.close()
