"""An actor killed before it finished starting gives its resources back (found by Pool.terminate())."""

from __future__ import annotations

import os

import pytest

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


@raylite.remote(num_cpus=1, max_restarts=1, max_task_retries=-1)
class Restartable:
    def pid(self):
        return os.getpid()


def test_a_restartable_actor_killed_while_starting_uses_up_a_restart(cluster):
    # As in Ray: kill(no_restart=False) of an actor that is still starting is a death. The
    # actor restarts (its one restart), and the next such kill ends it and frees its CPU.
    # (Found by Ray's test_actor_killing: the first kill was dropped, so the second one
    # restarted the actor instead and it kept its CPU for good.)
    actor = Restartable.remote()
    raylite.kill(actor, no_restart=False)
    first = raylite.get(actor.pid.remote(), timeout=60)
    assert first != os.getpid()
    raylite.kill(actor, no_restart=False)
    with pytest.raises(raylite.exceptions.RayActorError):
        raylite.get(actor.pid.remote(), timeout=60)
    other = Holder.options(num_cpus=2).remote()  # needs both CPUs: the killed actor's too
    assert raylite.get(other.pid.remote(), timeout=60) != first
    raylite.kill(other)
