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


class WorkerGroupError(TrainingFailedError):
    """Training workers failed (Ray 2.60's name): ``worker_failures`` maps rank -> exception."""

    def __init__(self, error_message: str, worker_failures: dict[int, BaseException] | None = None, *,
                 rank: int | None = None, traceback_str: str = "") -> None:
        super().__init__(error_message, rank=rank, traceback_str=traceback_str,
                         worker_failures=worker_failures)


class ControllerError(TrainingFailedError):
    """The run failed outside the training workers (Ray 2.60's name); the cause is
    ``controller_failure``."""

    def __init__(self, controller_failure: BaseException, message: str = "") -> None:
        super().__init__(message or f"Training failed in the controller: {controller_failure}")
        self.controller_failure = controller_failure


class TrainingResourcesError(PlacementGroupSchedulingError, ValueError):
    """The worker group can never fit this cluster; the message has request and capacity."""


class WorkerGroupStartError(RuntimeError):
    """The worker actors could not be placed or started."""
