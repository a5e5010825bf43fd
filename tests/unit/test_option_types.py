"""Task and actor options of the wrong type are a TypeError naming the keyword and the types Ray
accepts; out-of-range counts and too-fine resource fractions are ValueErrors in Ray's words."""

from __future__ import annotations

import re

import pytest

import raylite


def f():
    return 1


class A:
    pass


@pytest.mark.parametrize("keyword", ["max_retries", "max_calls"])
def test_a_float_count_is_a_type_error_with_rays_wording(keyword):
    expected = f"The type of keyword '{keyword}' must be {(int, type(None))}, but received type {float}"
    with pytest.raises(TypeError, match=re.escape(expected)):
        raylite.remote(**{keyword: 0.5})(f)


def test_actor_and_num_returns_types():
    with pytest.raises(TypeError, match=re.escape(f"must be {(int, str, type(None))}")):
        raylite.remote(num_returns=1.5)(f)
    with pytest.raises(TypeError, match="The type of keyword 'max_restarts'"):
        raylite.remote(max_restarts=0.5)(A)
    with pytest.raises(TypeError, match="The type of keyword 'get_if_exists'"):
        raylite.remote(A).options(get_if_exists="yes")


def test_counts_below_minus_one_and_too_fine_fractions_are_value_errors():
    with pytest.raises(ValueError, match="The keyword 'max_retries' only accepts None, 0, -1 or a positive integer"):
        raylite.remote(max_retries=-5)(f)
    with pytest.raises(ValueError, match="The keyword 'max_calls' only accepts None, 0 or a positive integer"):
        raylite.remote(max_calls=-1)(f)
    with pytest.raises(ValueError, match="resource num_gpus cannot go beyond 0.0001"):
        raylite.remote(num_gpus=0.0000001)(f)
    with pytest.raises(ValueError, match="resource custom cannot go beyond 0.0001"):
        raylite.remote(resources={"custom": 0.0000001})(f)
