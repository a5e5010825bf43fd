"""The limits behind the battery, one listener in this process at a time, with small settings:
bounded pending handshakes (the oldest goes, with a log line), the Hello cap, the cap on
authenticated frames (checked when receiving and when sending), and the Serve channel's
mutual handshake (a process squatting on a replica's port is not trusted)."""

from __future__ import annotations

import asyncio
import logging
import os
import socket
import struct
import threading

import msgpack
import pytest

from raylite._core import config as config_mod
from raylite._core import protocol as P
from raylite._core.transport import rpc
from raylite._core.transport.base import ConnectionBrokenError
from raylite._core.transport.gate import HELLO_MAX_BYTES, HandshakeGate

from . import attacks as A


@pytest.fixture
def small_limits(monkeypatch):
    cfg = config_mod.get_config().replace(handshake_timeout_s=1.0, max_pending_handshakes=4,
                                          max_frame_bytes=1 << 20)
    monkeypatch.setattr(config_mod, "_CONFIG", cfg)
    return cfg


@pytest.fixture
def loop_thread():
    loop = asyncio.new_event_loop()
    t = threading.Thread(target=loop.run_forever, daemon=True)
    t.start()
    yield loop
    loop.call_soon_threadsafe(loop.stop)
    t.join(5)
    loop.close()


def run(loop, coro, timeout_s: float = 10.0):
    return asyncio.run_coroutine_threadsafe(coro, loop).result(timeout_s)


def _kv_get(conn, msg, rid):
    return P.KvReply(b"v" * len(msg.key))


@pytest.fixture
def rpc_server(small_limits, loop_thread):
    async def start():
        server = await rpc.listen("tcp://127.0.0.1:0", {P.KvGet: _kv_get}, token="secret")
        return server, server.sockets[0].getsockname()[1]

    server, port = run(loop_thread, start())
    yield loop_thread, port
    loop_thread.call_soon_threadsafe(server.close)


def _core_hello(token: str) -> bytes:
    data = P.encode(P.Hello(token, P.PROTOCOL_VERSION, "cli"), 0)
    return struct.pack(">I", len(data)) + data


def _target(port: int) -> A.Target:
    return A.Target("rpc", ("127.0.0.1", port), os.getpid(), lambda t: _core_hello(t.decode()), lambda: True, 1.0)


# ------------------------------------------------------------------ the gate itself
def test_gate_evicts_the_oldest_and_logs(caplog):
    gate = HandshakeGate("test listener", 2)
    with caplog.at_level(logging.WARNING, logger="raylite.security"):
        assert gate.admit("a") is None and gate.admit("b") is None
        assert gate.admit("c") == "a"  # full: the oldest stranger goes, the newcomer stays
        gate.release("b")
        assert gate.admit("d") is None and gate.pending == 2
    assert gate.evicted == 1
    assert "test listener" in caplog.text and "max_pending_handshakes" in caplog.text


# ------------------------------------------------------------------ Core RPC
def test_rpc_pending_handshakes_are_bounded_and_real_clients_get_in(rpc_server, caplog):
    loop, port = rpc_server
    t = _target(port)
    with caplog.at_level(logging.WARNING, logger="raylite.security"):
        socks = A.open_many(t, 10)  # silent: never send a Hello
        try:
            async def real_client():
                conn = await rpc.connect(f"tcp://127.0.0.1:{port}", {}, token="secret", role="cli")
                reply = await conn.request(P.KvGet("ns", b"abc"))
                conn.close()
                return reply.value

            assert run(loop, real_client()) == b"vvv"
            A.wait_until(lambda: A.still_open(socks) <= 4, 5, "the oldest silent connections closed")
        finally:
            A.close_all(socks)
    assert "max_pending_handshakes=4" in caplog.text


def test_rpc_hello_cap_is_checked_on_the_prefix(rpc_server):
    _, port = rpc_server
    t = _target(port)
    s = A.attack(t, struct.pack(">I", HELLO_MAX_BYTES + 1))  # nothing else: the prefix alone is refused
    assert A.closed_within(s, 0.9)  # before the 1 s handshake deadline


