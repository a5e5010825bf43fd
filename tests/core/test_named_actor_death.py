"""A dead detached actor is no longer listed by list_named_actors (issue 17 §5), however it died."""

from __future__ import annotations

import os
import signal

import pytest

import raylite as ray
from tests.conftest import wait_for


@ray.remote
class Named:
    def pid(self):
        return os.getpid()

    def leave(self):
        ray.actor.exit_actor()


def test_dead_detached_actors_leave_the_named_list(cluster):
    crashed = Named.options(name="crashed", lifetime="detached").remote()
    killed = Named.options(name="killed", lifetime="detached").remote()
    left = Named.options(name="left", lifetime="detached").remote()
    kept = Named.options(name="kept", lifetime="detached").remote()
    ray.get([a.pid.remote() for a in (crashed, killed, left, kept)])
    assert {"crashed", "killed", "left", "kept"} <= set(ray.util.list_named_actors())
    os.kill(ray.get(crashed.pid.remote()), signal.SIGKILL)
    ray.kill(killed)
    with pytest.raises(ray.exceptions.RayActorError):
        ray.get(left.leave.remote())
    wait_for(lambda: not {"crashed", "killed", "left"} & set(ray.util.list_named_actors()), 20, 0.1,
             "the dead actors to leave the list")
    assert "kept" in ray.util.list_named_actors()
    assert {"name": "kept", "namespace": ray.get_runtime_context().namespace} in \
        ray.util.list_named_actors(all_namespaces=True)
    for name in ("crashed", "killed", "left"):
        with pytest.raises(ValueError, match=name):
            ray.get_actor(name)
    ray.kill(kept)
