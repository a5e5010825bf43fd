"""A streaming @serve.batch handler (an async generator yielding one chunk per request of the
batch, StopIteration for requests that are done) read over HTTP by several clients at once: every
client gets exactly its own chunks and a complete chunked response."""

from __future__ import annotations

import asyncio
from concurrent.futures import ThreadPoolExecutor

import requests


def test_streaming_batch_over_http_from_many_threads(serve_instance):
    from starlette.responses import StreamingResponse

    serve, url = serve_instance

    @serve.deployment
    class Numbers:
        @serve.batch(max_batch_size=5, batch_wait_timeout_s=0.1)
        async def numbers(self, maxes: list[int]):
            for i in range(max(maxes)):
                yield [str(i) if i < m else StopIteration for m in maxes]
                await asyncio.sleep(0.05)

        async def __call__(self, request):
            n = int(request.query_params["max"])
            return StreamingResponse(self.numbers(n), media_type="text/plain")

    serve.run(Numbers.bind(), name="numbers", route_prefix="/numbers")

    def fetch(n: int) -> list[str]:
        with requests.get(f"{url}/numbers?max={n}", stream=True, timeout=30) as r:
            r.raise_for_status()
            return list(r.iter_content(chunk_size=None, decode_unicode=True))

    wanted = [1, 2, 5, 6, 9, 3, 7, 4]
    for _ in range(3):
        with ThreadPoolExecutor(max_workers=len(wanted)) as pool:
            got = list(pool.map(fetch, wanted))
        for n, chunks in zip(wanted, got):
            assert "".join(chunks) == "".join(str(i) for i in range(n))
    serve.delete("numbers")


def test_streaming_batch_survives_travelling_by_value():
    """A replica gets the class by value (cloudpickle): the end-of-stream marker must still be
    recognised after the trip, or the marker itself would be streamed to the client."""
    import cloudpickle

    from raylite import serve

    def make():
        class Counter:
            @serve.batch(max_batch_size=4, batch_wait_timeout_s=0.01)
            async def count(self, ns: list[int]):
                for i in range(max(ns)):
                    yield [i if i < n else StopIteration for n in ns]

        return Counter

    copy = cloudpickle.loads(cloudpickle.dumps(make()))

    async def main() -> list[list[int]]:
        obj = copy()

        async def collect(n: int) -> list[int]:
            return [x async for x in obj.count(n)]

        return await asyncio.gather(*(collect(n) for n in (1, 3, 2)))

    assert asyncio.run(main()) == [[0], [0, 1, 2], [0, 1]]
