"""Shared fixtures: one local cluster per test module, and condition waiting."""

from __future__ import annotations

import os
import time

import pytest

# Every cluster the tests start, by init() or `raylite start --head`, serves its HTTP API on a
# free port unless the test picks one: 8265 may be held by anything else on the machine. Tests
# of the default port set RAYLITE_DASHBOARD_PORT themselves.
os.environ.setdefault("RAYLITE_DASHBOARD_PORT", "0")
# A local cluster's zygote preloads the heavy libraries its driver has imported (torch, pandas,
# pyarrow: launch.heavy_modules_in_use), so a user's workers start warm. In one long test
# process that has imported all of them, every later cluster would pay that (19 s against 1 s
# for init and a first task, measured in CI's virtualenv): the suite's clusters preload numpy
# only, and a test that uses torch in its workers imports it there.
os.environ.setdefault("RAYLITE_PRELOAD_MODULES", "numpy")

import raylite  # noqa: E402


@pytest.fixture(scope="package", autouse=True)
def _no_cluster_left_from_another_package():
    """Each test package (directory) starts without a cluster, whatever ran before it (they run
    in any order under `make test-random`): a test that left its driver connected cannot leak
    into another package's counts, ports or `init()` calls. (Package, not module: tests/state
    shares one cluster between its modules; within a package the `cluster` fixtures start
    from a fresh cluster themselves.)"""
    if raylite.is_initialized():
        raylite.shutdown()
    yield


@pytest.fixture(scope="module")
def cluster():
    """A local 2-CPU cluster for the module; torn down after it."""
    if raylite.is_initialized():
        raylite.shutdown()
    raylite.init(num_cpus=2)
    yield raylite
    raylite.shutdown()


def wait_for(predicate, timeout_s: float = 30.0, interval_s: float = 0.02, what: str = "condition"):
    """Poll `predicate` until it is truthy; fail the test with `what` after the timeout.

    The timeout only bounds a failure: a condition that holds returns at once, so it is
    generous, for a machine loaded by other work."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        value = predicate()
        if value:
            return value
        time.sleep(interval_s)
    raise AssertionError(f"timed out after {timeout_s}s waiting for {what}")


def process_gone(pid: int) -> bool:
    """The process exited: its pid is free, or it is a zombie its parent has not reaped yet.

    Never raises: a process may exit between any two looks at it (``pid_exists`` true, then
    ``Process(pid)`` raising ``NoSuchProcess``), which made waits on an exit flaky."""
    import psutil

    try:
        return psutil.Process(pid).status() in (psutil.STATUS_ZOMBIE, psutil.STATUS_DEAD)
    except psutil.NoSuchProcess:
        return True
