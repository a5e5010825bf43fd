"""get() of several refs raises as soon as one of them has failed, as Ray's does: a list holding
a failed task (or a dead actor's call) beside one that never finishes must not hang."""

from __future__ import annotations

import pytest

import raylite
from raylite.exceptions import ActorDiedError, GetTimeoutError


@raylite.remote
def fails():
    raise ValueError("this task failed")


@raylite.remote(max_concurrency=2)
class Waiter:
    def __init__(self):
        import threading

        self.event = threading.Event()

    def release(self):
        self.event.set()

    def wait(self):
        self.event.wait()
        return "released"


def test_a_failed_task_beside_a_blocked_one_raises_at_once(cluster):
    waiter = Waiter.remote()
    blocked = waiter.wait.remote()
    with pytest.raises(ValueError, match="this task failed"):
        raylite.get([blocked, fails.remote()], timeout=60)  # the timeout only bounds a regression
    raylite.get(waiter.release.remote())
    assert raylite.get(blocked) == "released"


def test_a_dead_actors_call_beside_a_blocked_one_raises_at_once(cluster):
    waiter = Waiter.remote()
    blocked = waiter.wait.remote()
    doomed = Waiter.remote()
    raylite.get(doomed.__ray_ready__.remote())
    raylite.kill(doomed)
    with pytest.raises(ActorDiedError):
        raylite.get([blocked, doomed.wait.remote()], timeout=60)
    raylite.get(waiter.release.remote())


def test_the_first_failure_in_list_order_is_raised_once_all_are_done(cluster):
    ok = raylite.put(1)
    refs = [ok, fails.remote()]
    with pytest.raises(ValueError):
        raylite.get(refs, timeout=60)


def test_nothing_failed_still_waits_for_all_and_times_out_as_before(cluster):
    waiter = Waiter.remote()
    blocked = waiter.wait.remote()
    with pytest.raises(GetTimeoutError):
        raylite.get([raylite.put(1), blocked], timeout=0.5)
    raylite.get(waiter.release.remote())
    assert raylite.get([raylite.put(1), blocked]) == [1, "released"]
