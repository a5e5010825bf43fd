"""@serve.batch(batch_size_fn=...): a batch's size is a function of its items (Ray 2.5x+), so
max_batch_size bounds, say, total tokens or graph nodes rather than the number of requests."""

from __future__ import annotations

import asyncio

import pytest

from raylite import serve


def test_batches_are_cut_by_the_size_function():
    seen: list[list[int]] = []

    @serve.batch(max_batch_size=10, batch_wait_timeout_s=0.05, batch_size_fn=sum)
    async def handle(sizes: list[int]) -> list[int]:
        seen.append(list(sizes))
        return [s * 2 for s in sizes]

    async def main() -> list:
        calls = [handle(n) for n in (4, 4, 4, 9, 12)]
        return await asyncio.gather(*calls, return_exceptions=True)

    results = asyncio.run(main())
    assert results[:4] == [8, 8, 8, 18]
    assert isinstance(results[4], RuntimeError) and "max_batch_size=10" in str(results[4])
    assert seen == [[4, 4], [4], [9]]  # each batch within 10 by sum; 12 fits no batch


def test_methods_and_bad_arguments():
    class Tokens:
        @serve.batch(max_batch_size=6, batch_wait_timeout_s=0.05,
                     batch_size_fn=lambda texts: sum(len(t.split()) for t in texts))
        async def count(self, texts: list[str]) -> list[int]:
            self.batches = getattr(self, "batches", []) + [len(texts)]
            return [len(t.split()) for t in texts]

    async def main(obj: Tokens) -> list[int]:
        return await asyncio.gather(obj.count("a b c"), obj.count("d e"), obj.count("f g h i"))

    obj = Tokens()
    assert asyncio.run(main(obj)) == [3, 2, 4]
    assert obj.batches == [2, 1]  # 3 + 2 words fit in 6; 4 more would not
    with pytest.raises(TypeError, match="batch_size_fn"):
        serve.batch(batch_size_fn=3)
