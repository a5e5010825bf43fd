"""`available_resources()` right after a task finishes counts its CPU as free.

The driver keeps an idle lease for half a second to reuse its worker for the next task. Ray
returns an idle worker's lease at once, so Ray programs (and Ray's own test_queue) read
`available_resources()["CPU"]` right after their work and expect the whole node. Reading it
gives the idle leases back first.
"""

from __future__ import annotations

import raylite as ray


@ray.remote
def one() -> int:
    return 1


@ray.remote
class Holder:
    def ping(self) -> str:
        return "pong"


def test_a_finished_task_no_longer_holds_its_cpu_and_an_actor_still_does(cluster):
    assert ray.get([one.remote() for _ in range(4)]) == [1] * 4
    assert ray.available_resources()["CPU"] == 2.0  # at once: no wait, no retry

    holder = Holder.options(num_cpus=1).remote()
    assert ray.get(holder.ping.remote()) == "pong"
    assert ray.available_resources()["CPU"] == 1.0  # a live actor's CPU stays taken
    assert ray.get(one.remote()) == 1  # tasks still run after their leases went back
    assert ray.available_resources()["CPU"] == 1.0
    ray.kill(holder)


@ray.remote
def pause(seconds: float) -> float:
    import time

    time.sleep(seconds)
    return seconds


def test_tasks_submitted_around_the_cancelled_lease_requests_all_run(cluster):
    """Reading the resources cancels the lease requests of a queue that ran dry; tasks queued
    while those cancels travel must still get workers (they had counted on those requests)."""
    for _ in range(15):
        first = [pause.remote(0.005) for _ in range(6)]  # 2 leases granted, the other asks wait
        ray.get(first[0])
        ray.available_resources()  # cancels whatever asks are still waiting
        second = [pause.remote(0.0) for _ in range(6)]
        assert len(ray.get(first + second, timeout=60)) == 12
