"""Errors a training run raises to the driver, each naming who failed and what to do."""

from __future__ import annotations

from raylite.exceptions import PlacementGroupSchedulingError


class TrainingFailedError(RuntimeError):
    """The training loop failed and ``FailureConfig(max_failures)`` allowed no more restarts.

    ``rank`` is the failing worker's rank, ``traceback_str`` its traceback, and
    ``__cause__`` the original exception when it could be carried back (so
    ``isinstance(err.__cause__, ValueError)`` works). ``worker_failures`` maps each
    failed rank to its exception, as Ray's does.
    """

    def __init__(
        self,
        message: str,
        *,
        rank: int | None = None,
        traceback_str: str = "",
        worker_failures: dict[int, BaseException] | None = None,
    ) -> None:
        super().__init__(message)
        self.rank = rank
        self.traceback_str = traceback_str
        self.worker_failures = dict(worker_failures or {})


class TrainingResourcesError(PlacementGroupSchedulingError, ValueError):
    """The worker group can never fit this cluster; the message has request and capacity."""


class WorkerGroupStartError(RuntimeError):
    """The worker actors could not be placed or started."""
