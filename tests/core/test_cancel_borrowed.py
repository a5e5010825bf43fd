"""ray.cancel() of a ref this process only borrows (a nested task created it, so another
worker owns it) reaches the owner, which cancels the task, as in Ray."""

from __future__ import annotations

import threading

import pytest

import raylite
from raylite.exceptions import GetTimeoutError, RayTaskError, TaskCancelledError


@raylite.remote(num_cpus=0, max_concurrency=4)
class Gate:
    def __init__(self):
        self.event = threading.Event()

    def wait(self):
        self.event.wait()
        return "opened"

    def open(self):
        self.event.set()


@raylite.remote
def blocked_on(gate_refs):
    return raylite.get(gate_refs[0])


@raylite.remote
def start_inner(gate_refs):
    return [blocked_on.remote(gate_refs)]


def test_cancelling_a_ref_owned_by_a_finished_task_cancels_it(cluster):
    gate = Gate.remote()
    waiting = gate.wait.remote()
    inner = raylite.get(start_inner.remote([waiting]))[0]
    with pytest.raises(GetTimeoutError):
        raylite.get(inner, timeout=1)
    raylite.cancel(inner)
    with pytest.raises((TaskCancelledError, RayTaskError)):
        raylite.get(inner, timeout=60)  # the timeout only bounds a regression
    raylite.get(gate.open.remote())
