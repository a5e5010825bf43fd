"""Ray's built-in `actor.__ray_ready__.remote()`: True once the constructor has run, the
constructor's error (as the actor's death) when it raised; it never runs user code."""

import pytest

import raylite
from raylite.exceptions import ActorDiedError


def test_ray_ready_waits_for_the_constructor_and_reports_its_failure(cluster):
    @raylite.remote(num_cpus=0)
    class Slow:
        def __init__(self) -> None:
            import time

            time.sleep(0.2)
            self.ready = True

        def is_ready(self) -> bool:
            return self.ready

    @raylite.remote(num_cpus=0)
    class AsyncOne:
        async def ping(self) -> str:
            return "pong"

    @raylite.remote(num_cpus=0)
    class Broken:
        def __init__(self) -> None:
            raise ValueError("no")

    slow = Slow.remote()
    assert raylite.get(slow.__ray_ready__.remote()) is True
    assert raylite.get(slow.is_ready.remote())
    assert raylite.get(AsyncOne.remote().__ray_ready__.remote()) is True
    with pytest.raises(ActorDiedError, match="constructor"):
        raylite.get(Broken.remote().__ray_ready__.remote(), timeout=30)
    with pytest.raises(AttributeError):
        slow.__other_dunder__  # noqa: B018 - other dunders are still not actor methods
