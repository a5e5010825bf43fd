"""Ray's `max_calls`: a worker that ran a function that many times exits, once nothing it owns
is referenced (found by Ray's test_background_tasks_with_max_calls: raylite ignored the option
with a warning, so workers that were meant to go lived on)."""

from __future__ import annotations

import gc
import os
import time

import psutil
import pytest

import raylite


def _gone(pid: int, timeout: float = 30.0) -> bool:
    """True once `pid` has exited (a zombie counts: its parent reaps it later)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            if psutil.Process(pid).status() == psutil.STATUS_ZOMBIE:
                return True
        except psutil.NoSuchProcess:
            return True
        time.sleep(0.05)
    return False


@raylite.remote(max_calls=1)
def pid_once():
    return os.getpid()


@raylite.remote(max_calls=2)
def pid_twice():
    return os.getpid()


@raylite.remote
def zero():
    time.sleep(0.1)
    return 0


@raylite.remote(max_calls=1, max_retries=0)
def hand_out_a_child():
    return os.getpid(), zero.remote()


def test_each_call_of_a_max_calls_1_function_gets_a_fresh_worker_and_the_old_one_exits(cluster):
    pids = [raylite.get(pid_once.remote(), timeout=60) for _ in range(3)]
    assert len(set(pids)) == 3 and os.getpid() not in pids
    assert all(_gone(pid) for pid in pids)


def test_a_worker_runs_max_calls_tasks_then_retires(cluster):
    pids = [raylite.get(pid_twice.remote(), timeout=60) for _ in range(4)]
    assert pids[0] == pids[1] and pids[2] == pids[3] and pids[0] != pids[2]
    assert _gone(pids[0]) and _gone(pids[2])


def test_a_burst_of_max_calls_tasks_all_run_once_per_worker(cluster):
    # many queued at once: no pipelining behind a max_calls task, bounced ones run elsewhere
    pids = raylite.get([pid_once.remote() for _ in range(8)], timeout=120)
    assert len(set(pids)) == 8


def test_a_retiring_worker_serves_the_objects_it_owns_until_they_are_released(cluster):
    handed = raylite.get([hand_out_a_child.remote() for _ in range(3)], timeout=60)
    for pid, child in handed:
        assert raylite.get(child, timeout=60) == 0  # its owner is still there to answer
        assert psutil.pid_exists(pid) and psutil.Process(pid).status() != psutil.STATUS_ZOMBIE
    while handed:
        pid, child = handed.pop(0)
        del child
        gc.collect()
        assert _gone(pid), f"worker {pid} did not exit once its object was released"


def test_max_calls_is_refused_in_options_and_gpu_functions_default_to_one():
    with pytest.raises(ValueError, match="Setting 'max_calls' is not supported in '.options\\(\\)'"):
        pid_once.options(max_calls=3)
    with pytest.raises(ValueError, match="max_calls"):
        raylite.remote(max_calls=-1)(lambda: None)

    def on_gpu():
        return 1

    assert raylite.remote(num_gpus=1)(on_gpu)._max_calls == 1  # as Ray: a fresh process per run
    assert raylite.remote(num_gpus=1, max_calls=0)(on_gpu)._max_calls == 0
    assert raylite.remote(on_gpu)._max_calls == 0
