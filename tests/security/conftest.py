"""One real cluster for the security battery: a head started as `raylite start --head` does (head
RPC and node RPC on TCP and on their Unix sockets, object transfer, the API server), this
process as its driver, an actor (its worker's RPC port, and a compiled-graph channel listener
opened in it as a compiled graph opens one), and Serve with one deployment (its replica's TCP
port and Unix socket, the HTTP proxy, and the proxy socket holder's and the proxy's Unix
sockets). Each listener is a `Target` (attacks.py). Handshakes time out after 2 s here, and so
do the HTTP proxy's header and keep-alive timeouts, so the half-sent-frame checks stay short."""

from __future__ import annotations

import asyncio
import contextlib
import os
import shutil
import socket
import struct
import tempfile
import urllib.request

import cloudpickle
import msgpack
import pytest

from raylite._core import config as config_mod
from raylite._core import protocol as P
from raylite._core.cluster import cluster as C

from ..cluster.conftest import free_port, stop_started_head
from .attacks import Target, wait_until

HANDSHAKE_TIMEOUT_S = 2.0


# ------------------------------------------------------------------ first frames, per protocol
def core_hello(token: bytes) -> bytes:
    data = P.encode(P.Hello(token.decode(errors="replace"), P.PROTOCOL_VERSION, "cli"), 0)
    return struct.pack(">I", len(data)) + data


def bulk_hello(token: bytes) -> bytes:
    return struct.pack(">H", len(token)) + token


def serve_hello(token: bytes) -> bytes:
    """A hello without reading the challenge first: its proof cannot match, as a stranger's."""
    import hashlib
    import hmac

    nonce = os.urandom(32)
    data = msgpack.packb(("hello", nonce, hmac.new(token, b"client" + nonce, hashlib.sha256).digest()))
    return struct.pack("!I", len(data)) + data


def channel_hello(token: bytes) -> bytes:
    from raylite._core.transport import channels

    return token + channels.HELLO.pack(len(b"driver")) + b"driver"


def no_hello(token: bytes) -> bytes:
    """Listeners that take no token (the proxy socket share checks the peer's uid instead)."""
    return b""


def http_hello(token: bytes) -> bytes:
    return (b"GET /api/version HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer " + token + b"\r\n\r\n")


# ------------------------------------------------------------------ real clients
def core_served(address: str, token: str) -> bool:
    from raylite._core.cluster.driver import run_head_request
    from raylite._core.transport.base import RemoteError

    try:
        run_head_request(address, token, P.GetClusterInfo(), timeout_s=10)
    except RemoteError:  # a node has no handler for it: it answered all the same
        pass
    except ConnectionError as e:  # ... which run_head_request reports as "not a raylite head"
        if "answered, but it is not a raylite head" not in str(e):
            raise
    return True


def ray_client_served(port: int, token: str) -> bool:
    """Authenticated: the server hands the connection to a proxy driver, which answers a call
    (an error, since the client has not called "init": enough to show it is served)."""
    with socket.create_connection(("127.0.0.1", port), timeout=20) as s:
        s.sendall(core_hello(token.encode()))
        s.settimeout(20)
        replies = []
        buf = b""
        sent = False
        while len(replies) < 2:
            chunk = s.recv(65536)
            if not chunk:
                return False
            buf += chunk
            while len(buf) >= 4 and len(buf) >= 4 + struct.unpack(">I", buf[:4])[0]:
                n = struct.unpack(">I", buf[:4])[0]
                replies.append(P.decode(buf[4:4 + n])[0])
                buf = buf[4 + n:]
            if replies and not sent:
                assert replies[0] == P.HelloReply(True), replies[0]
                data = P.encode(P.ClientCall("gen_len", [b"x"]), 1)
                s.sendall(struct.pack(">I", len(data)) + data)
                sent = True
        return isinstance(replies[1], P.ClientCallReply) and not replies[1].ok


