"""The real worker group: N TrainWorker actors in one placement group.

Uses only the public raylite API. Ranks follow placement: workers on the same node
get consecutive ranks (local ranks count within a node), and rank 0's node address
plus a port it found free becomes the torch.distributed rendezvous.

Each rank always has one ``poll`` call in flight; ``poll()`` waits until any of them
answers, so reports reach the driver as soon as they are made and a dead worker
(its poll raises RayActorError) is noticed at once.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

from raylite.train._internal.controller import SpecFactory
from raylite.train._internal.messages import (
    RankInfo,
    WorkerError,
    WorkerMetadata,
    WorkerPoll,
    WorkerState,
)
from raylite.train._internal.progress import ProgressReporter
from raylite.train._internal.worker import TrainWorker
from raylite.train.error import WorkerGroupStartError

_remote_worker_cls: Any = None


def _remote_worker() -> Any:
    global _remote_worker_cls
    if _remote_worker_cls is None:
        import raylite

        _remote_worker_cls = raylite.remote(TrainWorker)
    return _remote_worker_cls


def assign_ranks(metas: list[WorkerMetadata]) -> list[tuple[int, RankInfo]]:
    """(actor index, RankInfo) in rank order; a node's workers get consecutive ranks.

    Example: nodes [a, b, a] -> actor 0 rank 0 (a, local 0), actor 2 rank 1 (a,
    local 1), actor 1 rank 2 (b, local 0).
    """
    node_order: list[str] = []
    for m in metas:
        if m.node_id not in node_order:
            node_order.append(m.node_id)
    by_node = {n: [i for i, m in enumerate(metas) if m.node_id == n] for n in node_order}
    out: list[tuple[int, RankInfo]] = []
    for node_rank, node in enumerate(node_order):
        members = by_node[node]
        for local_rank, actor_index in enumerate(members):
            info = RankInfo(len(out), local_rank, node_rank, len(metas), len(members))
            out.append((actor_index, info))
    return out


class ActorWorkerGroup:
    """Starts, polls and stops the training actors of one attempt."""

    def __init__(
        self,
        num_workers: int,
        bundle: dict[str, float],
        placement_strategy: str,
        reporter: ProgressReporter | None = None,
        *,
        worker_poll_s: float = 1.0,
        placement_timeout_s: float = 600.0,
        use_placement_group: bool = True,
    ) -> None:
        self._n = num_workers
        self._bundle = dict(bundle)
        self._strategy = placement_strategy
        self._reporter = reporter
        self._worker_poll_s = worker_poll_s
        self._placement_timeout_s = placement_timeout_s
        self._use_pg = use_placement_group
        self._pg: Any = None
        self._actors: list[Any] = []  # in rank order
        self._metas: list[WorkerMetadata] = []
        self._inflight: dict[Any, tuple[int, Any]] = {}

    # -- start ----------------------------------------------------------------
    def start(self, make_spec: SpecFactory, payload: tuple[Callable[..., Any], Any]) -> None:
        import raylite

        actors = self._create_actors()
        self._actors = list(actors)  # so shutdown() reaches them even if start fails below
        metas = raylite.get([a.metadata.remote() for a in actors])
        order = assign_ranks(metas)
        self._actors = [actors[i] for i, _ in order]
        self._metas = [metas[i] for i, _ in order]
        rank0 = self._metas[0]
        if self._reporter is not None:
            self._reporter.placed(
                [f"rank {r.world_rank}: pid {metas[i].pid} on {metas[i].node_ip}" for i, r in order]
            )
        payload_ref = raylite.put(payload)
        specs = [(actors[i], make_spec(info, metas[i], rank0)) for i, info in order]
        for _, spec in specs:
            spec.peers = tuple(self._metas)
        if getattr(specs[0][1].backend, "start_ranks_together", False):
            # a backend whose first collective call blocks until every rank has joined (and may
            # hold the GIL meanwhile, so rank 0's start could not even return): all at once
            raylite.get([actor.start.remote(spec, payload_ref) for actor, spec in specs])
        else:
            # rank 0 first: its start opens what the others connect to (the rendezvous store),
            # so none of them reaches a port that is not listening yet and backs off
            raylite.get(specs[0][0].start.remote(specs[0][1], payload_ref))
            raylite.get([actor.start.remote(spec, payload_ref) for actor, spec in specs[1:]])
        for rank in range(self._n):
            self._issue_poll(rank)

    def _create_actors(self) -> list[Any]:
        from raylite.util import placement_group
        from raylite.util.scheduling_strategies import PlacementGroupSchedulingStrategy

        if self._use_pg:
            self._pg = placement_group(
                [dict(self._bundle) for _ in range(self._n)], strategy=self._strategy
            )
            self._wait_for_placement()
        opts: dict[str, Any] = {
            "num_cpus": self._bundle.get("CPU", 0),
            "num_gpus": self._bundle.get("GPU", 0),
            "max_restarts": 0,
        }
        extra = {k: v for k, v in self._bundle.items() if k not in ("CPU", "GPU")}
        if extra:
            opts["resources"] = extra
        cls = _remote_worker()
        if self._pg is None:
            return [cls.options(**opts).remote() for _ in range(self._n)]
        return [
            cls.options(
                **opts,
                scheduling_strategy=PlacementGroupSchedulingStrategy(
                    placement_group=self._pg, placement_group_bundle_index=i
                ),
            ).remote()
            for i in range(self._n)
        ]

    def _wait_for_placement(self) -> None:
        deadline = time.monotonic() + self._placement_timeout_s
        warned = False
        while not self._pg.wait(timeout_seconds=min(10.0, self._placement_timeout_s)):
            if time.monotonic() >= deadline:
                raise WorkerGroupStartError(
                    f"{self._n} training workers x {self._bundle} could not be placed within "
                    f"{self._placement_timeout_s:.0f}s: the cluster has the capacity but other "
                    "tasks or actors hold it. Free resources or lower ScalingConfig(num_workers)."
                )
            if not warned and self._reporter is not None:
                self._reporter.failed(
                    f"waiting for resources: {self._n} workers x {self._bundle} are busy elsewhere",
                    "still waiting",
                )
                warned = True

    # -- poll -----------------------------------------------------------------
    def _issue_poll(self, rank: int) -> None:
        ref = self._actors[rank].poll.remote(self._worker_poll_s)
        self._inflight[_key(ref)] = (rank, ref)

    def poll(self, timeout_s: float) -> list[WorkerPoll]:
        import raylite
        from raylite.exceptions import RayError

        refs = [ref for _, ref in self._inflight.values()]
        if not refs:
            return []
        ready, _ = raylite.wait(refs, num_returns=1, timeout=timeout_s)
        out = []
        for ref in ready:
            rank, _ = self._inflight.pop(_key(ref))
            try:
                result: WorkerPoll = raylite.get(ref)
            except RayError as e:
                meta = self._metas[rank]
                out.append(
                    WorkerPoll(
                        rank,
                        WorkerState.FAILED,
                        error=WorkerError(
                            rank, f"{type(e).__name__}: {e}", None, True, meta.node_ip, meta.pid
                        ),
                    )
                )
                continue
            if result.state is WorkerState.RUNNING:
                self._issue_poll(rank)
            out.append(result)
        return out

    # -- shutdown ---------------------------------------------------------------
    def shutdown(self) -> None:
        import raylite
        from raylite.util import remove_placement_group

        for actor in self._actors:
            try:
                raylite.kill(actor, no_restart=True)
            except Exception:  # noqa: BLE001 - already gone is fine
                pass
        self._actors, self._inflight = [], {}
        if self._pg is not None:
            try:
                remove_placement_group(self._pg)
            except Exception:  # noqa: BLE001 - already removed is fine
                pass
            self._pg = None


def _key(ref: Any) -> Any:
    hex_ = getattr(ref, "hex", None)
    return hex_() if callable(hex_) else ref
