"""XGBoostConfig and the backend that joins every rank to XGBoost's collective.

XGBoost's distributed mode is its own "rabit" collective: a tracker process that the
workers dial, after which ``xgboost.train`` allreduces histograms between them. Ray
starts the tracker on the driver; raylite starts it on rank 0's worker (rank 0 starts
before the others, at the address and port it reported free), so the driver holds
no socket that outlives a failed attempt and a restart brings a fresh tracker with
fresh workers. Every rank then enters ``xgboost.collective.CommunicatorContext``
around the user's loop, so plain ``xgboost.train(...)`` inside the loop trains one
model across all ranks. ``dmlc_task_id`` carries the Train rank, and the tracker
sorts by it, so XGBoost's rank equals ``train.get_context().get_world_rank()``.
"""

from __future__ import annotations

import os
import threading
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from raylite.train._internal.gbdt import limit_threads
from raylite.train.config import BackendConfig

if TYPE_CHECKING:
    from raylite.train._internal.session import WorkerSpec

_COMMUNICATORS = ("rabit",)


@dataclass(init=False)
class XGBoostConfig(BackendConfig):
    """How the workers' XGBoost collective is set up; only ``"rabit"`` exists (as in Ray)."""

    xgboost_communicator: str = "rabit"
    extra: dict[str, Any] = field(default_factory=dict)

    def __init__(self, xgboost_communicator: str = "rabit") -> None:
        if xgboost_communicator not in _COMMUNICATORS:
            raise NotImplementedError(
                f"XGBoostConfig(xgboost_communicator={xgboost_communicator!r}) is not supported: "
                "use 'rabit' (the only communicator Ray Train sets up)."
            )
        self.xgboost_communicator = xgboost_communicator
        self.extra = {}

    @property
    def backend_name(self) -> str | None:
        return self.xgboost_communicator

    def to_dict(self) -> dict[str, Any]:
        return {"xgboost_communicator": self.xgboost_communicator}


@dataclass
class XGBoostRabitBackend:
    """Per-rank set-up: rank 0 runs the tracker, every rank joins the collective."""

    tracker_host: str
    tracker_port: int
    timeout_s: int = 1800

    def prepare(self, spec: WorkerSpec) -> None:
        """Rank 0, before any other rank starts: open the tracker they will dial."""
        if spec.rank.world_rank != 0 or spec.rank.world_size < 2:
            return
        from xgboost.tracker import RabitTracker

        tracker = RabitTracker(
            n_workers=spec.rank.world_size,
            host_ip=self.tracker_host,
            port=self.tracker_port,
            sortby="task",
            timeout=self.timeout_s,
        )
        tracker.start()
        # wait_for returns when every worker has said goodbye; worker_args needs it running
        waiter = threading.Thread(target=tracker.wait_for, name="xgboost-tracker", daemon=True)
        waiter.start()
        self._tracker, self._waiter = tracker, waiter

    def on_start(self, spec: WorkerSpec) -> None:
        self._limits = limit_threads(spec, "xgboost")
        if spec.rank.world_size < 2:
            return  # one rank: plain single-process xgboost, as in Ray
        from xgboost.collective import CommunicatorContext

        args: dict[str, Any] = {
            "dmlc_communicator": "rabit",
            "dmlc_tracker_uri": self.tracker_host,
            "dmlc_tracker_port": self.tracker_port,
            "dmlc_task_id": f"[xgboost.ray-rank={spec.rank.world_rank:08}]:{os.getpid()}",
            "dmlc_timeout": self.timeout_s,
        }
        context = CommunicatorContext(**args)
        context.__enter__()
        self._context = context

    def on_shutdown(self) -> None:
        context = self.__dict__.pop("_context", None)
        if context is not None:
            context.__exit__(None, None, None)
        waiter = self.__dict__.pop("_waiter", None)
        if waiter is not None:
            waiter.join(timeout=5.0)
        self.__dict__.pop("_tracker", None)
        self.__dict__.pop("_limits", None)
