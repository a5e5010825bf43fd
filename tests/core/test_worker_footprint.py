"""What each worker process costs: it is forked from a template whose heap is frozen out of the
garbage collector (a collection would copy every shared page it touches), it imports nothing
after the fork that the template could have imported, and it runs two threads (its task loop
and its I/O loop; output is read by the I/O loop, not by threads of its own)."""

from __future__ import annotations

import gc
import os
import sys

import raylite as ray


@ray.remote(num_cpus=0)
class Probe:
    def facts(self) -> dict:
        return {"threads": len(os.listdir("/proc/self/task")), "frozen": gc.get_freeze_count(),
                "modules": sorted(sys.modules)}

    def say(self, text: str) -> int:
        print(text)
        return os.getpid()


def test_an_actor_runs_two_threads_on_a_frozen_shared_heap(cluster):
    probe = Probe.remote()
    facts = ray.get(probe.facts.remote(), timeout=60)
    assert facts["threads"] == 2
    assert facts["frozen"] > 10_000
    assert "uvloop" in facts["modules"]
    ray.kill(probe)


def test_output_still_reaches_the_session_logs(cluster):
    from raylite._core import runtime
    from tests.conftest import wait_for

    probe = Probe.remote()
    pid = ray.get(probe.say.remote("hello from the I/O loop's reader"), timeout=60)
    logs = os.path.join(runtime.client().session_dir, "logs")

    def logged() -> bool:
        for name in os.listdir(logs):
            if name.endswith(f"-{pid}.out"):
                with open(os.path.join(logs, name)) as f:
                    return "hello from the I/O loop's reader" in f.read()
        return False

    wait_for(logged, what="the actor's line in its log file")
    ray.kill(probe)


@ray.remote
def _omp_threads():
    return os.environ.get("OMP_NUM_THREADS")


@ray.remote
class _OmpActor:
    def threads(self):
        return os.environ.get("OMP_NUM_THREADS")


def test_omp_num_threads_follows_the_cpus_asked_for(cluster):
    """Ray sets OMP_NUM_THREADS to a task's or actor's whole CPUs (at least 1), per task, unless
    the environment or the runtime_env's env_vars already set it."""
    assert ray.get(_omp_threads.remote()) == "1"
    assert ray.get(_omp_threads.options(num_cpus=2).remote()) == "2"
    assert ray.get(_omp_threads.options(num_cpus=0.25).remote()) == "1"
    assert ray.get(_omp_threads.options(runtime_env={"env_vars": {"OMP_NUM_THREADS": "7"}}).remote()) == "7"
    assert ray.get(_OmpActor.options(num_cpus=2).remote().threads.remote()) == "2"
    assert ray.get(_OmpActor.remote().threads.remote()) == "1"
