"""After a local-testing-mode run is shut down, the driver is no longer "inside a replica"."""

import pytest

import raylite


def test_shutdown_of_local_mode_clears_the_replica_context():
    from raylite import serve
    from raylite.serve.exceptions import RayServeException

    if raylite.is_initialized():
        raylite.shutdown()

    @serve.deployment
    def hello() -> str:
        return serve.get_replica_context().deployment

    handle = serve.run(hello.bind(), _local_testing_mode=True)
    try:
        assert handle.remote().result(timeout_s=10) == "hello"
    finally:
        serve.shutdown()
    with pytest.raises(RayServeException, match="within a Serve"):
        serve.get_replica_context()
