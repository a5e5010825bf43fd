"""Every message survives encode/decode; handshake refuses a wrong token."""

from __future__ import annotations

import asyncio

import pytest

from raylite._core import protocol as P
from raylite._core.transport import rpc
from raylite._core.transport.base import HandshakeError, parse_address


def _sample(cls):
    values = []
    for name in cls._FIELDS:
        t = cls._TYPES[name]
        if "bytes" in t:
            values.append(b"\x01\x02")
        elif "bool" in t:
            values.append(True)
        elif "int" in t:
            values.append(7)
        elif "float" in t:
            values.append(1.5)
        elif "str" in t:
            values.append("x")
        elif "list" in t:
            values.append([1, "a"])
        elif "dict" in t:
            values.append({"CPU": 10000})
        else:
            values.append(None)
    return cls(*values)


@pytest.mark.parametrize("cls", list(P.MESSAGES.values()), ids=lambda c: c.__name__)
def test_roundtrip(cls):
    msg = _sample(cls)
    decoded, rid = P.decode(P.encode(msg, 42))
    assert decoded == msg and rid == 42


def test_parse_address():
    assert parse_address("unix:///tmp/x") == ("unix", "/tmp/x")
    assert parse_address("10.0.0.1:6379") == ("tcp", ("10.0.0.1", 6379))
    assert parse_address("raylite://h:1") == ("tcp", ("h", 1))
    with pytest.raises(ValueError, match="HOST:PORT"):
        parse_address("nonsense")


def test_request_reply_and_wrong_token(tmp_path):
    async def main():
        address = f"unix://{tmp_path / 'sock'}"

        def on_kv_get(conn, msg, rid):
            return P.KvReply(msg.key.decode().upper())

        server = await rpc.listen(address, {P.KvGet: on_kv_get}, token="secret")
        conn = await rpc.connect(address, {}, token="secret", role="cli")
        reply = await conn.request(P.KvGet("ns", b"abc"))
        assert reply.value == "ABC"
        with pytest.raises(HandshakeError, match="token"):
            await rpc.connect(address, {}, token="wrong", role="cli")
        conn.close()
        server.close()

    asyncio.run(main())
