"""serve.run(_local_testing_mode=True): deployments run in this process, no cluster, no HTTP."""

import raylite


def test_local_testing_mode_composes_in_process():
    from raylite import serve

    if raylite.is_initialized():
        raylite.shutdown()

    @serve.deployment(num_replicas=2)
    class Doubler:
        def double(self, x: int) -> int:
            return 2 * x

    @serve.deployment
    class Front:
        def __init__(self, doubler) -> None:
            self.doubler = doubler

        async def __call__(self, x: int) -> int:
            return await self.doubler.double.remote(x) + 1

    handle = serve.run(Front.bind(Doubler.bind()), _local_testing_mode=True)
    try:
        assert handle.remote(20).result(timeout_s=10) == 41
        assert not raylite.is_initialized()  # no cluster was started
    finally:
        serve.shutdown()