def bulk_served(address: str, token: str) -> bool:
    from raylite._core.transport.bulk import BulkClient

    client = BulkClient(address, token)
    try:
        return client.pull(os.urandom(20), os.path.join(tempfile.gettempdir(), "unused")) is None
    finally:
        client.close()


def channel_served(probe, address: dict, token: str) -> bool:
    """An authenticated channel connection, one frame each way through the listener's process."""
    from raylite._core.transport import channels

    peer = f"probe-{os.urandom(4).hex()}"
    ep = channels.connect(address, token, peer, timeout_s=10)
    try:
        echoed = probe.echo_once.remote(peer)
        ep.send(1, channels.OK, b"ping")
        assert ep.recv(1) == (channels.OK, b"gnip")
        import raylite

        return raylite.get(echoed, timeout=30)
    finally:
        ep.close()


def share_served(path: str, port: int) -> bool:
    from raylite.serve._internal.proxy_socket import fetch_socket

    sock = fetch_socket(path)
    try:
        return sock is not None and sock.getsockname()[1] == port
    finally:
        if sock is not None:
            sock.close()


def proxy_served(port: int) -> bool:
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/sec", timeout=10) as r:
        return r.status == 200 and r.read().startswith(b"echo:")


def http_served(url: str, token: str) -> bool:
    req = urllib.request.Request(url + "/api/version", headers={"Authorization": f"Bearer {token}"})
    with urllib.request.urlopen(req, timeout=10) as r:
        return r.status == 200


def serve_served(info: dict, token: bytes, unix: bool) -> bool:
    """A fresh connection to the replica, the full handshake, one handle call."""
    from raylite.serve._internal import wire

    async def call() -> object:
        loop = asyncio.get_running_loop()
        replies: asyncio.Queue = asyncio.Queue()
        factory = lambda: wire.ClientProtocol(token, lambda _p, m: replies.put_nowait(m))  # noqa: E731
        if unix:
            _, proto = await loop.create_unix_connection(factory, info["unix_path"])
        else:
            _, proto = await loop.create_connection(factory, *info["tcp_addr"])
        await asyncio.wait_for(proto.ready, 10)
        meta = ("rid", "/sec", "sec", "", False, "__call__")
        proto.send((wire.REQ, 1, wire.KIND_CALL, meta, cloudpickle.dumps((("ping",), {}))))
        rid, code, payload, _ = await asyncio.wait_for(replies.get(), 10)
        while code == wire.R_STARTED:  # the replica's "entering user code" notice comes first
            rid, code, payload, _ = await asyncio.wait_for(replies.get(), 10)
        proto.close()
        assert code == wire.R_OK, code
        return cloudpickle.loads(payload)

    return asyncio.run(call()) == "echo:ping"


