"""A task that got an object as an argument and also gets the same ref passed nested in another
argument finds it at once: no question to the owner, so the task keeps its CPU, as in Ray
(Ray's test_not_release_resource). Were the CPU lent back, the queued task below would start
on a second worker meanwhile.
"""

from __future__ import annotations

import os

import pytest

import raylite as ray


@pytest.fixture(scope="module")
def one_cpu():
    if ray.is_initialized():
        ray.shutdown()
    ray.init(num_cpus=1)
    yield
    ray.shutdown()


@ray.remote
def big() -> list:
    return [1] * (1024 * 1024)  # in the object store, not inline


@ray.remote
def reads_both(value, nested):
    assert value == ray.get(nested["refs"][0])
    return os.getpid()


@ray.remote
def after(value) -> int:
    return os.getpid()


def test_a_get_of_an_argument_passed_again_nested_keeps_the_cpu(one_cpu):
    ref = big.remote()
    first = reads_both.remote(ref, {"refs": [ref]})
    second = after.remote(ref)  # queued behind the first: it runs on the same, only, worker
    assert len(set(ray.get([first, second]))) == 1
