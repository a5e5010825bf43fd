"""Serve's public errors under Ray's names (`ray.serve.exceptions`)."""

from __future__ import annotations

import math

from raylite.exceptions import RayError


class RayServeException(RayError):
    """Base of Serve's own errors (bad deployment options, a failed deploy, ...)."""


class BackPressureError(RayServeException):
    """A deployment's queue is full: `max_queued_requests` requests already wait for a replica.

    Over HTTP this is a 503, or what the deployment's BackpressureConfig says (`status_code`
    429 and a `Retry-After` of `retry_after_s`). Slow down, add replicas (`num_replicas`,
    autoscaling) or raise `max_queued_requests`.
    """

    def __init__(self, *, num_queued_requests: int = 0, max_queued_requests: int = 0,
                 deployment: str = "", status_code: int = 503, retry_after_s: float | None = None) -> None:
        self.num_queued_requests = num_queued_requests
        self.max_queued_requests = max_queued_requests
        self.deployment = deployment
        self.status_code = status_code
        self.retry_after_s = retry_after_s
        super().__init__(
            f"Request dropped due to backpressure: deployment {deployment!r} already has "
            f"{num_queued_requests} queued requests (max_queued_requests={max_queued_requests}). "
            "Add replicas or raise max_queued_requests.")

    def __reduce__(self):
        return (_rebuild_backpressure, (self.num_queued_requests, self.max_queued_requests, self.deployment,
                                        self.status_code, self.retry_after_s))

    def http_headers(self) -> list[tuple[bytes, bytes]]:
        """The `Retry-After` header (whole seconds, rounded up) when the deployment asks for one."""
        if self.retry_after_s is None:
            return []
        return [(b"retry-after", str(math.ceil(self.retry_after_s)).encode())]

    @property
    def message(self) -> str:
        return str(self)


def _rebuild_backpressure(n: int, m: int, d: str, status: int = 503, retry: float | None = None) -> BackPressureError:
    return BackPressureError(num_queued_requests=n, max_queued_requests=m, deployment=d, status_code=status,
                             retry_after_s=retry)


class RequestCancelledError(RayServeException):
    """The request was cancelled (its caller cancelled the response, or the HTTP client left)."""


class DeploymentUnavailableError(RayServeException):
    """The deployment has no replica able to take requests (all failed or it was deleted)."""


__all__ = ["BackPressureError", "DeploymentUnavailableError", "RayServeException", "RequestCancelledError"]
