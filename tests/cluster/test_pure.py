"""Pure parts of the cluster code: liveness expiry, persistence tables, address parsing."""

from __future__ import annotations

import pytest

from raylite._core.clock import FakeClock
from raylite._core.cluster import files as CF
from raylite._core.head.head import NodeRecord, expired_nodes
from raylite._core.head.persistence import SqlitePersistence, open_persistence


def test_silent_node_expires_after_timeout():
    clock = FakeClock()
    nodes = {b"a": NodeRecord(b"a", "", "", {}, {}, {}, "", None, last_seen=clock.monotonic()),
             b"b": NodeRecord(b"b", "", "", {}, {}, {}, "", None, last_seen=clock.monotonic())}
    clock.advance(4.0)
    nodes[b"b"].last_seen = clock.monotonic()
    clock.advance(1.5)
    assert expired_nodes(nodes, clock.monotonic(), 5.0) == [b"a"]
    nodes[b"a"].alive = False
    assert expired_nodes(nodes, clock.monotonic(), 5.0) == []


def test_sqlite_rows_survive_reopen(tmp_path):
    path = str(tmp_path / "h.db")
    db = SqlitePersistence(path)
    db.put("kv", b"k1", b"v1")
    db.put("actors", b"a1", [1, "ALIVE", {"x": b"y"}])
    db.put("kv", b"k2", b"v2")
    db.delete("kv", b"k2")
    db.close()
    db = open_persistence(f"sqlite:{path}")
    assert dict(db.load("kv")) == {b"k1": b"v1"}
    assert dict(db.load("actors")) == {b"a1": [1, "ALIVE", {"x": b"y"}]}
    with pytest.raises(ValueError):
        db.put("nope", b"k", 1)
    with pytest.raises(ValueError, match="sqlite:PATH"):
        open_persistence("mysql://x")


def test_address_forms():
    assert CF.normalize_address("raylite://10.0.0.5:6379") == "10.0.0.5:6379"
    assert CF.normalize_address("10.0.0.5:6379") == "10.0.0.5:6379"
    with pytest.raises(ValueError, match="HOST:PORT"):
        CF.normalize_address("10.0.0.5")


def test_head_refuses_a_node_of_another_version():
    from raylite._core import protocol as P
    from raylite._core.config import Config
    from raylite._core.head.head import Head

    head = Head(Config(), token="t")
    msg = P.RegisterNode(b"n" * 16, "tcp://10.0.0.2:1", "10.0.0.2", {}, {}, "", "0.0.1-other")
    reply = head._on_register_node(None, msg, 1)
    assert not reply.ok and "version mismatch" in reply.error and "same raylite version" in reply.error


def test_local_unix_node_never_expires():
    clock = FakeClock()
    nodes = {b"u": NodeRecord(b"u", "unix:///tmp/x/node", "", {}, {}, {}, "", None, last_seen=clock.monotonic())}
    clock.advance(100.0)
    assert expired_nodes(nodes, clock.monotonic(), 5.0) == []


def _cli_start(temp_dir: str, *args: str):
    import subprocess
    import sys

    env = {"RAYLITE_TEMP_DIR": temp_dir, "RAYLITE_TOKEN": "x", "PATH": "/usr/bin:/bin"}
    return subprocess.run([sys.executable, "-m", "raylite.cli", "start", "--node-ip-address=127.0.0.1",
                           "--num-cpus=1", *args], env=env, capture_output=True, text=True, timeout=60)


def test_unreachable_head_names_address_and_port():
    import shutil
    import tempfile

    temp_dir = tempfile.mkdtemp(prefix="rlc", dir="/tmp")
    try:
        out = _cli_start(temp_dir, "--address=127.0.0.1:1")
    finally:
        shutil.rmtree(temp_dir, ignore_errors=True)
    assert out.returncode != 0
    assert "cannot reach the head at 127.0.0.1:1" in out.stderr and "TCP port 1" in out.stderr


def test_too_deep_temp_dir_is_a_clear_error(tmp_path):
    deep = tmp_path / ("d" * 60)
    out = _cli_start(str(deep), "--address=127.0.0.1:1")
    assert out.returncode != 0 and "RAYLITE_TEMP_DIR" in out.stderr and "Traceback" not in out.stderr