# ------------------------------------------------------------------ the cluster
@pytest.fixture(scope="module")
def secure_cluster():
    import raylite
    from raylite import serve

    if raylite.is_initialized():
        raylite.shutdown()
    mp = pytest.MonkeyPatch()
    temp_dir = tempfile.mkdtemp(prefix="rls", dir="/tmp")
    mp.setenv("RAYLITE_HANDSHAKE_TIMEOUT_S", str(HANDSHAKE_TIMEOUT_S))
    ray_client_port = free_port()
    mp.delenv("RAYLITE_TOKEN", raising=False)
    cfg = config_mod.get_config().replace(temp_dir=temp_dir, token="")  # the daemons read the env
    mp.setattr(config_mod, "_CONFIG", cfg)
    head = None
    try:
        with pytest.MonkeyPatch.context() as only_here:  # the head's Ray Client server; not later heads'
            only_here.setenv("RAYLITE_RAY_CLIENT_SERVER_PORT", str(ray_client_port))
            head = C.start_node(cfg, head=True, port=free_port(), node_ip="127.0.0.1", num_cpus=4,
                                include_dashboard=True, dashboard_port=free_port())
        token = open(os.path.join(head.session_dir, "token")).read().strip()
        raylite.init(address=head.address)
        serve.start(http_options={"host": "127.0.0.1", "port": free_port(),
                                  "header_read_timeout_s": HANDSHAKE_TIMEOUT_S,
                                  "keep_alive_timeout_s": HANDSHAKE_TIMEOUT_S})

        @serve.deployment
        class Echo:
            def __call__(self, x: str) -> str:
                return f"echo:{x}"

        handle = serve.run(Echo.bind(), name="sec", route_prefix="/sec")
        assert handle.remote("hi").result() == "echo:hi"
        from raylite.serve._internal import client as serve_client

        replica = serve_client.state().routers[("sec", "Echo")].replicas[0]
        nodes = _nodes(head.address, token)
        node_id = nodes[0]["node_id"].hex()
        holder = raylite.get(raylite.get_actor(f"SERVE_PROXY_SOCKET::{node_id}", namespace="serve").ready.remote())
        proxy = raylite.get(raylite.get_actor(f"SERVE_PROXY::{node_id}", namespace="serve").ready.remote())
        assert holder["ok"] and proxy["ok"], (holder, proxy)
        probe = raylite.remote(num_cpus=0)(_Probe).remote()
        yield {"head": head, "token": token, "config": cfg, "nodes": nodes, "replica": replica,
               "handle": handle, "dashboard_url": head.dashboard_url, "holder": holder, "proxy": proxy,
               "probe": probe, "probe_info": raylite.get(probe.where.remote()),
               "ray_client_port": ray_client_port}
    finally:
        with contextlib.suppress(Exception):
            serve.shutdown()
        with contextlib.suppress(Exception):
            raylite.shutdown()
        stop_started_head(cfg, head)
        mp.undo()
        shutil.rmtree(temp_dir, ignore_errors=True)


class _Probe:
    """An actor: its worker's RPC listener, and a compiled-graph channel listener opened the
    way a compiled graph opens one on its actors (raylite._core.worker.cgraph_runner.GraphHost)."""

    def __init__(self) -> None:
        from raylite._core import runtime
        from raylite._core.worker.cgraph_runner import GraphHost

        client = runtime.client()
        self.host = GraphHost(client.token, client.node_ip, os.getpid(),
                              os.path.join(client.session_dir, "sockets"))
        self.channel = self.host.open("battery", "Probe")
        self.rpc = client.address

    def where(self) -> dict:
        return {"pid": os.getpid(), "rpc": self.rpc, "channel": self.channel}

    def echo_once(self, peer: str) -> bool:

        ep = self.host._listener.wait_peer(peer, 10)  # type: ignore[union-attr]
        status, payload = ep.recv(1)
        ep.send(1, status, payload[::-1])
        return True


def _nodes(address: str, token: str) -> list[dict]:
    from raylite._core.cluster.driver import query_cluster

    return [n for n in query_cluster(address, token) if n["alive"]]


def dashboard_pid(head_pid: int, url: str, token: str) -> int:
    """The API server process (started on the first request, a child of the head's daemon)."""
    http_served(url, token)

    def find() -> int:
        for pid in os.listdir("/proc"):
            if not pid.isdigit():
                continue
            try:
                with open(f"/proc/{pid}/stat") as f:
                    ppid = int(f.read().rsplit(")", 1)[1].split()[1])
                with open(f"/proc/{pid}/cmdline", "rb") as f:
                    cmd = f.read()
            except (OSError, ValueError, IndexError):
                continue
            if ppid == head_pid and b"raylite.dashboard.server" in cmd:
                return int(pid)
        return 0

    return wait_until(find, 20, "the API server process")


