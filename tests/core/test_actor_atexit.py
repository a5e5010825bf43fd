"""An actor that ends on purpose (exit_actor() or __ray_terminate__) runs its atexit handlers
first, as in Ray."""

from __future__ import annotations

import os

import pytest

import raylite
from tests.conftest import wait_for


@raylite.remote
class WritesAtExit:
    def __init__(self, path):
        import atexit

        def write():
            with open(path, "w") as f:
                f.write("bye")

        atexit.register(write)

    def ready(self):
        return True

    def leave(self):
        raylite.actor.exit_actor()


@pytest.mark.parametrize("how", ["exit_actor", "__ray_terminate__"])
def test_atexit_handlers_run_when_the_actor_ends_on_purpose(cluster, tmp_path, how):
    path = str(tmp_path / "atexit.txt")
    actor = WritesAtExit.remote(path)
    raylite.get(actor.ready.remote())
    call = actor.leave.remote() if how == "exit_actor" else actor.__ray_terminate__.remote()
    raylite.wait([call], timeout=60)
    wait_for(lambda: os.path.exists(path) and open(path).read() == "bye", what="the atexit handler's file")
