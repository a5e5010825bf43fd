"""Data test fixtures: an in-process submitter for unit tests, the shared cluster for e2e."""

from __future__ import annotations

import pytest

from raylite.data._internal.submitter import LocalSubmitter, use_submitter
from raylite.data.context import DataContext


@pytest.fixture(autouse=True)
def data_context():
    """A fresh DataContext per test (progress bars off), restored afterwards."""
    saved = DataContext.get_current()
    ctx = DataContext()
    ctx.enable_progress_bars = False
    DataContext._set_current(ctx)
    yield ctx
    DataContext._set_current(saved)


@pytest.fixture
def local():
    """Run Data executions on a thread pool in this process (no cluster)."""
    sub = LocalSubmitter(num_cpus=2)
    with use_submitter(sub):
        yield sub
    sub.shutdown()


@pytest.fixture(scope="module")
def ray_cluster(cluster):
    """The module's real local cluster (2 CPUs), for end-to-end Data tests."""
    yield cluster
