"""`ray._private.test_utils.wait_for_condition`, as Ray's documentation examples use it."""

import itertools

import pytest

from raylite._private.test_utils import wait_for_condition


def test_returns_true_once_the_condition_holds():
    calls = itertools.count()
    assert wait_for_condition(lambda: next(calls) >= 3, timeout=5, retry_interval_ms=1) is True


def test_exceptions_are_retried_then_named_in_the_timeout():
    def broken():
        raise KeyError("not yet")

    with pytest.raises(RuntimeError, match="KeyError"):
        wait_for_condition(broken, timeout=0.05, retry_interval_ms=5)
    with pytest.raises(KeyError):
        wait_for_condition(broken, timeout=1, raise_exceptions=True)


def test_kwargs_reach_the_predictor():
    assert wait_for_condition(lambda x: x == 2, x=2, timeout=1)
