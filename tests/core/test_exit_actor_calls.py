"""An actor that ends itself with exit_actor(): calls that had not started never start, and
their callers read why the actor is gone (exit_actor, not ray.kill), as in Ray."""

from __future__ import annotations

import threading
import time

import pytest

import raylite as ray


@ray.remote(max_concurrency=2)
class Leaver:
    def __init__(self) -> None:
        self.gate = threading.Event()

    def leave_when_told(self) -> None:
        self.gate.wait()
        ray.actor.exit_actor()

    def ping(self) -> int:
        if not self.gate.is_set():
            self.gate.set()  # the first ping lets the other thread leave
        time.sleep(0.01)
        return 1


@ray.remote
class SyncLeaver:
    def leave(self) -> None:
        ray.actor.exit_actor()

    def ping(self) -> int:
        return 1


def test_calls_queued_behind_exit_actor_fail_naming_it(cluster):
    actor = Leaver.remote()
    actor.leave_when_told.remote()
    pings = [actor.ping.remote() for _ in range(200)]  # 2 s of pings on the other thread
    outcomes = []
    for ref in pings:
        try:
            outcomes.append(ray.get(ref, timeout=30))
        except ray.exceptions.RayActorError as e:
            outcomes.append(str(e))
    done = [o for o in outcomes if o == 1]
    failed = [o for o in outcomes if o != 1]
    assert failed and len(done) < 100
    assert all("exit_actor()" in o for o in failed)


def test_a_sync_actor_that_left_tells_later_callers_why(cluster):
    actor = SyncLeaver.remote()
    actor.leave.remote()
    with pytest.raises(ray.exceptions.RayActorError, match=r"exit_actor\(\)"):
        ray.get(actor.ping.remote(), timeout=30)