def test_rpc_authenticated_frames_are_capped(rpc_server):
    loop, port = rpc_server

    async def oversized_from_a_peer():
        conn = await rpc.connect(f"tcp://127.0.0.1:{port}", {}, token="secret", role="cli")
        conn.max_frame_bytes = 1 << 30  # a peer configured differently: our side would send it
        with pytest.raises(ConnectionBrokenError):
            await conn.request(P.KvGet("ns", b"k" * (2 << 20)), timeout_s=5)

    run(loop, oversized_from_a_peer())

    async def oversized_here():
        conn = await rpc.connect(f"tcp://127.0.0.1:{port}", {}, token="secret", role="cli")
        with pytest.raises(ValueError, match="max_frame_bytes"):
            conn.request_future(P.KvGet("ns", b"k" * (2 << 20)))
        reply = await conn.request(P.KvGet("ns", b"ok"))  # the connection is still fine
        conn.close()
        return reply.value

    assert run(loop, oversized_here()) == b"vv"


def test_rpc_wrong_token_is_refused_in_constant_time_compare(rpc_server):
    loop, port = rpc_server
    from raylite._core.transport.base import HandshakeError

    async def wrong():
        with pytest.raises(HandshakeError, match="token"):
            await rpc.connect(f"tcp://127.0.0.1:{port}", {}, token="secreT", role="cli")

    run(loop, wrong())


# ------------------------------------------------------------------ object transfer
def test_bulk_handshakes_cost_no_thread_and_are_bounded(small_limits, tmp_path):
    from raylite._core.transport.bulk import BulkClient, BulkServer

    obj = tmp_path / "obj"
    obj.write_bytes(b"x" * 100_000)
    server = BulkServer("127.0.0.1", "secret", lambda oid: str(obj) if oid == b"a" * 20 else None)
    try:
        host, port = server.address.rsplit(":", 1)
        t = A.Target("bulk", (host, int(port)), os.getpid(), lambda tok: struct.pack(">H", len(tok)) + tok,
                     lambda: True, 1.0)
        threads = threading.active_count()
        socks = A.open_many(t, 40, b"\x00")  # half of the token-length field, then silence
        try:
            client = BulkClient(server.address, "secret")
            assert client.pull(b"a" * 20, str(tmp_path / "copy")) == 100_000
            assert (tmp_path / "copy").read_bytes() == obj.read_bytes()
            client.close()
            assert threading.active_count() - threads <= 2  # the real client's serving thread
            assert server.gate.pending <= 4
            A.wait_until(lambda: A.still_open(socks) == 0, 5, "the handshake deadline closing them all")
        finally:
            A.close_all(socks)
    finally:
        server.close()


# ------------------------------------------------------------------ Serve's direct channel
def _serve_listener(loop, token: bytes, on_frame, limit: int = 4, max_frame_bytes: int = 1 << 20):
    from raylite.serve._internal import wire

    gate = wire.HandshakeGate("test replica", limit)

    async def start():
        server = await asyncio.get_running_loop().create_server(
            lambda: wire.ServerProtocol(token, gate, on_frame, handshake_timeout_s=1.0,
                                        max_frame_bytes=max_frame_bytes), "127.0.0.1", 0)
        return server, server.sockets[0].getsockname()[1]

    server, port = run(loop, start())
    return server, port, gate


