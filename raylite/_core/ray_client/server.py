"""Ray Client server: `ray.init("ray://HOST:10001")` reaches a cluster through this one port.

Architecture (docs/clusters.md, "Ray Client"):

    laptop: user program                      head machine
      RemoteClient (client_remote.py) ──TCP──▶ ClientServer (this module, in the head daemon)
                                                 │ token checked, then the socket is handed over
                                                 ▼
                                              proxy driver process (client_proxy.py), one per
                                              connection: a real raylite driver, a job of its own
                                                 │ ordinary raylite links (Unix sockets, shm, TCP)
                                                 ▼
                                              head, node, workers, object store

Why a proxy driver per connection, and not a tunnel of every raylite link: a raylite driver
reads large objects zero-copy from its node's shared memory and is reached by workers at its
own address (they report results and borrowings to the owner). A laptop has neither. The proxy
is the owner of everything the remote program creates; the remote side sends it API calls
(task and actor submissions with their pickled arguments, put/get/wait/cancel/kill, head
requests) and receives values back. When the connection ends, for any reason, the proxy shuts
its driver down: the job ends, and its non-detached actors and its objects go with it.

What the listener checks (docs/security.md): nothing a peer sends is decoded before its Hello
(at most HELLO_MAX_BYTES, plain msgpack, constant-time token compare, protocol version) passed;
the Hello must arrive within Config.handshake_timeout_s; at most Config.max_pending_handshakes
unauthenticated connections are held (oldest evicted, gate.py). Only then is a proxy process
started, and it enforces Config.max_frame_bytes on every later frame (rpc.Connection).

With TLS on (RAYLITE_TLS_CERT_FILE: mutual TLS with the cluster certificate, as on every TCP
link), the TLS handshake (within handshake_timeout_s) comes first, then the same Hello; the
encrypted socket cannot be handed to another process, so the server keeps it and relays bytes
between it and the proxy's end of a socket pair.
"""

from __future__ import annotations

import asyncio
import contextlib
import errno
import logging
import os
import socket
import struct
import subprocess
import sys
from typing import Any

from raylite._core import protocol as P
from raylite._core.config import Config
from raylite._core.transport.gate import HELLO_MAX_BYTES, STRANGERS, HandshakeGate
from raylite._core.transport.handshake import check_hello

log = logging.getLogger("raylite.client_server")

_LEN = struct.Struct(">I")
DEFAULT_PORT = 10001  # Ray's, and the `client` port of KubeRay's head service


