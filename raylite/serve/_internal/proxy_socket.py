"""The HTTP port outlives the proxy: a tiny holder actor per node owns the listening socket.

Why: when the proxy process dies (SIGKILL, OOM), the kernel closes every socket it owned and
clients get "connection refused" until a new proxy binds the port again. If a second process
holds the same listening socket, the kernel keeps completing handshakes into its backlog while
no proxy runs, and the next proxy accepts them: clients see a short delay, never a refusal.

So each node runs `ProxySocketHolder` (a Core actor that only holds the socket; it runs no user
code and no request passes through it). It binds the port once and hands the socket's file
descriptor to each proxy incarnation over a Unix socket (SCM_RIGHTS) in Serve's 0700 socket
directory, after checking that the peer runs as the same user. The proxy shares its copy the
same way, so a holder restarted while the proxy lives adopts the socket instead of fighting it
for the port. Both actors restart in place when killed (`max_restarts=-1`); the controller
checks on them every round.
"""

from __future__ import annotations

import errno
import os
import socket
import struct
import threading
import time
from typing import Any

_CRED = struct.Struct("3i")  # struct ucred: pid, uid, gid
# connections the share's socket queues before its thread accepts them: a burst of them must not
# make a restarting proxy's connect fail (a Unix socket's connect fails at once when it is full)
LISTEN_BACKLOG = 1024


def bind_socket(host: str, port: int) -> socket.socket:
    """Bind the proxy's listening socket, or raise an error naming the port and the fix."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        sock.bind((host, port))
    except OSError as e:
        sock.close()
        if e.errno == errno.EADDRINUSE:
            raise OSError(errno.EADDRINUSE, (
                f"Serve's HTTP proxy cannot listen on {host}:{port}: the port is already in use by another "
                f"process. Stop that process, or pick another port: serve.start(http_options={{'port': "
                f"{port + 1}}}) or serve.run(app, port={port + 1}) (or `serve run --port`)")) from None
        raise OSError(e.errno, f"Serve's HTTP proxy cannot listen on {host}:{port}: {e.strerror}") from None
    sock.listen(2048)
    sock.setblocking(False)
    return sock


def share_paths(socket_dir: str, token: str) -> tuple[str, str]:
    """(holder's path, proxy's path) where each offers its copy of the listening socket."""
    return os.path.join(socket_dir, f"listen-{token}.h"), os.path.join(socket_dir, f"listen-{token}.p")


def peer_uid(conn: socket.socket) -> int:
    """The user id of the process at the other end of a Unix socket (SO_PEERCRED: set by the
    kernel when the peer connected, so the peer cannot forge it)."""
    _pid, uid, _gid = _CRED.unpack(conn.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED, _CRED.size))
    return uid


class SocketShare:
    """Offers one listening socket's descriptor to same-user processes on a Unix socket path.

    Nothing is ever read from a peer: each connection is answered at once (the descriptor, or
    a close for a peer of another user), so a peer that sends garbage, or nothing, holds no
    memory and no thread."""

    def __init__(self, sock: socket.socket, path: str) -> None:
        self.sock = sock
        self.path = path
        if os.path.exists(path):
            os.unlink(path)
        self._server = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self._server.bind(path)
        os.chmod(path, 0o600)
        self._server.listen(LISTEN_BACKLOG)
        self._closed = False
        self._thread = threading.Thread(target=self._serve, name="serve-socket-share", daemon=True)
        self._thread.start()

    def _serve(self) -> None:
        while not self._closed:
            try:
                conn, _ = self._server.accept()
            except OSError:
                return
            with conn:
                self.offer(conn)

    def offer(self, conn: socket.socket) -> bool:
        """Send the listening socket to `conn` if its process runs as this user; True if sent."""
        try:
            if peer_uid(conn) != os.getuid():
                return False
            socket.send_fds(conn, [b"L"], [self.sock.fileno()])
        except OSError:  # the peer left already
            return False
        return True

    def close(self) -> None:
        self._closed = True
        try:  # wakes the thread blocked in accept() (a plain close would leave it blocked)
            self._server.shutdown(socket.SHUT_RDWR)
        except OSError:
            pass
        try:
            self._server.close()
        except OSError:
            pass
        try:
            os.unlink(self.path)
        except OSError:
            pass
        self._thread.join(timeout=5)


def fetch_socket(path: str, timeout_s: float = 2.0) -> socket.socket | None:
    """The listening socket offered at `path`, or None when nobody offers it there."""
    if not path or not os.path.exists(path):
        return None
    deadline = time.monotonic() + timeout_s
    try:
        with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as conn:
            while True:  # a full accept queue fails a Unix connect at once (EAGAIN): wait our turn
                conn.settimeout(max(0.01, deadline - time.monotonic()))
                try:
                    conn.connect(path)
                    break
                except BlockingIOError:
                    if time.monotonic() >= deadline:
                        return None
                    time.sleep(0.005)
            _msg, fds, _flags, _addr = socket.recv_fds(conn, 4, 1)
    except OSError:
        return None
    if not fds:
        return None
    sock = socket.socket(fileno=fds[0])
    sock.setblocking(False)
    return sock


class ProxySocketHolder:
    """The Core actor holding one node's HTTP listening socket (see the module docstring)."""

    def __init__(self, host: str, port: int, token: str) -> None:
        from raylite.experimental import get_channel_security

        self.error = ""
        self.share: SocketShare | None = None
        self.sock: socket.socket | None = None
        self.host, self.port = host, port
        self.paths = share_paths(get_channel_security().socket_dir, token)
        self._acquire()

    def _acquire(self) -> None:
        holder_path, proxy_path = self.paths
        # restarted while a proxy lives: take its copy (binding again would find the port in use)
        self.sock = fetch_socket(proxy_path)
        if self.sock is None:
            try:
                self.sock = bind_socket(self.host, self.port)
            except OSError as e:
                self.error = str(e.strerror or e)
                return
        self.share = SocketShare(self.sock, holder_path)

    def ready(self) -> dict:
        """{"ok", "error", "path", "port", "pid"}: whether the socket is held, and where it is
        offered. A holder that could not bind tries again on each call (the port may be free now)."""
        if self.share is None:
            self._acquire()
        if self.share is None:
            return {"ok": False, "error": self.error}
        return {"ok": True, "error": "", "path": self.share.path, "port": self.sock.getsockname()[1],
                "pid": os.getpid()}

    def close(self) -> None:
        if self.share is not None:
            self.share.close()
            self.share = None
        if self.sock is not None:
            try:
                self.sock.close()
            except OSError:
                pass


def holder_options(node_id: str) -> dict[str, Any]:
    from raylite.util.scheduling_strategies import NodeAffinitySchedulingStrategy

    return {"name": f"SERVE_PROXY_SOCKET::{node_id}", "namespace": "serve", "lifetime": "detached",
            "num_cpus": 0, "max_restarts": -1,
            "scheduling_strategy": NodeAffinitySchedulingStrategy(node_id, soft=False)}
