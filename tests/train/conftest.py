"""Train's fixtures: one local cluster per module, sized for 2-4 training workers."""

from __future__ import annotations

import pytest

import raylite


@pytest.fixture(scope="module")
def cluster():
    """A local cluster with 4 logical CPUs: two training workers plus room for Data's
    tasks and a third worker in the capacity tests, on a 2-core machine."""
    if raylite.is_initialized():
        raylite.shutdown()
    raylite.init(num_cpus=4)
    yield raylite
    raylite.shutdown()
