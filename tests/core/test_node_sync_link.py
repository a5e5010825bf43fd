"""The blocking link from a client's threads to its node (node_sync.py): the same token
handshake as any connection, and room reserved over a link that closes before the object
is sealed comes back (a writer that crashed mid-write)."""

from __future__ import annotations

import os

import pytest

from raylite._core import protocol as P
from raylite._core import runtime
from raylite._core.client.node_sync import BlockingNodeLink
from raylite._core.transport.base import ConnectionBrokenError, HandshakeError
from tests.conftest import wait_for

MIB = 1 << 20


def _path() -> str:
    return runtime.client().node_address[len("unix://"):]


def test_wrong_token_is_refused(cluster):
    link = BlockingNodeLink(_path(), "not-the-token", "worker", timeout_s=10)
    with pytest.raises((HandshakeError, ConnectionBrokenError)):
        link.request(P.RestoreObject(os.urandom(20)))
    link.close()


def test_room_reserved_over_a_closed_link_comes_back(cluster):
    client = runtime.client()
    before = client.node_request(P.GetNodeInfo(), timeout=10).store_used_bytes
    link = BlockingNodeLink(_path(), client.token, "worker", timeout_s=10)
    reply = link.request(P.CreateObject(os.urandom(20), 64 * MIB, client.address))
    assert reply.ok
    assert client.node_request(P.GetNodeInfo(), timeout=10).store_used_bytes >= before + 64 * MIB
    link.close()  # never sealed: the writer is gone
    wait_for(lambda: client.node_request(P.GetNodeInfo(), timeout=10).store_used_bytes <= before,
             what="the reservation to be released")
