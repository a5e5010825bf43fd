"""Smaller public helpers users reach for: node IP, named actors, serializability, current actor."""

from __future__ import annotations

import threading

import raylite as ray
from raylite.util import get_node_ip_address, inspect_serializability, list_named_actors


def test_node_ip_and_named_actors(cluster):
    @ray.remote
    def ip():
        return get_node_ip_address()

    assert ray.get(ip.remote()) == get_node_ip_address() == "127.0.0.1"

    @ray.remote
    class Named:
        def ping(self):
            return "pong"

    actor = Named.options(name="util_api_named").remote()
    assert ray.get(actor.ping.remote()) == "pong"
    assert "util_api_named" in list_named_actors()


def test_inspect_serializability_names_the_culprit(capsys):
    lock = threading.Lock()

    class Holder:
        def __init__(self):
            self.fine = [1, 2, 3]
            self.lock = lock

    ok, failures = inspect_serializability(Holder(), name="holder")
    assert not ok
    assert {f.name for f in failures} == {"holder.lock"}
    assert "holder.lock (lock) is not serializable" in capsys.readouterr().out

    def uses_lock():
        return lock.locked()

    ok, failures = inspect_serializability(uses_lock)
    assert not ok and any("lock" in f.name for f in failures)
    assert inspect_serializability({"a": [1, 2]}) == (True, set())
    ok, failures = inspect_serializability({"held": lock}, name="config")
    assert not ok and {f.name for f in failures} == {"config['held']"}
    assert "config['held'] (lock) is not serializable" in capsys.readouterr().out


def test_current_actor_handle_calls_back_into_itself(cluster):
    @ray.remote
    class SelfCaller:
        def __init__(self):
            self.n = 0

        def bump(self):
            self.n += 1
            return self.n

        def me(self):
            return ray.get_runtime_context().current_actor

    actor = SelfCaller.remote()
    handle = ray.get(actor.me.remote())
    assert ray.get(handle.bump.remote()) == 1
    assert ray.get(actor.bump.remote()) == 2
