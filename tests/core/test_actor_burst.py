"""A burst of actors created at once on one node all come up, even when the node's socket
queue holds only a few pending connections: worker starts are bounded, and a worker that
finds the queue full retries instead of dying and being replaced over and over."""

from __future__ import annotations

import glob
import os

import pytest

import raylite as ray
from raylite._core import runtime

BURST = 200


@pytest.fixture(scope="module")
def tiny_backlog():
    if ray.is_initialized():
        ray.shutdown()
    # 64 workers connecting at once to a queue of 2
    env = {"RAYLITE_LISTEN_BACKLOG": "2", "RAYLITE_WORKER_START_CONCURRENCY": "64"}
    with pytest.MonkeyPatch.context() as mp:  # set for the cluster's start only
        for k, v in env.items():
            mp.setenv(k, v)
        ray.init(num_cpus=2, include_dashboard=False)
    yield ray
    ray.shutdown()


@ray.remote(num_cpus=0)
class Cell:
    def pid(self) -> int:
        return os.getpid()


def test_burst_of_actors_all_ready(tiny_backlog):
    actors = [Cell.remote() for _ in range(BURST)]
    pids = ray.get([a.pid.remote() for a in actors], timeout=120)
    assert len(set(pids)) == BURST
    session = runtime.client().session_dir
    # every worker started once: none died on a refused connection and was replaced
    started = glob.glob(os.path.join(session, "logs", "worker-*.out"))
    assert len(started) <= BURST + 8, len(started)
    with open(os.path.join(session, "logs", "node.err"), errors="replace") as f:
        assert "Resource temporarily unavailable" not in f.read()
    for a in actors:
        ray.kill(a)