def build_targets(c: dict) -> dict[str, Target]:
    token, head = c["token"], c["head"]
    tok = token.encode()
    node = c["nodes"][0]
    node_tcp = node["address"]
    host_port = node_tcp[len("tcp://"):] if node_tcp.startswith("tcp://") else node_tcp
    nh, np_ = host_port.rsplit(":", 1)
    bh, bp = node["data_address"].rsplit(":", 1)
    dh, dp = c["dashboard_url"][len("http://"):].rsplit(":", 1)
    rep = c["replica"]
    t = HANDSHAKE_TIMEOUT_S
    targets = {
        "head-rpc": Target("head RPC", ("127.0.0.1", int(head.address.rsplit(":", 1)[1])), head.pid, core_hello,
                           lambda: core_served(head.address, token), t),
        "node-rpc": Target("node RPC", (nh, int(np_)), head.pid, core_hello,
                           lambda: core_served(host_port, token), t),
        "object-transfer": Target("object transfer", (bh, int(bp)), head.pid, bulk_hello,
                                  lambda: bulk_served(node["data_address"], token), t),
        "serve-replica-tcp": Target("Serve replica TCP", tuple(rep["tcp_addr"]), rep["pid"], serve_hello,
                                    lambda: serve_served(rep, tok, unix=False), t),
        "serve-replica-unix": Target("Serve replica Unix socket", rep["unix_path"], rep["pid"], serve_hello,
                                     lambda: serve_served(rep, tok, unix=True), t),
        "ray-client": Target("Ray Client server", ("127.0.0.1", c["ray_client_port"]), head.pid, core_hello,
                             lambda: ray_client_served(c["ray_client_port"], token), t),
        "api-http": Target("API/dashboard HTTP", (dh, int(dp)), 0, http_hello,
                           lambda: http_served(c["dashboard_url"], token), t, extra={"http": True}),
    }
    head_unix = os.path.join(head.session_dir, "sockets", "head")
    node_unix = node["local_address"].split("://", 1)[-1]
    info, probe = c["probe_info"], c["probe"]
    worker_rpc = info["rpc"].split("://", 1)[1]
    wh, wp = worker_rpc.rsplit(":", 1)
    chan = info["channel"]
    chan_tcp = {**chan, "hostname": "another-machine"}  # as a node elsewhere reaches it: TCP
    holder, proxy = c["holder"], c["proxy"]
    proxy_share = holder["path"][:-len(".h")] + ".p"
    no_token = "takes no token: the peer's uid is checked (test_proxy_socket.py)"
    public = "public by design: no token (its limits: test_serve_proxy.py)"
    targets.update({
        "head-rpc-unix": Target("head RPC Unix socket", head_unix, head.pid, core_hello,
                                lambda: core_served("unix://" + head_unix, token), t),
        "node-rpc-unix": Target("node RPC Unix socket", node_unix, head.pid, core_hello,
                                lambda: core_served("unix://" + node_unix, token), t),
        "worker-rpc": Target("worker RPC", (wh, int(wp)), info["pid"], core_hello,
                             lambda: core_served(worker_rpc, token), t),
        "channel-tcp": Target("compiled-graph channel TCP", (chan["host"], chan["port"]), info["pid"],
                              channel_hello, lambda: channel_served(probe, chan_tcp, token), t),
        "channel-unix": Target("compiled-graph channel Unix socket", chan["unix"], info["pid"], channel_hello,
                               lambda: channel_served(probe, chan, token), t),
        "serve-http-proxy": Target("Serve HTTP proxy", ("127.0.0.1", proxy["port"]), proxy["pid"], http_hello,
                                   lambda: proxy_served(proxy["port"]), t,
                                   extra={"http": True, "no_token": public}),
        "serve-socket-holder": Target("Serve proxy socket holder", holder["path"], holder["pid"], no_hello,
                                      lambda: share_served(holder["path"], holder["port"]), t,
                                      extra={"no_token": no_token}),
        "serve-proxy-share": Target("Serve proxy's socket share", proxy_share, proxy["pid"], no_hello,
                                    lambda: share_served(proxy_share, holder["port"]), t,
                                    extra={"no_token": no_token}),
    })
    return targets
