"""Node death on loopback clusters: detection, task retries, actor restarts, head restart."""

from __future__ import annotations

import os
import time

import pytest

import raylite as ray
from raylite.util.scheduling_strategies import NodeAffinitySchedulingStrategy

from .conftest import wait_until


def _node_ids(c) -> dict[str, bool]:
    return {n["node_id"].hex(): n["alive"] for n in c.node_table()}


def test_killed_node_is_detected_and_its_task_and_actor_move(make_cluster, tmp_path, monkeypatch):
    # Heartbeats would declare the node dead only after 10 minutes here: a death noticed
    # before that was noticed by its connection dropping, at once. (A wall-clock bound on the
    # detection would measure the machine's load, not raylite; bench/cluster.py times it.)
    monkeypatch.setenv("RAYLITE_NODE_DEAD_TIMEOUT_S", "600")
    c = make_cluster()
    head = c.add_head(num_cpus=2)
    victim = c.add_node(num_cpus=2, resources={"victim": 1})
    wait_until(lambda: len(c.alive_ids()) == 2, what="two nodes")
    ray.init(address="auto")
    started = tmp_path / "started"

    @ray.remote(max_retries=2)
    def slow(path: str) -> str:
        with open(path, "a") as f:
            f.write(ray.get_runtime_context().get_node_id() + "\n")
        time.sleep(2.0)
        return ray.get_runtime_context().get_node_id()

    @ray.remote(max_restarts=1, max_task_retries=-1)
    class Pinger:
        def node(self):
            return ray.get_runtime_context().get_node_id()

    ref = slow.options(scheduling_strategy=NodeAffinitySchedulingStrategy(victim.node_id, soft=True)).remote(
        str(started))
    actor = Pinger.options(scheduling_strategy=NodeAffinitySchedulingStrategy(victim.node_id, soft=True)).remote()
    assert ray.get(actor.node.remote()) == victim.node_id
    wait_until(lambda: started.exists() and victim.node_id in started.read_text(), what="task started")
    c.kill_node(victim)
    wait_until(lambda: _node_ids(c).get(victim.node_id) is False, timeout_s=120, what="node declared dead")
    assert ray.get(ref, timeout=30) == head.node_id  # retried on the surviving node
    assert ray.get(actor.node.remote(), timeout=30) == head.node_id  # restarted there
    dead = [n for n in ray.nodes() if n["NodeID"] == victim.node_id][0]
    assert not dead["Alive"] and "closed" in dead["DeathReason"]


def test_object_on_dead_node_raises_object_lost(make_cluster):
    c = make_cluster()
    c.add_head(num_cpus=1)
    victim = c.add_node(num_cpus=1, resources={"victim": 1})
    wait_until(lambda: len(c.alive_ids()) == 2, what="two nodes")
    ray.init(address="auto")

    @ray.remote(resources={"victim": 1}, max_retries=0)
    def big():
        return b"x" * (1 << 20)

    ref = big.remote()
    ray.wait([ref], timeout=30, fetch_local=False)  # (fetch_local would copy it here first)
    c.kill_node(victim)
    wait_until(lambda: _node_ids(c).get(victim.node_id) is False, timeout_s=120, what="node dead")
    with pytest.raises(ray.exceptions.ObjectLostError):
        ray.get(ref, timeout=30)


def _start_redis(*extra: str):
    """A throwaway redis-server on a free loopback port (the test skips where Debian's
    redis-server package is not installed: `make install-test` installs it as root)."""
    import shutil
    import socket
    import subprocess

    if shutil.which("redis-server") is None:
        pytest.skip("redis-server is not installed (apt-get install redis-server; `make install-test` "
                    "does it as root)")
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    proc = subprocess.Popen(["redis-server", "--port", str(port), "--bind", "127.0.0.1", "--save", "",
                             "--appendonly", "no", *extra],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    return proc, port


@pytest.fixture
def redis_url():
    import redis

    proc, port = _start_redis()
    try:
        wait_until(lambda: _pings(redis.Redis(port=port)), 10, "redis-server up")
        yield f"redis://127.0.0.1:{port}"
    finally:
        proc.kill()
        proc.wait(5)


def test_redis_persistence_with_a_password(make_cluster, monkeypatch):
    """`raylite start --redis-password` (RAYLITE_REDIS_PASSWORD) or redis://:PASSWORD@HOST:PORT."""
    import redis

    from raylite._core.cluster.cluster import StartError
    from raylite._core.head.persistence import open_persistence

    proc, port = _start_redis("--requirepass", "s3cret")
    try:
        wait_until(lambda: _pings(redis.Redis(port=port, password="s3cret")), 10, "redis-server up")
        store = open_persistence(f"redis://:s3cret@127.0.0.1:{port}")
        store.put("kv", b"k", b"v")
        assert list(store.load("kv")) == [(b"k", b"v")]
        store.delete("kv", b"k")
        store.close()
        c = make_cluster()
        with pytest.raises(StartError, match="persistence store"):  # no password: a clear refusal
            c.add_head(num_cpus=1, persist=f"redis://127.0.0.1:{port}")
        monkeypatch.setenv("RAYLITE_REDIS_PASSWORD", "s3cret")  # what --redis-password sets
        c.add_head(num_cpus=1, persist=f"redis://127.0.0.1:{port}")
        wait_until(lambda: redis.Redis(port=port, password="s3cret").keys("raylite:*"), 10,
                   what="the head's tables in Redis")
    finally:
        proc.kill()
        proc.wait(5)


def _pings(r) -> bool:
    try:
        return bool(r.ping())
    except Exception:  # noqa: BLE001
        return False


def test_head_restart_with_sqlite_keeps_detached_named_actor(make_cluster, tmp_path):
    _head_restart_keeps_detached_actor(make_cluster, f"sqlite:{tmp_path / 'head.db'}")


def test_head_restart_with_redis_keeps_detached_named_actor(make_cluster, redis_url):
    _head_restart_keeps_detached_actor(make_cluster, redis_url)


def _head_restart_keeps_detached_actor(make_cluster, db: str) -> None:
    c = make_cluster()
    head = c.add_head(num_cpus=1, persist=db)
    port = int(c.address.rsplit(":", 1)[1])
    worker = c.add_node(num_cpus=1, resources={"w": 1})
    wait_until(lambda: len(c.alive_ids()) == 2, what="two nodes")
    ray.init(address="auto", namespace="keep")

    @ray.remote(resources={"w": 0.1})
    class Counter:
        def __init__(self):
            self.n = 0

        def incr(self):
            self.n += 1
            return self.n

    a = Counter.options(name="counter", lifetime="detached").remote()
    assert ray.get(a.incr.remote()) == 1
    ray.shutdown()
    c.kill_node(head)  # the head process and its node die (its store is removed at teardown)
    c.add_head(num_cpus=1, persist=db, port=port)
    wait_until(lambda: worker.node_id in c.alive_ids(), timeout_s=20, what="worker node rejoined")
    ray.init(address="auto", namespace="keep")
    again = ray.get_actor("counter")
    assert ray.get(again.incr.remote(), timeout=30) == 2  # the same actor, state kept


    @ray.remote(resources={"w": 0.1})
    def on_worker(x):
        return x + 1

    # a new function reaches the old worker node's workers through the restarted head
    assert ray.get(on_worker.remote(41), timeout=30) == 42
    assert worker.process.poll() is None and os.path.exists(worker.session_dir)
