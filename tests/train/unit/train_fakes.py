"""An in-process worker group: every rank is a thread running the real WorkerRuntime.

It stands in for the actor group behind the controller's WorkerGroup seam, so the
controller, sessions, reports, storage and checkpoint logic run for real without a
cluster. Ranks share one process, so torch.distributed is not available here (the
torch backend has its own multi-process tests).
"""

from __future__ import annotations

import time

from raylite.train._internal.messages import RankInfo, WorkerMetadata, WorkerPoll, WorkerState
from raylite.train._internal.worker import WorkerRuntime


class ThreadWorkerGroup:
    instances: list[ThreadWorkerGroup] = []

    def __init__(self, num_workers: int, *, node_ids: list[str] | None = None) -> None:
        self.n = num_workers
        self.node_ids = node_ids or ["local"] * num_workers
        self.runtimes: list[WorkerRuntime] = []
        self.specs = []
        self.done: set[int] = set()
        self.shut_down = False
        ThreadWorkerGroup.instances.append(self)

    def start(self, make_spec, payload) -> None:
        metas = [
            WorkerMetadata(node, "127.0.0.1", "host", 1000 + i, 29500, ())
            for i, node in enumerate(self.node_ids)
        ]
        for rank in range(self.n):
            rt = WorkerRuntime(thread_local_session=True)
            info = RankInfo(rank, rank, 0, self.n, self.n)
            spec = make_spec(info, metas[rank], metas[0])
            spec.peers = tuple(metas)
            self.specs.append(spec)
            rt.start(spec, payload)
            self.runtimes.append(rt)

    def poll(self, timeout_s: float) -> list[WorkerPoll]:
        deadline = time.monotonic() + timeout_s
        while True:
            out = []
            for rank, rt in enumerate(self.runtimes):
                if rank in self.done:
                    continue
                p = rt.poll(0.0)
                if p.reports or p.state is not WorkerState.RUNNING:
                    out.append(p)
                    if p.state is not WorkerState.RUNNING:
                        self.done.add(rank)
            if out or time.monotonic() >= deadline:
                return out
            time.sleep(0.002)

    def shutdown(self) -> None:
        # Threads cannot be killed: ask each loop to stop at its next report and wait,
        # so a stale rank never writes into the next attempt's checkpoint folders.
        self.shut_down = True
        for rt in self.runtimes:
            rt.stop()
        for rt in self.runtimes:
            rt.join(timeout_s=30)
