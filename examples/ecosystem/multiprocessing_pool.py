"""multiprocessing.Pool code moved to a cluster with Ray's drop-in `ray.util.multiprocessing.Pool`.

A Monte Carlo estimate of pi and a word-length histogram, written against the standard library's
Pool API (map, imap_unordered, starmap, apply_async): the same function runs with the standard
library's pool (native) and with Ray's (ray).
"""

from __future__ import annotations

import random
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _harness import main, start_ray  # noqa: E402

SAMPLES_PER_CHUNK = 200_000


def hits(seed: int) -> int:
    rng = random.Random(seed)
    return sum(rng.random() ** 2 + rng.random() ** 2 <= 1.0 for _ in range(SAMPLES_PER_CHUNK))


def word_lengths(line: str) -> dict:
    out: dict = {}
    for word in line.split():
        out[len(word)] = out.get(len(word), 0) + 1
    return out


def weighted(a: int, b: int) -> int:
    return a * 31 + b


def program(pool_class: type, cpus: int) -> dict:
    lines = [" ".join("x" * ((i * j) % 11 + 1) for j in range(50)) for i in range(2_000)]
    with pool_class(processes=cpus) as pool:
        inside = pool.map(hits, range(16))
        histogram: dict = {}
        for part in pool.imap_unordered(word_lengths, lines, chunksize=100):
            for k, v in part.items():
                histogram[k] = histogram.get(k, 0) + v
        pairs = pool.starmap(weighted, [(i, i + 1) for i in range(1_000)])
        single = pool.apply_async(hits, (99,)).get(timeout=300)
    return {"pi": 4 * sum(inside) / (16 * SAMPLES_PER_CHUNK), "histogram": dict(sorted(histogram.items())),
            "pairs_sum": sum(pairs), "single": single}


def on_ray(cpus: int) -> dict:
    from ray.util.multiprocessing import Pool

    return program(Pool, cpus)


def native(cpus: int) -> dict:
    from multiprocessing import Pool

    return program(Pool, cpus)


if __name__ == "__main__":
    main(on_ray, native, start_ray)