def test_serve_channel_round_trip_and_caps(loop_thread):
    from raylite.serve._internal import wire

    token = os.urandom(32)
    got = []

    def on_frame(proto, msg):
        got.append(msg)
        proto.send((msg[1], wire.R_OK, b"reply", 0))

    server, port, gate = _serve_listener(loop_thread, token, on_frame)
    try:
        async def client():
            replies: asyncio.Queue = asyncio.Queue()
            _, proto = await asyncio.get_running_loop().create_connection(
                lambda: wire.ClientProtocol(token, lambda _p, m: replies.put_nowait(m), max_frame_bytes=1 << 20),
                "127.0.0.1", port)
            await asyncio.wait_for(proto.ready, 5)
            proto.send((wire.REQ, 7, wire.KIND_HTTP, ("id", "/", "app", "", False, "__call__"),
                        ("GET", "http", "/", b"", [(b"host", b"x")], ("1.2.3.4", 5), ("h", 80), "1.1", b"")))
            reply = await asyncio.wait_for(replies.get(), 5)
            with pytest.raises(wire.FrameTooLarge):
                proto.send((wire.REQ, 8, wire.KIND_CALL, (), b"x" * (2 << 20)))
            proto.max_frame_bytes = 1 << 30  # as a peer with other settings: the replica drops it
            proto.send((wire.REQ, 9, wire.KIND_CALL, (), b"x" * (2 << 20)))
            await asyncio.wait_for(_closed(proto), 5)
            return reply

        assert run(loop_thread, client()) == (7, wire.R_OK, b"reply", 0)
        assert got[0][3] == ("id", "/", "app", "", False, "__call__") and len(got) == 1
        assert gate.pending == 0
    finally:
        loop_thread.call_soon_threadsafe(server.close)


async def _closed(proto) -> None:
    while not proto.closed:
        await asyncio.sleep(0.01)


def test_serve_client_does_not_trust_a_squatter(loop_thread):
    """A process that took a dead replica's port, without the token, cannot pass as the replica
    (so the client never unpickles what it would send)."""
    from raylite.serve._internal import wire

    class Squatter(asyncio.Protocol):
        def connection_made(self, transport):
            self.transport = transport
            data = msgpack.packb(("challenge", wire.WIRE_VERSION, os.urandom(32)))
            transport.write(struct.pack("!I", len(data)) + data)

        def data_received(self, data):
            welcome = msgpack.packb(("welcome", os.urandom(32)))
            self.transport.write(struct.pack("!I", len(welcome)) + welcome)

    async def scenario():
        server = await asyncio.get_running_loop().create_server(Squatter, "127.0.0.1", 0)
        port = server.sockets[0].getsockname()[1]
        _, proto = await asyncio.get_running_loop().create_connection(
            lambda: wire.ClientProtocol(os.urandom(32), lambda _p, m: None), "127.0.0.1", port)
        with pytest.raises(wire.HandshakeRefused, match="prove"):
            await asyncio.wait_for(proto.ready, 5)
        server.close()

    run(loop_thread, scenario())


def test_serve_pending_handshakes_are_bounded(loop_thread):
    from raylite.serve._internal import wire

    server, port, gate = _serve_listener(loop_thread, os.urandom(32), lambda p, m: None, limit=3)
    try:
        t = A.Target("replica", ("127.0.0.1", port), os.getpid(), lambda tok: b"", lambda: True, 1.0)
        socks = A.open_many(t, 8)
        try:
            A.wait_until(lambda: gate.evicted >= 5, 5, "the oldest pending connections evicted")
            assert gate.pending <= 3
        finally:
            A.close_all(socks)
    finally:
        loop_thread.call_soon_threadsafe(server.close)
    assert isinstance(wire.HELLO_MAX_BYTES, int)


def test_unix_socket_listener_is_private(small_limits, loop_thread, tmp_path):
    from raylite._core.cluster.files import private_dir

    d = tmp_path / "sockets"
    d.mkdir(mode=0o755)
    private_dir(str(d))
    assert (d.stat().st_mode & 0o777) == 0o700
    path = d / "node"

    async def start():
        return await rpc.listen(f"unix://{path}", {}, token="secret")

    server = run(loop_thread, start())
    try:
        assert (path.stat().st_mode & 0o777) == 0o600
        s = socket.socket(socket.AF_UNIX)
        s.connect(str(path))
        assert A.closed_within(s, 3.0)  # silent: closed at the 1 s handshake deadline
    finally:
        loop_thread.call_soon_threadsafe(server.close)
