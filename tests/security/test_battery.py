"""The same attacks against every listener of a running cluster (attacks.py; the cluster and the
listeners are in conftest.py): each must refuse what a stranger sends without decoding it,
close what stalls, stay flat in memory and threads, and keep serving real clients."""

from __future__ import annotations

import pytest

from . import attacks as A
from .conftest import build_targets, dashboard_pid

TARGETS = ["head-rpc", "head-rpc-unix", "node-rpc", "node-rpc-unix", "worker-rpc", "object-transfer",
           "channel-tcp", "channel-unix", "serve-replica-tcp", "serve-replica-unix", "serve-http-proxy",
           "serve-socket-holder", "serve-proxy-share", "api-http", "ray-client"]


@pytest.fixture(scope="module")
def targets(secure_cluster):
    out = build_targets(secure_cluster)
    c = secure_cluster
    out["api-http"].pid = dashboard_pid(c["head"].pid, c["dashboard_url"], c["token"])
    return out


@pytest.fixture(params=TARGETS)
def target(request, targets) -> A.Target:
    return targets[request.param]


def test_silence_is_closed_at_the_handshake_deadline(target):
    s = A.connect(target)
    assert A.closed_within(s, target.handshake_timeout_s + 3), f"{target.name} kept a silent connection open"


def _needs_token(target: A.Target) -> None:
    if target.extra.get("no_token"):
        pytest.skip(f"{target.name} {target.extra['no_token']}")


def test_no_token(target):
    _needs_token(target)
    assert A.refused(target, A.attack(target, target.hello(b""))), f"{target.name} accepted an empty token"


def test_wrong_token(target):
    _needs_token(target)
    assert A.refused(target, A.attack(target, target.hello(b"not-the-cluster-token-0123456789"))), \
        f"{target.name} accepted a wrong token"


def test_garbage(target):
    assert A.refused(target, A.attack(target, A.garbage())), f"{target.name} kept a connection that sent garbage"


@pytest.mark.parametrize("length", [0xFFFFFFFF, 2**40], ids=["0xFFFFFFFF", "2**40"])
def test_huge_length_prefix(target, length):
    assert A.refused(target, A.attack(target, A.huge_prefix(length, 1 << 20))), \
        f"{target.name} kept reading a frame that announced {length} bytes"


def test_half_sent_frame_then_silence(target):
    first = b"GET /api/version HTTP/1.1\r\nHost: x\r\n" if target.extra.get("http") else A.half_frame()
    s = A.attack(target, first)
    assert A.closed_within(s, target.handshake_timeout_s + 3), \
        f"{target.name} kept a half-sent frame open past the handshake deadline"


def test_pickle_runs_no_code(target, tmp_path):
    proof = tmp_path / "owned"
    payload = A.pickle_creating(str(proof))
    for data in (A.framed(payload), payload):
        A.closed_within(A.attack(target, data), target.handshake_timeout_s + 3)
    assert target.served()  # whatever the listener did with it is done by now
    assert not proof.exists(), f"{target.name} unpickled a stranger's frame: it ran code"


def test_memory_stays_flat_under_huge_frames(target):
    before = A.rss_bytes(target.pid)
    if target.extra.get("http"):
        data = b"GET / HTTP/1.1\r\nHost: x\r\nX-Big: " + b"a" * (2 << 20)
    else:
        data = A.huge_prefix(0xFFFFFFFF, 2 << 20)
    socks = A.open_many(target, 48, data, send_timeout_s=2.0)
    try:
        assert target.served()
        grown = A.rss_bytes(target.pid) - before
    finally:
        A.close_all(socks)
    # 48 connections x 2 MiB = 96 MiB if buffered
    assert grown < 40 * 2**20, f"{target.name} grew by {grown / 2**20:.0f} MiB under 48 unauthenticated frames"


def test_threads_stay_flat_and_real_clients_are_served(target):
    before = A.thread_count(target.pid)
    first = b"GET / HTTP/1.1\r\n" if target.extra.get("http") else b"\x00"  # half a prefix
    socks = A.open_many(target, 300, first)
    try:
        assert target.served(), f"{target.name} did not serve a real client during the flood"
        grown = A.thread_count(target.pid) - before
    finally:
        A.close_all(socks)
    assert grown < 10, f"{target.name} started {grown} threads for 300 unauthenticated connections"
