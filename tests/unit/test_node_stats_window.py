"""A node with thousands of actors reads the /proc figures of a bounded number of workers per
statistics sample, in turn, and reports the last figures of the others."""

from __future__ import annotations

from raylite._core.node.stats import NodeStats


class _FakePsutil:
    """psutil's surface NodeStats uses, counting process reads."""

    class NoSuchProcess(Exception):
        pass

    AccessDenied = ZombieProcess = NoSuchProcess

    def __init__(self) -> None:
        self.reads: list[int] = []
        outer = self

        class Process:
            def __init__(self, pid: int) -> None:
                self.pid = pid

            def cpu_percent(self, interval=None) -> float:
                return 1.0

            def memory_info(self):
                outer.reads.append(self.pid)

                class Info:
                    rss = self.pid * 1000

                return Info()

        self.Process = Process


def test_workers_are_read_in_turn_when_there_are_many():
    stats = NodeStats(max_sampled=3)
    fake = stats._psutil = _FakePsutil()
    workers = [{"pid": pid, "state": "ACTOR"} for pid in range(100, 110)]
    seen: set[int] = set()
    for _ in range(4):
        fake.reads.clear()
        rows = stats._workers(workers)
        assert len(fake.reads) == 3  # never more than max_sampled /proc reads per sample
        assert [r["pid"] for r in rows] == list(range(100, 110))  # every worker is reported
        seen.update(fake.reads)
    assert seen == set(range(100, 110))  # ... and each is read in its turn
    assert all(r["rss_bytes"] == r["pid"] * 1000 for r in stats._workers(workers) if r["pid"] in seen)


def test_few_workers_are_all_read_every_time():
    stats = NodeStats(max_sampled=3)
    fake = stats._psutil = _FakePsutil()
    stats._workers([{"pid": 1}, {"pid": 2}])
    stats._workers([{"pid": 1}, {"pid": 2}])
    assert fake.reads == [1, 2, 1, 2]
