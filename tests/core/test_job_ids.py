"""The job that made a task, an actor or an object is read from its id, as in Ray
(`ObjectRef.job_id()`, `ActorID.job_id`): found by Ray's test_job_id_consistency."""

from __future__ import annotations

import threading

import raylite
from raylite._core import ids


@raylite.remote
def child():
    return "bar"


@raylite.remote
class Pinger:
    def ping(self):
        return "pong"


@raylite.remote
def ids_made_here(in_thread: bool) -> list[str]:
    def made() -> list[str]:
        actor = Pinger.remote()
        return [raylite.get_runtime_context().get_job_id(), child.remote().job_id().hex(),
                raylite.put(1).job_id().hex(), actor._actor_id.job_id.hex(), actor.ping.remote().job_id().hex()]

    if not in_thread:
        return made()
    out: list = []
    thread = threading.Thread(target=lambda: out.append(made()))
    thread.start()
    thread.join()
    return out[0]


def test_tasks_actors_and_objects_carry_their_job_in_their_ids(cluster):
    job = raylite.get_runtime_context().get_job_id()
    assert raylite.put(1).job_id().hex() == job
    assert child.remote().job_id().hex() == job
    for in_thread in (False, True):  # a task's ids, also from a thread it starts
        assert raylite.get(ids_made_here.remote(in_thread), timeout=60) == [job] * 5


def test_a_process_ids_follow_the_job_it_works_for():
    saved = ids._UNIQUE.suffix
    try:
        ids.set_job(b"\x01\x02\x03\x04")
        first = ids.TaskID.from_random()
        ids.set_job(b"\x0a\x0b\x0c\x0d")
        second = ids.ActorID.from_random()
        assert first.job_id() == b"\x01\x02\x03\x04" and second.job_id == b"\x0a\x0b\x0c\x0d"
        assert ids.ObjectID.for_return(first, 1).job_id() == first.job_id()
        assert len({ids.TaskID.from_random() for _ in range(10_000)}) == 10_000
    finally:
        ids._UNIQUE.suffix = saved  # this process is still the driver of the module's cluster
