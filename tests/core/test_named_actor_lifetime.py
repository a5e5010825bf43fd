"""A named actor that is not detached ends with its creator's last handle, as in Ray: a handle
from `get_actor()` is weak (it does not keep the actor alive). A detached one lives on."""

from __future__ import annotations

import gc

import pytest

import raylite as ray
from tests.conftest import wait_for


@ray.remote
class Greeter:
    def hello(self) -> str:
        return "hello"


def gone(name: str) -> bool:
    try:
        ray.get_actor(name)
    except ValueError:
        return True
    return False


def test_dropping_the_creators_handle_ends_a_named_actor_even_with_get_actor_handles(cluster):
    actor = Greeter.options(name="weakly-held").remote()
    assert ray.get(actor.hello.remote()) == "hello"
    looked_up = [ray.get_actor("weakly-held") for _ in range(3)]
    assert ray.get(looked_up[0].hello.remote()) == "hello"
    del actor
    gc.collect()
    wait_for(lambda: gone("weakly-held"), what="the named actor to end with its creator's handle")
    with pytest.raises(ray.exceptions.RayActorError):
        ray.get(looked_up[1].hello.remote(), timeout=30)
    Greeter.options(name="weakly-held").remote()  # the name is free again


def test_a_detached_named_actor_outlives_its_handles(cluster):
    actor = Greeter.options(name="lives-on", lifetime="detached").remote()
    ray.get(actor.hello.remote())
    del actor
    gc.collect()
    assert ray.get(ray.get_actor("lives-on").hello.remote()) == "hello"  # no wait: it never ends
    ray.kill(ray.get_actor("lives-on"))


@ray.remote
class Pid:
    def pid(self) -> int:
        import os

        return os.getpid()


def try_create(name: str):
    try:
        return Pid.options(name=name).remote()
    except ValueError:
        return None


def test_a_crashed_named_actor_keeps_its_name_while_its_creator_holds_a_handle(cluster):
    import psutil

    from raylite.util.state import get_actor

    first = Pid.options(name="held-name", max_restarts=0).remote()
    psutil.Process(ray.get(first.pid.remote())).kill()
    actor_id = first._actor_id.hex()
    wait_for(lambda: get_actor(id=actor_id).state == "DEAD", what="the head to see the actor dead")
    with pytest.raises(ValueError, match="still belongs to an actor that died.*Drop those handles"):
        Pid.options(name="held-name").remote()
    del first
    gc.collect()
    second = wait_for(lambda: try_create("held-name"), what="the name to be free once the handle is dropped")
    assert ray.get(second.pid.remote()) > 0
    ray.kill(second)  # a kill frees the name at once
    third = wait_for(lambda: try_create("held-name"), what="the name to be free after raylite.kill()")
    assert ray.get(third.pid.remote()) > 0
