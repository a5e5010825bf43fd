"""Concurrency groups (Ray's `concurrency_groups=` / `@method(concurrency_group=...)`): each
group runs on its own executor, so a call blocked in one group never stalls the others."""

from __future__ import annotations

import threading

import pytest

import raylite as ray

WAIT_S = 30  # a stalled group would never let these calls finish


@ray.remote(concurrency_groups={"io": 1, "compute": 1})
class AsyncGroups:
    def __init__(self):
        self.gate = threading.Event()
        self.local = threading.local()

    @ray.method(concurrency_group="io")
    async def block(self):
        self.gate.wait()  # blocks this group's event loop, like a time.sleep in an async def
        return "unblocked"

    @ray.method(concurrency_group="compute")
    async def release(self):
        self.gate.set()
        return "released"

    async def default(self):
        return "default"

    @ray.method(concurrency_group="io")
    async def set_local(self):
        self.local.value = "io"
        return threading.get_ident()

    @ray.method(concurrency_group="compute")
    async def get_local(self):
        return getattr(self.local, "value", None), threading.get_ident()


@ray.remote(concurrency_groups={"io": 2})
class SyncGroups:
    def __init__(self):
        self.gate = threading.Event()

    @ray.method(concurrency_group="io")
    def block(self):
        self.gate.wait()
        return "unblocked"

    def release(self):
        self.gate.set()
        return "released"

    def ident(self):
        return threading.get_ident()


def test_async_group_blocked_leaves_the_other_groups_running(cluster):
    actor = AsyncGroups.remote()
    blocked = actor.block.remote()
    assert ray.get(actor.default.remote(), timeout=WAIT_S) == "default"
    assert ray.get(actor.release.remote(), timeout=WAIT_S) == "released"
    assert ray.get(blocked, timeout=WAIT_S) == "unblocked"


def test_thread_local_data_stays_in_its_group(cluster):
    actor = AsyncGroups.remote()
    io_thread = ray.get(actor.set_local.remote(), timeout=WAIT_S)
    value, compute_thread = ray.get(actor.get_local.remote(), timeout=WAIT_S)
    assert value is None and compute_thread != io_thread


def test_sync_group_blocked_leaves_default_and_system_groups_running(cluster):
    actor = SyncGroups.remote()
    blocked = actor.block.remote()
    # Ray's system group answers while an io call blocks
    assert isinstance(ray.get(actor.ident.options(concurrency_group="_ray_system").remote(),
                              timeout=WAIT_S), int)
    assert ray.get(actor.release.remote(), timeout=WAIT_S) == "released"
    assert ray.get(blocked, timeout=WAIT_S) == "unblocked"


def test_call_time_group_option_and_unknown_group(cluster):
    actor = SyncGroups.remote()
    blocked = actor.block.remote()
    # a call named for the io group at call time runs beside the blocked one (io has 2 threads)
    assert ray.get(actor.release.options(concurrency_group="io").remote(), timeout=WAIT_S) == "released"
    assert ray.get(blocked, timeout=WAIT_S) == "unblocked"
    with pytest.raises(ValueError, match="concurrency group 'nope' is not defined"):
        ray.get(actor.ident.options(concurrency_group="nope").remote(), timeout=WAIT_S)


@pytest.mark.parametrize("groups", [{"g": 0}, {"g": -1}, {"g": 1.5}, {"": 1}, ["g"]])
def test_bad_concurrency_groups_are_refused_at_once(groups):
    class Plain:
        def f(self):
            return 1

    with pytest.raises((ValueError, TypeError), match="concurrency_groups"):
        ray.remote(concurrency_groups=groups)(Plain)
    with pytest.raises((ValueError, TypeError), match="concurrency_groups"):
        ray.remote(Plain).options(concurrency_groups=groups)
