"""What `kill()` promises its caller: the actor's process is gone when kill() returns, so no
call that caller makes afterwards (an ordinary actor call or a compiled graph's execute)
reaches the killed process (Ray's semantics)."""

from __future__ import annotations

import os

import pytest

import raylite as ray
from raylite.dag import InputNode
from raylite.exceptions import ActorDiedError


@ray.remote
class Echo:
    def echo(self, x):
        return x


@ray.remote(max_restarts=1)
class Restartable:
    def pid(self):
        return os.getpid()


def test_compiled_graph_execute_after_kill_raises_actor_died(cluster):
    for _ in range(4):  # the kill used to land after the execution in most runs
        a = Echo.remote()
        with InputNode() as inp:
            compiled = a.echo.bind(inp).experimental_compile()
        assert ray.get(compiled.execute(1)) == 1
        ray.kill(a)
        with pytest.raises(ActorDiedError):
            ray.get(compiled.execute(2))
        compiled.teardown()


def test_call_after_kill_with_restart_reaches_the_new_process(cluster):
    for _ in range(3):
        actor = Restartable.remote()
        old = ray.get(actor.pid.remote())
        ray.kill(actor, no_restart=False)
        assert ray.get(actor.pid.remote()) != old
        ray.kill(actor)


def test_call_after_kill_fails_with_actor_died(cluster):
    actor = Echo.remote()
    ray.get(actor.echo.remote(1))
    ray.kill(actor)
    with pytest.raises(ActorDiedError):
        ray.get(actor.echo.remote(2))