class ClientServer:
    """Accepts ray:// connections, authenticates them, and starts a proxy driver for each."""

    def __init__(self, config: Config, *, token: str, head_address: str, session_dir: str) -> None:
        self._config = config
        self._token = token
        self._head_address = head_address
        self._session_dir = session_dir
        self._sock: socket.socket | None = None
        self._gate = HandshakeGate("the Ray Client server", config.max_pending_handshakes)
        self._handshakes: dict[socket.socket, asyncio.Task] = {}
        self._proxies: list[subprocess.Popen] = []
        self._accepting: asyncio.Task | None = None
        self._reaping: asyncio.Task | None = None
        self._count = 0
        self.port = 0

    def bind(self, host: str, port: int) -> None:
        """Bind now (a taken port raises OSError at once, before the head reports READY)."""
        sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            sock.bind((host, port))
        except OSError:
            sock.close()
            raise
        sock.listen(1024)
        sock.setblocking(False)
        self._sock = sock
        self.port = sock.getsockname()[1]

    def start(self, ssl_context: Any = None) -> None:
        loop = asyncio.get_running_loop()
        self._accepting = loop.create_task(
            self._accept_loop() if ssl_context is None else self._serve_tls(ssl_context))
        self._reaping = loop.create_task(self._reap_loop())

    async def _serve_tls(self, ssl_context: Any) -> None:
        server = await asyncio.start_server(self._tls_connection, sock=self._sock, ssl=ssl_context,
                                            ssl_handshake_timeout=self._config.handshake_timeout_s)
        async with server:
            await server.serve_forever()

    async def _tls_connection(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        """After the TLS handshake: the Hello, then a relay to a proxy (module docstring)."""
        loop = asyncio.get_running_loop()
        oldest = self._gate.admit(writer, lambda: loop.call_soon_threadsafe(writer.transport.abort))
        if oldest is not None:  # full: the oldest stranger goes
            oldest.transport.abort()  # type: ignore[attr-defined]
        ours = None
        try:
            try:
                head = await asyncio.wait_for(reader.readexactly(4), self._config.handshake_timeout_s)
                (length,) = _LEN.unpack(head)
                if length > HELLO_MAX_BYTES:
                    return
                frame = await asyncio.wait_for(reader.readexactly(length), self._config.handshake_timeout_s)
            except (asyncio.TimeoutError, asyncio.IncompleteReadError, OSError):
                return
            finally:
                self._gate.release(writer)
            error, _role = check_hello(frame, self._token)
            error = error or self._full()
            reply = P.encode(P.HelloReply(not error, error), 0)
            writer.write(_LEN.pack(len(reply)) + reply)
            await writer.drain()
            if error:
                return
            ours, theirs = socket.socketpair()
            try:
                self._spawn_proxy(theirs)
            finally:
                theirs.close()
            proxy_reader, proxy_writer = await asyncio.open_connection(sock=ours)
            ours = None  # the stream owns it now
            await _relay(reader, writer, proxy_reader, proxy_writer)
        except (OSError, asyncio.CancelledError):
            pass
        finally:
            if ours is not None:
                ours.close()
            writer.close()  # a refusal's reply goes out first (bounded: a stranger may not read)
            with contextlib.suppress(Exception):
                await asyncio.wait_for(writer.wait_closed(), 1.0)
            writer.transport.abort()

    async def _reap_loop(self) -> None:
        """Exited proxies are waited for, so none stays a zombie of the head daemon."""
        while True:
            await asyncio.sleep(2.0)
            self._reap()

    async def _accept_loop(self) -> None:
        loop = asyncio.get_running_loop()
        while True:
            try:
                conn, _ = await loop.sock_accept(self._sock)
            except OSError as e:  # EMFILE and friends: keep serving the others
                log.warning("Ray Client server: accept failed: %s", e)
                if e.errno in (errno.EMFILE, errno.ENFILE):  # out of descriptors: strangers make room
                    STRANGERS.shed(max(16, STRANGERS.limit // 8))
                await asyncio.sleep(0.1)
                continue
            conn.setblocking(False)
            self._reap()
            oldest = self._gate.admit(conn, lambda c=conn: loop.call_soon_threadsafe(self._evict, c))
            if oldest is not None:  # full: the oldest stranger goes
                task = self._handshakes.pop(oldest, None)  # type: ignore[arg-type]
                if task is not None:
                    task.cancel()
            self._handshakes[conn] = loop.create_task(self._handshake(conn))

    def _evict(self, conn: socket.socket) -> None:
        """The process-wide budget of strangers chose `conn` (gate.STRANGERS)."""
        task = self._handshakes.pop(conn, None)
        if task is not None:
            task.cancel()

    async def _handshake(self, conn: socket.socket) -> None:
        handed_over = False
        try:
            frame = await asyncio.wait_for(self._read_hello(conn), self._config.handshake_timeout_s)
            if frame is None:
                return
            error, _role = check_hello(frame, self._token)
            error = error or self._full()
            if error:
                await self._send(conn, P.HelloReply(False, error))
                return
            await self._send(conn, P.HelloReply(True))
            self._spawn_proxy(conn)
            handed_over = True
        except (asyncio.TimeoutError, OSError, asyncio.CancelledError):
            pass
        finally:
            self._gate.release(conn)
            self._handshakes.pop(conn, None)
            with contextlib.suppress(OSError):
                if not handed_over:
                    conn.shutdown(socket.SHUT_RDWR)
                conn.close()  # the proxy holds its own copy of a handed-over socket

    async def _read_hello(self, conn: socket.socket) -> bytes | None:
        head = await _read_exactly(conn, 4)
        if head is None:
            return None
        (length,) = _LEN.unpack(head)
        if length > HELLO_MAX_BYTES:  # checked on the prefix: nothing of it is read
            log.info("Ray Client server: a first frame of %d bytes announced; a Hello is at most %d",
                     length, HELLO_MAX_BYTES)
            return None
        return await _read_exactly(conn, length)

    async def _send(self, conn: socket.socket, msg: P.Message) -> None:
        data = P.encode(msg, 0)
        await asyncio.get_running_loop().sock_sendall(conn, _LEN.pack(len(data)) + data)

    def _full(self) -> str:
        """Why an authenticated client is turned away ("" when there is room for its session)."""
        self._reap()
        cap = self._config.ray_client_max_sessions
        if len(self._proxies) < cap:
            return ""
        log.warning("Ray Client server: turned a client away: %d sessions already (ray_client_max_sessions)", cap)
        return (f"the Ray Client server already serves its maximum of {cap} sessions (each is a driver "
                "process on the head); retry when one ends, or raise RAYLITE_RAY_CLIENT_MAX_SESSIONS "
                "on the head")

    def _spawn_proxy(self, conn: socket.socket) -> None:
        self._count += 1
        logs = os.path.join(self._session_dir, "logs")
        os.makedirs(logs, exist_ok=True)
        path = os.path.join(logs, f"ray_client_proxy_{os.getpid()}_{self._count}.log")
        env = dict(os.environ, RAYLITE_TOKEN=self._token)
        fd = conn.fileno()
        with open(path, "ab") as out:
            proc = subprocess.Popen(
                [sys.executable, "-m", "raylite._core.ray_client.proxy", "--fd", str(fd),
                 "--head-address", self._head_address],
                # in the head daemon's process group: a killed head group takes its proxies along
                pass_fds=(fd,), env=env, stdin=subprocess.DEVNULL, stdout=out, stderr=subprocess.STDOUT)
        self._proxies.append(proc)

    def _reap(self) -> None:
        self._proxies = [p for p in self._proxies if p.poll() is None]

    def close(self) -> None:
        """Stop accepting; the proxies end by themselves when their driver loses the head."""
        for task in (self._accepting, self._reaping):
            if task is not None:
                task.cancel()
        for task in list(self._handshakes.values()):
            task.cancel()
        if self._sock is not None:
            self._sock.close()
        for proc in self._proxies:
            with contextlib.suppress(OSError):
                proc.terminate()


async def _relay(client_reader: asyncio.StreamReader, client_writer: asyncio.StreamWriter,
                 proxy_reader: asyncio.StreamReader, proxy_writer: asyncio.StreamWriter) -> None:
    """Copy bytes both ways until either side ends; then end both."""

    async def pipe(src: asyncio.StreamReader, dst: asyncio.StreamWriter) -> None:
        with contextlib.suppress(OSError, ConnectionError):
            while True:
                chunk = await src.read(1 << 18)
                if not chunk:
                    return
                dst.write(chunk)
                await dst.drain()

    tasks = [asyncio.ensure_future(pipe(client_reader, proxy_writer)),
             asyncio.ensure_future(pipe(proxy_reader, client_writer))]
    try:
        await asyncio.wait(tasks, return_when=asyncio.FIRST_COMPLETED)
    finally:
        for t in tasks:
            t.cancel()
        proxy_writer.transport.abort()
        client_writer.transport.abort()


async def _read_exactly(conn: socket.socket, n: int) -> bytes | None:
    loop = asyncio.get_running_loop()
    buf = bytearray()
    while len(buf) < n:
        chunk = await loop.sock_recv(conn, n - len(buf))
        if not chunk:
            return None
        buf += chunk
    return bytes(buf)


def start_for_head(config: Config, *, token: str, head_address: str, session_dir: str,
                   multi_node: bool, bind: str = "0.0.0.0") -> ClientServer | None:
    """The server a head runs, per Config.ray_client_server_port (see there); None when off.

    A `raylite start --head` head binds it where the head's own port listens (`bind`): the
    `--node-ip-address` it was given, else every interface (so KubeRay's `client` service port
    reaches it); the token guards it like the head's own port. A local
    cluster runs one only when RAYLITE_RAY_CLIENT_SERVER_PORT names a port, on 127.0.0.1."""
    port = config.ray_client_server_port
    explicit = port > 0
    if port == 0 or (port < 0 and not multi_node):
        return None
    if port < 0:
        port = DEFAULT_PORT
    from raylite._core.transport.rpc import tls_contexts

    server = ClientServer(config, token=token, head_address=head_address, session_dir=session_dir)
    try:
        server.bind((config.ray_client_server_host or bind) if multi_node else "127.0.0.1", port)
    except OSError as e:
        if explicit:
            raise OSError(e.errno, f"cannot listen for Ray Client on port {port}: {e.strerror or e}. Pick "
                          "another --ray-client-server-port, or 0 to run no Ray Client server") from e
        print(f"raylite: Ray Client's default port {port} is taken ({e.strerror or e}); no Ray Client "
              "server on this head. Pass --ray-client-server-port=PORT to run one.", file=sys.stderr)
        return None
    server.start(tls_contexts()[0])
    return server
