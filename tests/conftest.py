"""Shared fixtures: one local cluster per test module, and condition waiting."""

from __future__ import annotations

import time

import pytest

import raylite


@pytest.fixture(scope="module")
def cluster():
    """A local 2-CPU cluster for the module; torn down after it."""
    if raylite.is_initialized():
        raylite.shutdown()
    raylite.init(num_cpus=2)
    yield raylite
    raylite.shutdown()


def wait_for(predicate, timeout_s: float = 10.0, interval_s: float = 0.02, what: str = "condition"):
    """Poll `predicate` until it is truthy; fail the test with `what` after the timeout."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        value = predicate()
        if value:
            return value
        time.sleep(interval_s)
    raise AssertionError(f"timed out after {timeout_s}s waiting for {what}")
