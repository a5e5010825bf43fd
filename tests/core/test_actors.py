"""Actors: state, ordering, async and threaded actors, names, restarts, failures."""

from __future__ import annotations

import asyncio
import os
import threading

import pytest

import raylite as ray
from raylite.exceptions import ActorDiedError, RayActorError


@ray.remote
class Counter:
    def __init__(self, start=0):
        self.n = start

    def inc(self, by=1):
        self.n += by
        return self.n

    def pid(self):
        return os.getpid()

    @ray.method(num_returns=2)
    def pair(self):
        return self.n, -self.n


def test_state_and_order_per_caller(cluster):
    c = Counter.remote(10)
    assert ray.get([c.inc.remote() for _ in range(50)]) == list(range(11, 61))
    a, b = c.pair.remote()
    assert ray.get([a, b]) == [60, -60]


def test_handles_passed_to_tasks(cluster):
    c = Counter.remote()

    @ray.remote
    def bump(counter, k):
        return ray.get(counter.inc.remote(k))

    ray.get([bump.remote(c, 1) for _ in range(4)])
    assert ray.get(c.inc.remote(0)) == 4


def test_async_actor_runs_calls_concurrently(cluster):
    @ray.remote
    class Gate:
        def __init__(self):
            self.event = asyncio.Event()

        async def wait(self):
            await self.event.wait()
            return "released"

        async def release(self):
            self.event.set()

    g = Gate.remote()
    waiting = [g.wait.remote() for _ in range(3)]
    ready, _ = ray.wait(waiting, timeout=0.2)
    assert ready == []
    g.release.remote()
    assert ray.get(waiting, timeout=10) == ["released"] * 3


def test_threaded_actor(cluster):
    @ray.remote(max_concurrency=4)
    class Threaded:
        def __init__(self):
            self.barrier = threading.Barrier(3, timeout=10)

        def meet(self):
            self.barrier.wait()
            return threading.get_ident()

    t = Threaded.remote()
    idents = ray.get([t.meet.remote() for _ in range(3)], timeout=20)
    assert len(set(idents)) == 3


def test_named_actor_and_get_if_exists(cluster):
    c = Counter.options(name="shared-counter").remote(5)
    same = ray.get_actor("shared-counter")
    assert ray.get(same.inc.remote()) == 6
    again = Counter.options(name="shared-counter", get_if_exists=True).remote()
    assert ray.get(again.inc.remote()) == 7
    with pytest.raises(ValueError, match="already taken"):
        Counter.options(name="shared-counter").remote()
    with pytest.raises(ValueError, match="Failed to look up"):
        ray.get_actor("no-such-actor")
    assert "shared-counter" in ray.list_named_actors()
    ray.kill(c)


def test_missing_method_and_direct_call(cluster):
    c = Counter.remote()
    with pytest.raises(AttributeError, match="no method 'nope'"):
        c.nope.remote()
    with pytest.raises(TypeError, match="cannot be instantiated directly"):
        Counter()
    with pytest.raises(TypeError, match="cannot be called directly"):
        c.inc()


def test_method_exception_keeps_actor_alive(cluster):
    @ray.remote
    class Fragile:
        def fail(self):
            raise ValueError("bad input")

        def ok(self):
            return "ok"

    f = Fragile.remote()
    with pytest.raises(ValueError, match="bad input"):
        ray.get(f.fail.remote())
    assert ray.get(f.ok.remote()) == "ok"


def test_constructor_failure_reports_cause(cluster):
    @ray.remote
    class BadInit:
        def __init__(self):
            raise RuntimeError("init exploded")

        def f(self):
            return 1

    b = BadInit.remote()
    with pytest.raises(RayActorError, match="init exploded"):
        ray.get(b.f.remote(), timeout=20)


def test_kill_and_restart(cluster):
    @ray.remote(max_restarts=1, max_task_retries=0)
    class Phoenix:
        def pid(self):
            return os.getpid()

        def die(self):
            os._exit(1)

    p = Phoenix.remote()
    first = ray.get(p.pid.remote())
    with pytest.raises(RayActorError):
        ray.get(p.die.remote(), timeout=20)
    second = ray.get(p.pid.remote(), timeout=20)
    assert second != first
    with pytest.raises(RayActorError):
        ray.get(p.die.remote(), timeout=20)
    with pytest.raises(ActorDiedError):
        ray.get(p.pid.remote(), timeout=20)


def test_max_task_retries_replays_call_after_restart(cluster, tmp_path):
    @ray.remote(max_restarts=1, max_task_retries=1)
    class Once:
        def crash_first_time(self, path):
            if not os.path.exists(path):
                open(path, "w").close()
                os._exit(1)
            return "replayed"

    o = Once.remote()
    assert ray.get(o.crash_first_time.remote(str(tmp_path / "m")), timeout=30) == "replayed"


def test_ray_kill_no_restart(cluster):
    c = Counter.options(max_restarts=5).remote()
    ray.get(c.inc.remote())
    ray.kill(c)
    with pytest.raises(RayActorError):
        ray.get(c.inc.remote(), timeout=20)
    with pytest.raises(ValueError, match="actor handles"):
        ray.kill("not an actor")


def test_unscheduled_actor_errors(cluster):
    @ray.remote(num_gpus=2)
    class NeedsGPUs:
        def f(self):
            return 1

    a = NeedsGPUs.remote()
    with pytest.raises(ray.exceptions.ActorUnschedulableError, match="GPU: 2"):
        ray.get(a.f.remote(), timeout=10)


def test_dropping_last_handle_stops_actor(cluster):
    from tests.conftest import process_gone, wait_for

    c = Counter.remote()
    pid = ray.get(c.pid.remote())
    del c
    wait_for(lambda: process_gone(pid),
             what="the actor process to exit")


def test_actor_runtime_context(cluster):
    @ray.remote
    class Who:
        def ids(self):
            ctx = ray.get_runtime_context()
            return ctx.get_actor_id(), ctx.get_actor_name()

    w = Who.options(name="who-am-i").remote()
    actor_id, name = ray.get(w.ids.remote())
    assert actor_id == w._actor_id.hex() and name == "who-am-i"


def test_calls_on_a_dropped_handle_still_finish(cluster):
    assert ray.get(Counter.remote(41).inc.remote(), timeout=20) == 42
