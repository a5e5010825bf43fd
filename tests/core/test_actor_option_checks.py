"""Checks Ray makes on an actor's options and code before anything starts: get_if_exists needs
a name, in-order execution cannot be had from async or threaded actors, a group of zero
threads is refused, and a class or function that pickles to more than 100 MB is refused."""

from __future__ import annotations

import pytest

import raylite


class Plain:
    def ping(self):
        return "ok"


class Async:
    async def ping(self):
        return "ok"


def test_get_if_exists_without_a_name_is_refused():
    with pytest.raises(ValueError, match="The actor name must be specified to use `get_if_exists`"):
        raylite.remote(Plain).options(get_if_exists=True)
    raylite.remote(Plain).options(get_if_exists=True, name="named")  # with a name it is fine


def test_in_order_execution_cannot_be_asked_of_async_or_threaded_actors():
    with pytest.raises(ValueError, match="async actors, Ray can't execute actor tasks in order"):
        raylite.remote(Async).options(allow_out_of_order_execution=False)
    with pytest.raises(ValueError, match="multi-threaded actors, Ray can't execute actor tasks in order"):
        raylite.remote(max_concurrency=4, allow_out_of_order_execution=False)(Plain)


def test_a_concurrency_group_of_zero_names_rays_rule():
    with pytest.raises(ValueError, match="max_concurrency must be greater than 0"):
        raylite.remote(concurrency_groups={"io": 0})(Plain)


def test_code_that_pickles_too_large_is_refused_at_remote(cluster):
    big = bytearray(101 * 1000 * 1000)

    @raylite.remote
    def uses_big():
        return len(big)

    class Holder:
        def size(self):
            return len(big)

    with pytest.raises(ValueError, match=r"The remote function .*uses_big is too large"):
        uses_big.remote()
    with pytest.raises(ValueError, match="The actor Holder is too large"):
        raylite.remote(Holder).remote()
