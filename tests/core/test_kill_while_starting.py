"""An actor killed before it finished starting gives its resources back (found by Pool.terminate())."""

from __future__ import annotations

import os

import raylite


@raylite.remote(num_cpus=1)
class Holder:
    def pid(self):
        return os.getpid()


def test_actors_killed_at_birth_do_not_keep_their_cpus(cluster):
    for _ in range(4):  # more than the cluster's 2 CPUs: each kill must give its CPU back
        raylite.kill(Holder.remote())
    survivor = Holder.remote()
    assert raylite.get(survivor.pid.remote(), timeout=60) != os.getpid()
    raylite.kill(survivor)
