"""The `make run` demo: a small workload on a local raylite cluster."""

from __future__ import annotations

import time

import numpy as np

import raylite as ray


@ray.remote
def partial_sum(chunk: np.ndarray) -> float:
    return float(chunk.sum())


@ray.remote
class Accumulator:
    def __init__(self) -> None:
        self.total = 0.0

    def add(self, value: float) -> float:
        self.total += value
        return self.total


def main() -> None:
    start = time.perf_counter()
    ray.init(num_cpus=2)
    print(f"local cluster up in {time.perf_counter() - start:.2f}s: {ray.cluster_resources()}")
    data = np.arange(10_000_000, dtype=np.float64)
    ref = ray.put(data)  # one shared-memory copy, read zero-copy by every task
    chunks = [partial_sum.remote(c) for c in np.array_split(data, 8)]
    acc = Accumulator.remote()
    for part in ray.get(chunks):
        acc.add.remote(part)
    total = ray.get(acc.add.remote(0.0))
    print(f"fan-out/fan-in sum over 8 tasks: {total:.0f} (expected {data.sum():.0f})")
    assert total == data.sum()
    assert ray.get(partial_sum.remote(ref)) == data.sum()
    pg = ray.util.placement_group([{"CPU": 1}, {"CPU": 1}], strategy="PACK")
    print(f"placement group ready: {pg.wait(10)}")
    ray.util.remove_placement_group(pg)
    ray.shutdown()
    print(f"done in {time.perf_counter() - start:.2f}s")


if __name__ == "__main__":
    main()
