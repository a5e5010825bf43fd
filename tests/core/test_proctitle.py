"""Workers carry Ray's process titles: `ray::<task name>` while running, `ray::IDLE` (a task
worker) or `ray::<Class>` (an actor) between calls, read as `ps` and psutil read them.

The title is set before the reply leaves the worker, so the driver reads the idle title
right after `get()` returns, without waiting.
"""

from __future__ import annotations

import os

import psutil

import raylite as ray


def title_of(pid: int) -> str:
    return psutil.Process(pid).cmdline()[0]


@ray.remote
def whoami() -> tuple[int, str]:
    return os.getpid(), psutil.Process().cmdline()[0]


@ray.remote
class Counter:
    def title(self) -> tuple[int, str]:
        return os.getpid(), psutil.Process().cmdline()[0]

    async def title_async(self) -> str:
        return psutil.Process().cmdline()[0]


def test_a_task_runs_under_its_name_and_its_worker_idles_as_ray_idle(cluster):
    pid, title = ray.get(whoami.remote())
    assert title == "ray::whoami"
    assert title_of(pid) == "ray::IDLE"
    _, title = ray.get(whoami.options(name="nightly-report").remote())
    assert title == "ray::nightly-report"
    with open(f"/proc/{pid}/environ", "rb") as f:  # the title took argv's room only
        assert b"PATH=" in f.read()


def test_an_actor_call_runs_as_class_dot_method_and_the_actor_idles_as_its_class(cluster):
    counter = Counter.remote()
    pid, title = ray.get(counter.title.remote())
    assert title == "ray::Counter.title"
    assert title_of(pid) == "ray::Counter"
    assert ray.get(counter.title.options(name="foo").remote())[1] == "ray::foo"  # Ray's test_options_name
    ray.kill(counter)


def test_an_async_actor_call_is_titled_too(cluster):
    counter = Counter.remote()
    assert ray.get(counter.title_async.remote()) == "ray::Counter.title_async"
    ray.kill(counter)


@ray.remote
def named(i: int) -> tuple[int, str]:
    return os.getpid(), psutil.Process().cmdline()[0]


def test_a_burst_runs_each_task_under_its_name_and_ends_idle(cluster):
    # short tasks are pipelined: the next one is queued on the worker when one ends, so the
    # idle title is skipped between them; each still runs under its own name, and the
    # workers are ray::IDLE once the burst is done
    refs = [named.remote(i) for i in range(200)] + [whoami.remote() for _ in range(200)]
    results = ray.get(refs)
    assert {title for _, title in results[:200]} == {"ray::named"}
    assert {title for _, title in results[200:]} == {"ray::whoami"}
    assert {title_of(pid) for pid, _ in results} == {"ray::IDLE"}


def test_a_burst_of_actor_calls_ends_with_the_actor_titled_as_its_class(cluster):
    counter = Counter.remote()
    results = ray.get([counter.title.remote() for _ in range(200)])
    assert {title for _, title in results} == {"ray::Counter.title"}
    assert title_of(results[0][0]) == "ray::Counter"
    ray.kill(counter)
