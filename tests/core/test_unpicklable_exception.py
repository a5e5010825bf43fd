"""A task that raises an exception which cannot be pickled: the caller still gets a
RayTaskError, whose cause says, in Ray's words, that the exception isn't serializable and
carries the original traceback."""

from __future__ import annotations

import threading

import pytest

import raylite
from raylite.exceptions import RayError, RayTaskError


class HoldsALock(Exception):
    def __init__(self):
        super().__init__("holds a lock")
        self.lock = threading.Lock()


@raylite.remote(max_retries=0)
def raises_unpicklable():
    raise HoldsALock()


def test_an_unpicklable_exception_reaches_the_caller_with_rays_message(cluster):
    with pytest.raises(RayTaskError) as info:
        raylite.get(raises_unpicklable.remote())
    cause = info.value.cause
    assert type(cause) is RayError
    assert "HoldsALock isn't serializable" in str(cause)
    assert "Original exception details" in str(cause) and "holds a lock" in str(cause)


def test_ray_error_round_trips_through_bytes_and_keeps_rays_methods():
    err = RayError("stored")
    back = RayError.from_bytes(err.to_bytes())
    assert type(back) is RayError and str(back) == "stored"
    task_err = RayTaskError("f", "Traceback...", ValueError("bad"))
    dual = task_err.make_dual_exception_instance()
    assert isinstance(dual, RayTaskError) and isinstance(dual, ValueError)
