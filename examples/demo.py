"""raylite demo: a small workload on a local cluster, written exactly as it would be for Ray.

    python examples/demo.py        (or: make run)

It starts a 2-CPU local cluster and then:
  1. fans out Monte Carlo tasks that estimate pi and fans their results in to one reducing task;
  2. keeps a running tally in an actor that several tasks report to;
  3. puts a 32 MiB numpy array in the object store once and lets tasks read it without copying;
  4. reserves two CPUs in a placement group and runs two actors inside it;
and prints what each step did. It exits with status 0 when every check passed.
"""

from __future__ import annotations

import sys
import time

import numpy as np

import raylite as ray
from raylite.util import placement_group, remove_placement_group
from raylite.util.scheduling_strategies import PlacementGroupSchedulingStrategy

SAMPLES_PER_TASK = 200_000
NUM_TASKS = 8


@ray.remote
def count_inside_circle(seed: int, samples: int) -> int:
    """How many of `samples` random points in the unit square fall inside the quarter circle."""
    rng = np.random.default_rng(seed)
    x, y = rng.random(samples), rng.random(samples)
    return int(np.count_nonzero(x * x + y * y <= 1.0))


@ray.remote
def estimate_pi(samples: int, *inside_counts: int) -> float:
    """Fan-in: the refs passed as arguments arrive here as plain ints."""
    return 4.0 * sum(inside_counts) / (samples * len(inside_counts))


@ray.remote
class Tally:
    """An actor: state that lives in one worker process, updated by calls in order."""

    def __init__(self) -> None:
        self.totals: dict[str, float] = {}

    def add(self, key: str, value: float) -> None:
        self.totals[key] = self.totals.get(key, 0.0) + value

    def snapshot(self) -> dict[str, float]:
        return dict(self.totals)


@ray.remote
def column_sums(matrix: np.ndarray, start: int, stop: int, tally) -> float:
    """Reads its rows of the shared array (zero-copy) and reports to the actor it was handed."""
    part = float(matrix[start:stop].sum())
    ray.get(tally.add.remote("matrix", part))
    return part


@ray.remote(num_cpus=1)
class Shard:
    def __init__(self, index: int) -> None:
        self.index = index

    def where(self) -> tuple[int, str]:
        return self.index, ray.get_runtime_context().get_node_id()


def children_after_shutdown(wait_s: float = 3.0) -> list[int]:
    """Child processes of this driver still alive after shutdown() (none, once they exit)."""
    import psutil

    me = psutil.Process()
    deadline = time.monotonic() + wait_s
    while True:
        alive = []
        for child in me.children(recursive=True):
            try:
                if child.status() != psutil.STATUS_ZOMBIE:
                    alive.append(child.pid)
            except psutil.NoSuchProcess:
                pass
        if not alive or time.monotonic() > deadline:
            return alive
        time.sleep(0.02)


def step(title: str) -> float:
    print(f"\n== {title}", flush=True)
    return time.perf_counter()


def done(started: float, line: str) -> None:
    print(f"   {line}  [{(time.perf_counter() - started) * 1e3:.0f} ms]", flush=True)


def main() -> int:
    started = step("start a local cluster")
    ray.init(num_cpus=2)
    cpus = ray.cluster_resources().get("CPU")
    done(started, f"{len(ray.nodes())} node, {cpus:g} CPUs")

    started = step(f"fan out {NUM_TASKS} Monte Carlo tasks, fan in to one")
    counts = [count_inside_circle.remote(seed, SAMPLES_PER_TASK) for seed in range(NUM_TASKS)]
    pi = ray.get(estimate_pi.remote(SAMPLES_PER_TASK, *counts))
    assert abs(pi - np.pi) < 0.01, pi
    done(started, f"pi ~= {pi:.5f} from {NUM_TASKS * SAMPLES_PER_TASK:,} samples")

    started = step("put a 32 MiB array once; tasks read it from shared memory")
    matrix = np.arange(4 * 1024 * 1024, dtype=np.float64).reshape(4096, 1024)
    matrix_ref = ray.put(matrix)
    tally = Tally.remote()
    rows = matrix.shape[0] // 4
    parts = ray.get([column_sums.remote(matrix_ref, i * rows, (i + 1) * rows, tally)
                     for i in range(4)])
    round_trip = ray.get(matrix_ref)
    assert np.array_equal(round_trip, matrix)
    assert sum(parts) == float(matrix.sum())
    totals = ray.get(tally.snapshot.remote())
    assert totals["matrix"] == float(matrix.sum()), totals
    done(started, f"4 tasks summed {matrix.nbytes >> 20} MiB; the Tally actor agrees: "
                  f"{totals['matrix']:.6g}")

    started = step("reserve 2 CPUs in a placement group and run 2 actors in it")
    pg = placement_group([{"CPU": 1}, {"CPU": 1}], strategy="PACK")
    ray.get(pg.ready(), timeout=30)
    shards = [Shard.options(scheduling_strategy=PlacementGroupSchedulingStrategy(
        placement_group=pg, placement_group_bundle_index=i)).remote(i) for i in range(2)]
    placed = ray.get([s.where.remote() for s in shards])
    assert [index for index, _ in placed] == [0, 1], placed
    for shard in shards:
        ray.kill(shard)
    remove_placement_group(pg)
    done(started, f"bundles {[i for i, _ in placed]} placed on node {placed[0][1][:8]}; group removed")

    started = step("shut down")
    ray.shutdown()
    left = children_after_shutdown()
    assert not left, f"processes left behind: {left}"
    done(started, "the cluster's processes are gone")
    print("\nThe dashboard link printed above closed with the demo's cluster. To keep one up and look\n"
          "around: `raylite start --head` (it prints the dashboard's link), run your programs, then\n"
          "`raylite stop`.")
    print("\ndemo finished: all checks passed")
    return 0


if __name__ == "__main__":
    sys.exit(main())
